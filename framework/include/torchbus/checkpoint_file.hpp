#pragma once

/// \file
/// Checkpoint files on disk: reading and verifying them, finding the newest valid one of a folder,
/// and a writer that moves the disk work off the training thread (files are written atomically:
/// see atomic_file.hpp).

#include <torchbus/checkpoint_snapshot.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

namespace torchbus {

/// File name extension of checkpoints.
inline constexpr const char* kCheckpointExtension = ".tbckpt";

/// A checkpoint's header fields, readable without parsing the payload.
struct CheckpointHeader {
  std::uint32_t format_version = 0;  ///< the format the file was written in
  std::int64_t step = 0;             ///< optimizer steps completed when it was taken
  std::string identity;              ///< the run identity it was written with (empty: none)
};

/// Reads `path` and returns its verified payload; throws CheckpointError naming the path and what
/// is wrong (missing, truncated, corrupt, another format version) otherwise.
std::string read_checkpoint_payload(const std::filesystem::path& path,
                                    CheckpointHeader* header = nullptr);

/// A checkpoint file found in a directory, with its verified header.
struct CheckpointCandidate {
  std::filesystem::path path;  ///< the file
  CheckpointHeader header;     ///< its header
};

/// The valid checkpoints in `directory` (missing: none), newest first: most steps first, the
/// later written first on a tie. Symbolic links are not followed; corrupt files and odd entries
/// named
/// `*.tbckpt` (directories, devices) are named in the log and skipped; `skipped`, when given,
/// receives one message per skipped entry, naming it and what is wrong with it.
std::vector<CheckpointCandidate> valid_checkpoints(const std::filesystem::path& directory,
                                                   std::vector<std::string>* skipped = nullptr);

/// The valid checkpoint in `directory` with the most steps (the newest written on a tie); corrupt
/// ones are named in the log and skipped. Nothing when there is none or no directory.
std::optional<std::filesystem::path> newest_valid_checkpoint(
    const std::filesystem::path& directory);

/// What differs between two run identities ("key=value" lines): "key: a -> b", joined by "; ".
std::string identity_differences(const std::string& checkpoint, const std::string& run);

/// Writes files on background threads, one after another in the order given, with at most
/// `max_pending` writes pending (in flight or waiting for the one before): `write` waits for room.
/// Errors of a write are rethrown by a later `write`, `wait_for_room`, `flush` or
/// `rethrow_if_failed`.
class CheckpointWriter {
 public:
  /// Throws ConfigError when `max_pending` is 0.
  explicit CheckpointWriter(std::size_t max_pending = 1);
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  /// Waits for every pending write (errors are logged, not thrown, here).
  ~CheckpointWriter();

  /// Once the writes before it finished, serializes `snapshot` and writes it to its path
  /// atomically (and durably), then runs `after_durable` (moving a link, removing older files),
  /// all off the calling thread. Waits for room first (`wait_for_room`).
  void write(CheckpointSnapshot snapshot, std::function<void()> after_durable = {});
  /// Waits until fewer than `max_pending` writes are pending, so that the next snapshot can be
  /// taken and queued without waiting; rethrows the error of a write that failed.
  void wait_for_room();
  /// Waits until nothing is pending; rethrows the error of a failed write (a CheckpointError
  /// naming the file).
  void flush();
  /// Rethrows the error of a write that has finished and failed; returns at once otherwise.
  void rethrow_if_failed();

 private:
  /// Waits for the oldest pending write and forgets it; rethrows its error.
  void finish_oldest();

  std::size_t max_pending_;
  std::deque<std::shared_future<void>> pending_;  // oldest first
};

}  // namespace torchbus
