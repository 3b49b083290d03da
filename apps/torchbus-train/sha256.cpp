#include "sha256.hpp"

#include <fstream>
#include <new>
#include <stdexcept>

namespace train {
namespace {

/// Throws when an OpenSSL call reported failure (0).
void check(int result, const char* call) {
  if (result != 1) throw std::runtime_error(std::string("SHA-256: ") + call + " failed");
}

}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
  if (!context_) throw std::bad_alloc();
  check(EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

void Sha256::update(const void* data, std::size_t size) {
  check(EVP_DigestUpdate(context_.get(), data, size), "EVP_DigestUpdate");
}

std::string Sha256::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  check(EVP_DigestFinal_ex(context_.get(), digest, &length), "EVP_DigestFinal_ex");
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += digits[digest[i] >> 4];
    hex += digits[digest[i] & 0xf];
  }
  return hex;
}

std::string file_sha256(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string() + " to hash it");
  Sha256 hash;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    hash.update(buffer, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error("cannot read " + path.string() + " to hash it");
  return hash.hex_digest();
}

}  // namespace train
