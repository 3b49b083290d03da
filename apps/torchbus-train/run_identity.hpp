#pragma once

// What names a run of torchbus-train: its options as summary.json lists them, its identity (the
// options that change its result), and the run directory it takes under that identity (a fresh
// start, a resume of the same identity, or a run already finished).

#include "flags.hpp"
#include "run_lock.hpp"
#include "run_start.hpp"
#include "summary.hpp"

#include <array>
#include <functional>
#include <optional>
#include <string>

namespace train {

/// The run's options, for summary.json and the report (`hidden` is null for the CNN).
JsonObject describe_run(const Flags& flags, bool cnn);

/// How the run's identity names its batch: by the global batch (per-rank batch x accumulation x
/// ranks), which a resume on another number of ranks keeps, or by the three numbers, as runs
/// before that did (and as runs with an accumulation schedule still do: their k changes by epoch).
enum class BatchInIdentity { Global, Split };

/// The run's identity: every option that changes its result ("key=value" lines). Written into
/// identity.txt, every checkpoint and summary.json; --resume continues only a run of the same.
/// Options added since a release appear only when set, so that the runs of that release still
/// resume.
std::string run_identity(const Flags& flags, bool cnn, int world_size,
                         const std::string& init_from_sha256, BatchInIdentity batch);

/// The run's identity in both forms (BatchInIdentity::Global, then Split) for given flags.
using IdentitiesOf = std::function<std::array<std::string, 2>(const Flags&)>;

/// Creates and locks OUT (the lock lives in `lock`), then decides how the run uses it. Rank 0's
/// work: the checkpoint to resume from (empty: a fresh start) is shared with the others.
RunStart take_run_directory(const Flags& flags, const std::string& identity,
                            const std::string& split_identity, int world_size,
                            std::optional<RunLock>& lock);

}  // namespace train
