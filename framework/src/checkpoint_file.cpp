#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/crc32c.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace torchbus {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'B', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr std::size_t kHeaderSize = 8 + 4 + 8 + 8 + 4;  // magic, version, step, size, crc
constexpr const char* kTemporaryMarker = ".tmp-";

template <typename Integer>
void put(std::string& out, Integer value) {
  for (std::size_t i = 0; i < sizeof(Integer); ++i) {
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xFF));
  }
}

template <typename Integer>
Integer get(const char* in) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(Integer); ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return static_cast<Integer>(value);
}

std::string system_error(const std::string& what, const fs::path& path) {
  return detail::concat(what, " ", path.string(), ": ", std::strerror(errno));
}

void write_all(int fd, const std::string& bytes, const fs::path& path) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const auto result = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (result < 0 && errno == EINTR) continue;
    if (result < 0) throw CheckpointError(system_error("cannot write", path));
    written += static_cast<std::size_t>(result);
  }
}

void fsync_path(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw CheckpointError(system_error("cannot open for fsync", path));
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) throw CheckpointError(system_error("cannot fsync", path));
}

}  // namespace

std::string frame_checkpoint(const std::string& payload, std::int64_t step) {
  std::string framed(kMagic, sizeof(kMagic));
  framed.reserve(kHeaderSize + payload.size());
  put<std::uint32_t>(framed, kCheckpointFormatVersion);
  put<std::int64_t>(framed, step);
  put<std::uint64_t>(framed, payload.size());
  put<std::uint32_t>(framed, crc32c(payload.data(), payload.size()));
  framed += payload;
  return framed;
}

std::string read_checkpoint_payload(const fs::path& path, CheckpointHeader* header) {
  std::ifstream in(path, std::ios::binary);
  TORCHBUS_CHECK(in.good(), CheckpointError, "cannot open checkpoint ", path.string(),
                 fs::exists(path) ? " (unreadable)" : " (no such file)");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TORCHBUS_CHECK(bytes.size() >= kHeaderSize && std::memcmp(bytes.data(), kMagic, 8) == 0,
                 CheckpointError, "checkpoint ", path.string(),
                 " is not a torchbus checkpoint (no header; truncated to ", bytes.size(),
                 " bytes or another kind of file)");
  const auto version = get<std::uint32_t>(bytes.data() + 8);
  TORCHBUS_CHECK(version == kCheckpointFormatVersion, CheckpointError, "checkpoint ", path.string(),
                 " has format version ", version, "; this torchbus reads version ",
                 kCheckpointFormatVersion);
  const auto size = get<std::uint64_t>(bytes.data() + 20);
  TORCHBUS_CHECK(bytes.size() - kHeaderSize == size, CheckpointError, "checkpoint ", path.string(),
                 " is truncated or padded: its header announces ", size,
                 " payload bytes, the file holds ", bytes.size() - kHeaderSize);
  const auto expected_crc = get<std::uint32_t>(bytes.data() + 28);
  const auto crc = crc32c(bytes.data() + kHeaderSize, size);
  TORCHBUS_CHECK(crc == expected_crc, CheckpointError, "checkpoint ", path.string(),
                 " is corrupt: its CRC-32C is ", crc, ", the header says ", expected_crc);
  if (header != nullptr) {
    header->format_version = version;
    header->step = get<std::int64_t>(bytes.data() + 12);
  }
  return bytes.substr(kHeaderSize);
}

void write_file_atomically(const fs::path& path, const std::string& bytes) {
  const auto directory = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  auto temporary = path;
  temporary += detail::concat(kTemporaryMarker, ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError(system_error("cannot create", temporary));
  try {
    write_all(fd, bytes, temporary);
    if (::fsync(fd) != 0) throw CheckpointError(system_error("cannot fsync", temporary));
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const auto message = system_error("cannot rename into place", path);
    ::unlink(temporary.c_str());
    throw CheckpointError(message);
  }
  fsync_path(directory, O_RDONLY | O_DIRECTORY);
}

int remove_stale_temporaries(const fs::path& directory) {
  int removed = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    if (entry.is_regular_file() &&
        entry.path().filename().string().find(kTemporaryMarker) != std::string::npos) {
      if (fs::remove(entry.path(), error)) ++removed;
    }
  }
  return removed;
}

std::optional<fs::path> newest_valid_checkpoint(const fs::path& directory) {
  TORCHBUS_CHECK(fs::is_directory(directory), CheckpointError, "cannot resume from ",
                 directory.string(), ": not a directory");
  std::vector<fs::path> candidates;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.is_regular_file() && entry.path().extension() == kCheckpointExtension) {
      candidates.push_back(entry.path());
    }
  }
  std::optional<fs::path> best;
  std::int64_t best_step = -1;
  fs::file_time_type best_time{};
  for (const auto& candidate : candidates) {
    CheckpointHeader header;
    try {
      read_checkpoint_payload(candidate, &header);
    } catch (const CheckpointError& error) {
      logger()->warn("skipping checkpoint: {}", error.what());
      continue;
    }
    const auto time = fs::last_write_time(candidate);
    if (header.step > best_step || (header.step == best_step && time > best_time)) {
      best = candidate;
      best_step = header.step;
      best_time = time;
    }
  }
  return best;
}

CheckpointWriter::~CheckpointWriter() {
  try {
    flush();
  } catch (const std::exception& error) {
    logger()->error("background checkpoint write failed: {}", error.what());
  }
}

void CheckpointWriter::write(fs::path path, std::string bytes) {
  flush();
  in_flight_ = std::async(std::launch::async, [path = std::move(path), bytes = std::move(bytes)] {
    write_file_atomically(path, bytes);
  });
}

void CheckpointWriter::flush() {
  if (in_flight_.valid()) in_flight_.get();
}

}  // namespace torchbus
