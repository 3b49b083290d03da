#pragma once

// Writing IDX files (MNIST's format: big-endian 32-bit header fields) for torchbus-train's tests.

#include <cstdint>
#include <fstream>

namespace torchbus::testing {

/// Writes `value` to `out` as 4 big-endian bytes.
inline void write_big_endian(std::ofstream& out, std::uint32_t value) {
  const char bytes[4] = {char(value >> 24), char(value >> 16), char(value >> 8), char(value)};
  out.write(bytes, 4);
}

}  // namespace torchbus::testing
