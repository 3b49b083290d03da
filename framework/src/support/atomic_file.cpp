#include <fcntl.h>
#include <unistd.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/error.hpp>
#include <torchbus/system_error_text.hpp>

#include <cerrno>

namespace torchbus {
namespace {

namespace fs = std::filesystem;

/// In the name of every temporary file, and only there.
constexpr const char* kTemporaryMarker = ".tmp-";
/// Bytes AtomicFile::write collects before it writes them out.
constexpr std::size_t kBufferSize = 1 << 16;

/// An Error "cannot <action> <path>: <the text of error_number>".
[[noreturn]] void fail(const char* action, const fs::path& path, int error_number) {
  throw Error(
      detail::concat("cannot ", action, " ", path.string(), ": ", system_error_text(error_number)));
}

fs::path temporary_of(const fs::path& path) {
  auto temporary = path;
  temporary += detail::concat(kTemporaryMarker, ::getpid());
  return temporary;
}

void rename_into_place(const fs::path& temporary, const fs::path& path) {
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    fail("rename into place", path, errno);
  }
}

void fsync_directory_of(const fs::path& path) {
  const auto directory = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open for fsync", directory, errno);
  const int result = ::fsync(fd);
  const int error_number = errno;
  ::close(fd);
  if (result != 0) fail("fsync", directory, error_number);
}

}  // namespace

AtomicFile::AtomicFile(fs::path path, Durability durability)
    : path_(std::move(path)), temporary_(temporary_of(path_)), durability_(durability) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create", temporary_, errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFile::write(std::string_view bytes) {
  if (buffer_.size() + bytes.size() < kBufferSize) {
    buffer_ += bytes;
    return;
  }
  write_fully(buffer_);
  buffer_.clear();
  write_fully(bytes);  // large writes skip the buffer: no copy of a checkpoint's bytes
}

void AtomicFile::write_fully(std::string_view bytes) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const auto result = ::write(fd_, bytes.data() + written, bytes.size() - written);
    if (result < 0 && errno == EINTR) continue;
    if (result < 0) fail("write", temporary_, errno);
    written += static_cast<std::size_t>(result);
  }
}

void AtomicFile::commit() {
  write_fully(buffer_);
  buffer_.clear();
  const bool durable = durability_ == Durability::kPowerLoss;
  if (durable && ::fsync(fd_) != 0) fail("fsync", temporary_, errno);
  const int result = ::close(fd_);
  fd_ = -1;
  if (result != 0) fail("close", temporary_, errno);
  rename_into_place(temporary_, path_);
  committed_ = true;
  if (durable) fsync_directory_of(path_);
}

void write_file_atomically(const fs::path& path, std::string_view bytes, Durability durability) {
  AtomicFile file(path, durability);
  file.write(bytes);
  file.commit();
}

void replace_with_symlink(const fs::path& link, const fs::path& target) {
  const auto temporary = temporary_of(link);
  ::unlink(temporary.c_str());  // left by an interrupted replacement
  if (::symlink(target.c_str(), temporary.c_str()) != 0) fail("create", temporary, errno);
  try {
    rename_into_place(temporary, link);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  fsync_directory_of(link);
}

int remove_stale_temporaries(const fs::path& directory) {
  int removed = 0;
  std::error_code error;
  fs::directory_iterator entries(directory, error);
  for (; !error && entries != fs::directory_iterator(); entries.increment(error)) {
    // The entry's own type, never followed: a loop of symbolic links is an odd entry, not an error.
    std::error_code status_error;
    const auto status = fs::symlink_status(entries->path(), status_error);
    if (!status_error && (fs::is_regular_file(status) || fs::is_symlink(status)) &&
        entries->path().filename().string().find(kTemporaryMarker) != std::string::npos) {
      std::error_code remove_error;
      if (fs::remove(entries->path(), remove_error)) ++removed;
    }
  }
  return removed;
}

}  // namespace torchbus
