#pragma once

/// \file
/// FitLoop (private to torchbus_framework): the epochs of a fit and where they stand.

#include <torch/serialize/output-archive.h>
#include <torchbus/checkpoint.hpp>
#include <torchbus/rng_state.hpp>

#include "checkpoint/fit_position.hpp"
#include "checkpoint/reader.hpp"
#include "distributed/sync.hpp"
#include "loop/context.hpp"
#include "loop/evaluation_loop.hpp"
#include "loop/optimization_step.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torchbus {

/// Points per metric series (name, length) of the metric history at some moment.
using SeriesLengths = std::vector<std::pair<std::string, std::int64_t>>;

/// The fit's counters, as State shows them (docs/events.md): the FitLoop owns them.
struct FitCounters {
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  std::int64_t batch_in_epoch = 0;
  std::int64_t global_batch = 0;
  std::int64_t window_position = 0;
};

/// The fit: the sanity check, then epochs of steps (windows of batches filled from the training
/// data, run by the OptimizationStep), validations as scheduled (by the EvaluationLoop), until the
/// epochs, the step limit or a stop end it. Owns the fit's position (its counters and what
/// checkpoints keep); as the loop that drives the other two, it publishes every loop's counters
/// into State before each emission.
class FitLoop final : public ProgressPublisher {
 public:
  FitLoop(LoopContext context, OptimizationStep& step, EvaluationLoop& evaluation,
          DistributedSync& sync)
      : context_(context), step_(step), evaluation_(evaluation), sync_(sync) {}

  /// At the start of a fit: the batch limits of `train` and `validation`, every counter at 0, no
  /// metrics, no tensors, no stop.
  void prepare(BatchSource& train, BatchSource* validation);
  /// The fit's body (between ActionStart and ActionEnd): the process group's start, the sanity
  /// check when `fresh`, then the epochs.
  void run(BatchSource& train, BatchSource* validation, bool fresh);

  /// What a checkpoint taken now holds: the next epoch when the current one has finished.
  FitProgress progress() const;
  /// Writes `progress()` and the accumulation the windows were cut with (`configured`'s k).
  void save(torch::serialize::OutputArchive& archive, const TrainerOptions& configured) const;
  /// The progress a checkpoint holds, validated against `configured` (nothing changes yet).
  FitProgress read(detail::CheckpointReader& reader, const TrainerOptions& configured) const;
  /// Continues from `progress` (what `read` returned): counters, the epoch's order, the run's end.
  void restore(const FitProgress& progress);
  /// Writes the loops' counters into `state`: the fit's (State::epoch, step, batch_in_epoch,
  /// global_batch, window_position), then the optimization step's and the evaluation loop's.
  void publish(State& state) const noexcept override;
  /// After the fit's ActionEnd: what the history holds then closes what an epoch cut short
  /// recorded at its end (an evaluate() after it records its own points).
  void end_run();

 private:
  void run_sanity_check(BatchSource& validation);
  void run_epoch(BatchSource& train, BatchSource* validation);
  void start_epoch(BatchSource& train);
  bool fill_window(BatchSource& train);
  void run_step(bool can_validate);
  // Runs a validation of the training (not the sanity check) and notes the step it validated.
  void validate(BatchSource& validation);
  // Counts the samples of the window's batches across the ranks; after a resume on another
  // number of ranks, checks that a step keeps the checkpoint's global batch.
  void count_batch_samples();
  bool step_limit_reached() const noexcept;
  bool finished() const noexcept;
  // Notes where the end of an epoch cut short begins: the history's lengths and the last
  // validation before it.
  void mark_unfinished_epoch_end();
  // The points the end of the epoch cut short recorded, until its fit ended (until now while it
  // runs).
  std::vector<SeriesRange> epoch_end_points() const;
  // A resume continues the epoch whose end was cut short: drops what that end recorded.
  void drop_unfinished_epoch_end();

  LoopContext context_;
  OptimizationStep& step_;
  EvaluationLoop& evaluation_;
  DistributedSync& sync_;
  FitCounters counters_;
  std::vector<Batch> window_;  // the batches of the current step
  std::size_t window_used_ = 0;
  bool epoch_finished_ = false;   // during EpochEnd: a checkpoint resumes at the next epoch
  bool epoch_trained_ = false;    // from the end of the epoch's last batch: it was not cut short
  at::Tensor epoch_start_rng_;    // CPU generator state when the epoch's data order was drawn
  bool order_drawn_ = false;      // the current epoch's order is drawn (from epoch_start_rng_)
  std::int64_t resume_skip_ = 0;  // batches of the resumed epoch already trained
  // The step whose weights the last validation ran on (-1: none yet): an epoch-end validation
  // right after a step's validation would see the same weights, and is not run.
  std::int64_t validated_step_ = -1;
  bool validating_ = false;  // in a validation of the training (set until it returns)
  // The end of an epoch cut short by a stop or max_steps: the history's lengths before it, after
  // its fit (unset while that runs), and the last validation before it, which a resume that
  // continues the epoch goes back to.
  std::optional<SeriesLengths> series_before_epoch_end_;
  std::optional<SeriesLengths> series_after_epoch_end_;
  std::int64_t validated_before_epoch_end_ = -1;
  std::optional<std::int64_t> epoch_batches_;  // batches per epoch, when the data says
  std::int64_t val_batch_interval_ = 0;        // val_every_epoch_fraction in batches (0: off)
  std::int64_t batch_samples_ = 0;  // the largest batch across every rank so far (0: none yet)
  // Resumed on another number of ranks: the checkpoint's ranks, and the samples a batch across
  // every rank must hold, until a batch has shown it (0: nothing to check); a smaller batch that
  // may be its epoch's last defers the check once per epoch.
  std::int64_t resharded_from_ = 0;
  std::int64_t expected_batch_samples_ = 0;
  // Resumed on another number of ranks, until the continued epoch has skipped what the checkpoint
  // trained: the checkpoint's own position, which a checkpoint taken meanwhile holds, so that a
  // resume from it rescales it alike (the rescaled one may pass the end of the epoch here).
  std::optional<FitProgress::Written> written_position_;
  std::int64_t check_deferred_in_epoch_ = -1;
  std::int64_t train_batch_limit_ = -1;  // training batches per epoch (-1: all)
  std::int64_t val_batch_limit_ = -1;    // batches per validation (-1: all)
};

}  // namespace torchbus
