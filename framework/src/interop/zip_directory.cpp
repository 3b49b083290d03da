#include "interop/zip_directory.hpp"

#include <zlib.h>
#include <torchbus/error.hpp>

#include <algorithm>
#include <fstream>

namespace torchbus::detail {

namespace {

constexpr std::uint32_t kEndOfDirectory = 0x06054b50;
constexpr std::uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr std::uint32_t kZip64Locator = 0x07064b50;
constexpr std::uint32_t kDirectoryEntry = 0x02014b50;
constexpr std::uint16_t kZip64ExtraField = 0x0001;
constexpr std::size_t kEndOfDirectorySize = 22;
constexpr std::size_t kZip64LocatorSize = 20;
constexpr std::size_t kZip64EndOfDirectorySize = 56;
constexpr std::size_t kDirectoryEntrySize = 46;
constexpr std::size_t kLongestComment = 0xFFFF;

/// The little-endian `Unsigned` at `at` of `bytes`.
template <typename Unsigned>
Unsigned little_endian(const std::string& bytes, std::size_t at) {
  Unsigned value = 0;
  for (std::size_t i = 0; i < sizeof(Unsigned); ++i) {
    value |= static_cast<Unsigned>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

/// `size` bytes of `in` from `offset`; throws DataError when the file ends before.
std::string read_at(std::ifstream& in, std::uint64_t offset, std::uint64_t size, const char* what) {
  std::string bytes(size, '\0');
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  TORCHBUS_CHECK(in.gcount() == static_cast<std::streamsize>(size), DataError, "its ", what, " (",
                 size, " bytes at offset ", offset, ") passes the end of the file");
  return bytes;
}

/// Where the central directory lies and how many entries it has.
struct Directory {
  std::uint64_t offset = 0, size = 0, entries = 0;
};

Directory find_directory(std::ifstream& in, std::uint64_t file_size) {
  TORCHBUS_CHECK(file_size >= kEndOfDirectorySize, DataError, "it is ", file_size,
                 " bytes long, shorter than a zip archive's end record");
  // The end record is the last 22 bytes, followed by a comment of up to 65535 bytes.
  const auto tail_size = std::min<std::uint64_t>(file_size, kEndOfDirectorySize + kLongestComment);
  const auto tail_offset = file_size - tail_size;
  const auto tail = read_at(in, tail_offset, tail_size, "end");
  std::size_t end = tail.size() - kEndOfDirectorySize + 1;
  do {
    --end;
    if (little_endian<std::uint32_t>(tail, end) == kEndOfDirectory) break;
    TORCHBUS_CHECK(end > 0, DataError, "it has no zip end-of-central-directory record");
  } while (true);
  Directory directory{little_endian<std::uint32_t>(tail, end + 16),
                      little_endian<std::uint32_t>(tail, end + 12),
                      little_endian<std::uint16_t>(tail, end + 10)};
  // zip64: the end record's fields overflow into the zip64 end record a locator before it names.
  const auto end_offset = tail_offset + end;
  if (end_offset >= kZip64LocatorSize) {
    const auto locator = read_at(in, end_offset - kZip64LocatorSize, kZip64LocatorSize, "end");
    if (little_endian<std::uint32_t>(locator, 0) == kZip64Locator) {
      const auto zip64_offset = little_endian<std::uint64_t>(locator, 8);
      const auto zip64 =
          read_at(in, zip64_offset, kZip64EndOfDirectorySize, "zip64 end-of-central-directory");
      TORCHBUS_CHECK(little_endian<std::uint32_t>(zip64, 0) == kZip64EndOfDirectory, DataError,
                     "its zip64 end-of-central-directory record at offset ", zip64_offset,
                     " has no signature");
      directory = Directory{little_endian<std::uint64_t>(zip64, 48),
                            little_endian<std::uint64_t>(zip64, 40),
                            little_endian<std::uint64_t>(zip64, 32)};
    }
  }
  TORCHBUS_CHECK(directory.offset <= file_size && directory.size <= file_size - directory.offset,
                 DataError, "its central directory (", directory.size, " bytes at offset ",
                 directory.offset, ") passes the end of the file (", file_size, " bytes)");
  return directory;
}

/// The zip64 extra field of an entry overrides its 32-bit sizes, in this order, where they are all
/// ones; the uncompressed size is the only one read here.
std::uint64_t zip64_size(const std::string& extra, std::uint64_t size) {
  for (std::size_t at = 0; at + 4 <= extra.size();) {
    const auto id = little_endian<std::uint16_t>(extra, at);
    const auto length = little_endian<std::uint16_t>(extra, at + 2);
    if (id == kZip64ExtraField && length >= 8 && at + 4 + 8 <= extra.size()) {
      return little_endian<std::uint64_t>(extra, at + 4);
    }
    at += 4 + length;
  }
  return size;
}

}  // namespace

std::uint32_t zip_crc32(const void* data, std::size_t size) {
  return static_cast<std::uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), static_cast<const Bytef*>(data), size));
}

std::vector<ZipEntry> read_zip_directory(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TORCHBUS_CHECK(in.good(), DataError, "it cannot be opened");
  const auto file_size = static_cast<std::uint64_t>(in.tellg());
  const auto directory = find_directory(in, file_size);
  const auto bytes = read_at(in, directory.offset, directory.size, "central directory");
  std::vector<ZipEntry> entries;
  std::size_t at = 0;
  for (std::uint64_t i = 0; i < directory.entries; ++i) {
    TORCHBUS_CHECK(at + kDirectoryEntrySize <= bytes.size() &&
                       little_endian<std::uint32_t>(bytes, at) == kDirectoryEntry,
                   DataError, "entry ", i, " of its central directory (of ", directory.entries,
                   ") is cut short or has no signature");
    const auto name_length = little_endian<std::uint16_t>(bytes, at + 28);
    const auto extra_length = little_endian<std::uint16_t>(bytes, at + 30);
    const auto comment_length = little_endian<std::uint16_t>(bytes, at + 32);
    const auto next = at + kDirectoryEntrySize + name_length + extra_length + comment_length;
    TORCHBUS_CHECK(next <= bytes.size(), DataError, "entry ", i,
                   " of its central directory passes the directory's end");
    ZipEntry entry;
    entry.crc32 = little_endian<std::uint32_t>(bytes, at + 16);
    entry.size = little_endian<std::uint32_t>(bytes, at + 24);
    entry.name = bytes.substr(at + kDirectoryEntrySize, name_length);
    if (entry.size == 0xFFFFFFFFu) {
      entry.size = zip64_size(bytes.substr(at + kDirectoryEntrySize + name_length, extra_length),
                              entry.size);
    }
    entries.push_back(std::move(entry));
    at = next;
  }
  return entries;
}

}  // namespace torchbus::detail
