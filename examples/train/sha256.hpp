#pragma once

// SHA-256 (FIPS 180-4), for the checksum of a run's final parameters.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace train {

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  /// Hashes `size` more bytes.
  void update(const void* data, std::size_t size);
  /// Finishes and returns the digest as 64 lowercase hex digits.
  std::string hex_digest();

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

}  // namespace train
