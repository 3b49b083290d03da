#pragma once

// The central directory of a zip archive (PKWARE APPNOTE 6.3, zip64 included): what each record's
// CRC-32 should be, to check the bytes LibTorch's reader hands out, which it does not check.
// Private to the framework.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace torchbus::detail {

/// The CRC-32 zip records of `size` bytes at `data` (zlib's crc32_z: ~7x Boost.CRC's speed).
std::uint32_t zip_crc32(const void* data, std::size_t size);

/// One record of a zip archive as its central directory lists it.
struct ZipEntry {
  std::string name;         ///< its path in the archive, e.g. "archive/data/0"
  std::uint32_t crc32 = 0;  ///< the CRC-32 of its uncompressed bytes (0: not recorded)
  std::uint64_t size = 0;   ///< its uncompressed size in bytes
};

/// The entries of the central directory of the zip archive `path`; throws DataError naming what
/// is malformed (no end-of-central-directory record, a directory past the end of the file, an
/// entry cut short).
std::vector<ZipEntry> read_zip_directory(const std::filesystem::path& path);

}  // namespace torchbus::detail
