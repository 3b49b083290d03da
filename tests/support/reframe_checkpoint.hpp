#pragma once

// Test support: a checkpoint whose payload is replaced while its CRC is made to match, as a forger
// (or a damage before framing) would leave it: only parsing the payload can find it.

#include <support/crc32c.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace torchbus::testing {

/// `original` (a version-2 .tbckpt whose payload has `payload_size` bytes) with its payload
/// replaced by `payload` and its CRC-32C recomputed, so that the framing is valid.
inline std::string reframe_checkpoint(const std::string& original, std::size_t payload_size,
                                      const std::string& payload) {
  // Version 2 ends its header with the payload size (8 bytes) and the CRC-32C (4 bytes) of
  // everything before it and of the payload.
  auto framed = original.substr(0, original.size() - payload_size - 12);
  for (int i = 0; i < 8; ++i) {
    framed.push_back(
        static_cast<char>((static_cast<std::uint64_t>(payload.size()) >> (8 * i)) & 0xFF));
  }
  const auto covered = framed + payload;
  const auto crc = crc32c(covered.data(), covered.size());
  for (int i = 0; i < 4; ++i) framed.push_back(static_cast<char>((crc >> (8 * i)) & 0xFF));
  return framed + payload;
}

}  // namespace torchbus::testing
