#pragma once

/// \file
/// Files replaced atomically: a reader sees the old file or the new one, never part of one, also
/// after a crash or a power loss.

#include <filesystem>
#include <string>
#include <string_view>

namespace torchbus {

/// How far an atomic replacement has reached the disk when it returns.
enum class Durability {
  /// fsync of the file and of its directory: the new file survives a power loss (checkpoints).
  kPowerLoss,
  /// No fsync: readers and a crash of the process see the old file or the new one, never part of
  /// one; a power loss may lose the new one (a report rewritten every epoch).
  kProcessCrash,
};

/// A file written under a temporary name next to its path (`<name>.tmp-<pid>`, same directory)
/// and put in place by `commit`: fsync of the file, rename over the path, fsync of the directory
/// (the fsyncs only with Durability::kPowerLoss).
/// Destroyed before `commit`, or when `commit` fails before the rename, it removes the temporary
/// file and the path keeps what it had. Failures throw Error naming the file and the system's
/// reason.
class AtomicFile {
 public:
  /// Creates the temporary file of `path`.
  explicit AtomicFile(std::filesystem::path path, Durability durability = Durability::kPowerLoss);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  /// Removes the temporary file unless `commit` put it in place.
  ~AtomicFile();

  /// Appends `bytes` (buffered; written at the latest by `commit`).
  void write(std::string_view bytes);
  /// Writes what is buffered, fsyncs the file, renames it over the path and fsyncs the directory
  /// (without the fsyncs for Durability::kProcessCrash).
  void commit();

 private:
  void write_fully(std::string_view bytes);

  std::filesystem::path path_;
  std::filesystem::path temporary_;
  std::string buffer_;
  Durability durability_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Replaces `path` by a file holding `bytes`, atomically (see AtomicFile).
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           Durability durability = Durability::kPowerLoss);

/// Makes `link` a symbolic link to `target` (as given: relative to the link's directory when
/// relative), replacing what `link` was atomically: a new link under a temporary name, rename,
/// fsync of the directory.
void replace_with_symlink(const std::filesystem::path& link, const std::filesystem::path& target);

/// Removes the temporary files interrupted atomic writes left in `directory`; returns how many.
int remove_stale_temporaries(const std::filesystem::path& directory);

}  // namespace torchbus
