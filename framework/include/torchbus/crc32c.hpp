#pragma once

/// \file
/// CRC-32C (Castagnoli), the checksum of checkpoint files and of TensorBoard's record framing.

#include <cstddef>
#include <cstdint>

namespace torchbus {

/// CRC-32C of `size` bytes, continuing from `crc` (0 to start).
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

}  // namespace torchbus
