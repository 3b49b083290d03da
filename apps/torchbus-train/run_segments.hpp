#pragma once

// The parts a run was trained in: the first start and each --resume, with its number of ranks,
// per-rank batch, accumulation and first step (summary.json's "segments").

#include "summary.hpp"

#include <torchbus/torchbus.hpp>

#include <cstdint>
#include <vector>

namespace train {

/// One start of the run: where it began and how its global batch was split.
struct RunSegment {
  std::int64_t first_step = 0;  ///< the step it started at (0, or the checkpoint's)
  std::int64_t world_size = 1;  ///< processes
  std::int64_t batch_size = 0;  ///< per rank
  std::int64_t accumulate = 1;  ///< batches per step
};

/// Records the segments of a run: kept in its checkpoints, so a resume continues the list of the
/// checkpoint it resumes from and adds itself at ActionStart.
class RunSegments : public torchbus::Callback {
 public:
  /// This process's segment (its first step is taken at ActionStart).
  explicit RunSegments(RunSegment now);
  void on_action_start(torchbus::State& state) override;
  void save_state(torch::serialize::OutputArchive& archive) const override;
  void load_state(torch::serialize::InputArchive& archive) override;
  /// The segments so far, oldest first, as JSON objects.
  JsonObject to_json() const;

 private:
  RunSegment now_;
  std::vector<RunSegment> earlier_;  // from the checkpoint resumed from
  std::vector<RunSegment> segments_;
};

}  // namespace train
