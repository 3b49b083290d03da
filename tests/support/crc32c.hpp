#pragma once

// Test support: CRC-32C (Castagnoli) with Boost.CRC, for tests that frame or check bytes
// themselves (the framework's CRC-32C is private to it).

#include <boost/crc.hpp>

#include <cstddef>
#include <cstdint>

namespace torchbus::testing {

/// CRC-32C of `size` bytes.
inline std::uint32_t crc32c(const void* data, std::size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

}  // namespace torchbus::testing
