#include "run_lock.hpp"

#include "exit_status.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <torchbus/logging.hpp>
#include <torchbus/system_error_text.hpp>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace train {
namespace {

/// The pid holding a flock on the file behind `fd`, from /proc/locks ("1: FLOCK ADVISORY WRITE
/// <pid> <major>:<minor>:<inode> 0 EOF"); nothing when it cannot be told.
std::optional<long> lock_holder(int fd) {
  struct stat status {};
  if (fstat(fd, &status) != 0) return std::nullopt;
  char device[64];
  std::snprintf(device, sizeof device, "%02x:%02x:%llu", major(status.st_dev), minor(status.st_dev),
                static_cast<unsigned long long>(status.st_ino));
  std::ifstream locks("/proc/locks");
  for (std::string line; std::getline(locks, line);) {
    std::istringstream fields(line);
    std::string id, kind, advisory, mode, file;
    long pid = 0;
    // A waiting request reads "2: -> FLOCK ...": its kind is "->", and it holds nothing.
    if (fields >> id >> kind >> advisory >> mode >> pid >> file && kind == "FLOCK" &&
        file == device) {
      return pid;
    }
  }
  return std::nullopt;
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& directory) {
  fd_ = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TORCHBUS_CHECK(fd_ >= 0, torchbus::Error, "cannot open the run directory '", directory.string(),
                 "' to lock it: ", torchbus::system_error_text(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int error = errno;
  if (error != EWOULDBLOCK) {
    torchbus::logger()->warn(
        "cannot lock the run directory {} ({}): a second launch into it would not be refused",
        directory.string(), torchbus::system_error_text(error));
    return;
  }
  const auto holder = lock_holder(fd_);
  ::close(fd_);
  fd_ = -1;
  throw UsageError(torchbus::detail::concat(
      "--out ", directory.string(), " is in use: ",
      holder ? torchbus::detail::concat("process ", *holder) : std::string("another process"),
      " holds its lock (a run is live there); wait until it ends, stop it, or choose another "
      "--out"));
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace train
