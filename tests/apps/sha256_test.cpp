// torchbus-train's SHA-256 (OpenSSL's EVP digest), fed in uneven pieces, against coreutils'
// sha256sum of the same bytes.

#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>
#include <torchbus-train/sha256.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using torchbus::testing::TempDir;

namespace {

/// The first field sha256sum prints for the file at `path`.
std::string sha256sum(const std::filesystem::path& path) {
  FILE* pipe = popen(("sha256sum '" + path.string() + "'").c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  std::array<char, 65> digest{};
  const bool read = fgets(digest.data(), digest.size(), pipe) != nullptr;
  pclose(pipe);
  BOOST_REQUIRE(read);
  return digest.data();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sha256)

BOOST_AUTO_TEST_CASE(equals_sha256sum_across_block_boundaries) {
  TempDir dir("sha256_test");
  // Sizes around SHA-256's 64-byte block and its 56-byte padding limit, and a larger one.
  for (const std::size_t size : {0, 1, 3, 55, 56, 63, 64, 65, 119, 128, 100000}) {
    std::string bytes(size, '\0');
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + size) % 256);
    const auto file = dir.path / ("bytes-" + std::to_string(size));
    std::ofstream(file, std::ios::binary) << bytes;
    train::Sha256 hash;
    for (std::size_t at = 0, piece = 1; at < size; at += piece, piece = piece * 3 % 97 + 1) {
      hash.update(bytes.data() + at, std::min(piece, size - at));
    }
    BOOST_TEST(hash.hex_digest() == sha256sum(file), "size " << size);
  }
}

BOOST_AUTO_TEST_CASE(gives_the_fips_180_example_digest) {
  train::Sha256 hash;
  hash.update("abc", 3);
  BOOST_TEST(hash.hex_digest() ==
             "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

BOOST_AUTO_TEST_SUITE_END()
