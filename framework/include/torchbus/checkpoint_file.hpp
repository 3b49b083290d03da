#pragma once

/// \file
/// Checkpoint files on disk: reading and verifying them, finding the newest valid one of a folder,
/// and a writer that moves the disk work off the training thread (files are written atomically:
/// see atomic_file.hpp).

#include <torchbus/checkpoint_snapshot.hpp>

#include <cstdint>
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

/// Writes files on a background thread, at most one in flight: `write` waits for the previous
/// one. Errors of a write are rethrown by the next `write` or `flush`.
class CheckpointWriter {
 public:
  CheckpointWriter() = default;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  /// Waits for the write in flight (errors are logged, not thrown, here).
  ~CheckpointWriter();

  /// Once the previous write finished, serializes `snapshot` and writes it to its path atomically
  /// (and durably), then runs `after_durable` (moving a link, removing older files), all on the
  /// background thread. At most one write is in flight.
  void write(CheckpointSnapshot snapshot, std::function<void()> after_durable = {});
  /// Waits until nothing is in flight; rethrows the error of a failed write (a CheckpointError
  /// naming the file).
  void flush();
  /// Rethrows the error of a write that has finished and failed; returns at once otherwise.
  void rethrow_if_failed();

 private:
  std::future<void> in_flight_;
};

}  // namespace torchbus
