#pragma once

// The lock a live run holds on its run directory, so that a second launch into the directory is
// refused while the run lives (the lock goes away with the process, also when it is killed).

#include <filesystem>

namespace train {

/// An exclusive flock(2) on a run directory, held until destroyed or until the process ends.
/// Nothing is written into the directory.
class RunLock {
 public:
  /// Locks `directory` (which exists). Throws UsageError naming the directory and the pid
  /// holding the lock when another process holds it; where the file system cannot lock, logs a
  /// warning and holds nothing.
  explicit RunLock(const std::filesystem::path& directory);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace train
