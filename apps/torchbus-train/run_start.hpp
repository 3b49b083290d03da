#pragma once

// How a run of torchbus-train uses its directory: a fresh start, a resume from the newest usable
// checkpoint of its identity, or nothing to do because the run had already finished.

#include <cstdint>
#include <filesystem>
#include <string>

namespace train {

/// What a run asks of its directory: the flags that decide how OUT is used.
struct RunDirectoryRequest {
  std::filesystem::path out;  ///< the run directory (exists, locked by the caller)
  bool resume = false;        ///< --resume
  bool overwrite = false;     ///< --overwrite
  std::string identity;       ///< the run's identity
  /// The same run's identity as runs before `global_batch` wrote it (batch_size, accumulate,
  /// world_size): their checkpoints resume on the same numbers only.
  std::string split_identity;
  /// How this run splits its global batch (a resume on another split is checked before anything
  /// changes); `by_global_batch` false (--accumulate-schedule): the identity holds the split.
  struct Split {
    bool by_global_batch = true;
    std::int64_t world_size = 1;
    std::int64_t accumulate = 1;
    bool limit_counts_batches = false;  ///< --limit-train-batches as a count (per rank)
  } split;
  std::int64_t epochs = 0;      ///< --epochs
  std::int64_t max_steps = -1;  ///< --max-steps (-1: none)
  bool validate = false;        ///< --validate: a resume only picks the checkpoint, changes nothing
};

/// How the run starts.
struct RunStart {
  std::filesystem::path resume_from;  ///< the checkpoint to resume from (empty: a fresh start)
  /// Not empty when the run had already finished (why it ended) and its summary tells so: there
  /// is nothing to train and nothing is changed.
  std::string finished_reason;
  /// The identity of the checkpoint resumed from (the request's, or its split form).
  std::string identity;
};

/// Decides from OUT and the request whether the run starts fresh, resumes or has finished, and
/// clears what a fresh start replaces. Nothing is changed before the decision is made: a resume
/// whose checkpoints are all unusable throws CheckpointError naming each with its reason.
RunStart prepare_run_directory(const RunDirectoryRequest& request);

}  // namespace train
