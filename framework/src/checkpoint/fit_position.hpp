#pragma once

/// \file
/// The fit's position in a checkpoint (private to torchbus_framework): where a resume continues,
/// the run's end and the generator state of the epoch's order, written by the fit loop and read
/// by it and by the parts that check an old checkpoint's step (the optimization step's phases).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch::serialize {
class OutputArchive;
}

namespace torchbus {

namespace detail {
class CheckpointReader;
}

/// The points [begin, end) of a metric series.
struct SeriesRange {
  std::string name;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

/// Where a fit stands, as a checkpoint keeps it: the position a resume continues from, the run's
/// end (a finished run's stop reason), and the generator state the epoch's data order was drawn
/// from (the generators themselves are a section of their own).
struct FitProgress {
  std::int64_t epoch = 0;           ///< the epoch a resume continues in
  std::int64_t step = 0;            ///< optimizer steps completed
  std::int64_t batch_in_epoch = 0;  ///< batches of that epoch already trained
  std::int64_t global_batch = 0;    ///< batches trained since the run began
  std::string stop_reason;          ///< why the run finished; empty when it goes on
  /// An early stop held until min_epochs and min_steps are reached (none: none).
  std::optional<std::string> held_stop_reason;
  /// The number of ranks that wrote it (0: not recorded, a checkpoint before it was).
  std::int64_t world_size = 0;
  /// Batches per step in its last epoch (0: not recorded).
  std::int64_t accumulate_grad_batches = 0;
  /// Samples of one full batch across every rank (per-rank batch × ranks) of the run that wrote
  /// it (0: none trained yet, or not recorded).
  std::int64_t batch_samples = 0;
  /// Set when it resumes on another number of ranks: the samples a batch across every rank must
  /// hold here so that a step keeps the checkpoint's global batch.
  std::int64_t expected_batch_samples = 0;
  at::Tensor epoch_start_rng;  ///< the CPU generator when the epoch's order was drawn
  /// Whether the epoch a resume continues had drawn its order (a resume draws it again from
  /// `epoch_start_rng`); false for an epoch not begun.
  bool order_drawn = false;
  /// The step the run's last validation ran after (-1: none, or not recorded).
  std::int64_t validated_step = -1;
  /// Set when the epoch a resume continues was cut short and had begun its end: the points that
  /// end recorded (until its fit ended), which the continued epoch's end records again.
  std::optional<std::vector<SeriesRange>> epoch_end_points;
  /// The position as a checkpoint holds it, before a resume on another number of ranks rescaled
  /// it.
  struct Written {
    std::int64_t batch_in_epoch = 0;
    std::int64_t global_batch = 0;
    std::int64_t world_size = 0;
    std::int64_t batch_samples = 0;
    std::int64_t accumulate_grad_batches = 0;
  };
  /// Set when it resumes on another number of ranks (batch_in_epoch and global_batch are then
  /// rescaled for the ranks here).
  std::optional<Written> written;
};

/// The position and end of the run a checkpoint holds (its epoch's generator state is not read).
FitProgress read_fit_position(detail::CheckpointReader& reader);

/// Writes `progress` into `archive`, with the accumulation the windows were cut with: k
/// (`accumulate_grad_batches`) of epoch `k_epoch`.
void write_fit_position(torch::serialize::OutputArchive& archive, const FitProgress& progress,
                        std::int64_t accumulate_grad_batches, std::int64_t k_epoch);

}  // namespace torchbus
