#pragma once

// SHA-256 (FIPS 180-4) through OpenSSL's EVP digest API, for the checksum of a run's final
// parameters and of the files a run starts from.

#include <openssl/evp.h>

#include <cstddef>
#include <filesystem>
#include <memory>
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
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context_;
};

/// The SHA-256 of the file at `path` (64 lowercase hex digits); throws std::runtime_error naming
/// the file when it cannot be read.
std::string file_sha256(const std::filesystem::path& path);

}  // namespace train
