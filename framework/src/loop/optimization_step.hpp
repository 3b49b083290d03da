#pragma once

/// \file
/// OptimizationStep (private to torchbus_framework): one optimizer step over a window of batches,
/// for each optimizer phase.

#include <torch/serialize/output-archive.h>
#include <torchbus/loss_scaler.hpp>
#include <torchbus/optimizer_phase.hpp>

#include "checkpoint/reader.hpp"
#include "distributed/sync.hpp"
#include "loop/context.hpp"

#include <optional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace torchbus {

/// The names a phase's loss is recorded under: per step and as the epoch's mean.
struct LossMetricNames {
  std::string step;   ///< e.g. metric_names::kTrainLoss
  std::string epoch;  ///< e.g. metric_names::kTrainLossEpoch
};

/// What of the optimization step a checkpoint holds: each phase's loss scaler (FP16Mixed) and
/// optimizer steps.
struct OptimizationProgress {
  std::vector<std::optional<LossScaler>> loss_scalers;
  std::vector<std::int64_t> phase_steps;
};

/// The optimization step of a fit: the accumulation window's batches (forward, scaled backward),
/// the gradients' synchronisation, loss scaling, clipping, the optimizer step and clearing the
/// gradients, for each optimizer phase (a trainer of one optimizer has one, unnamed). The fit
/// loop calls `begin`, opens StepStart, calls `run_batch` per batch and `finish`. Each phase's
/// optimizer step runs right after its last backward of the window, before that batch's BatchEnd,
/// so that later phases see its update; a window an epoch end cut short steps in `finish`. Owns
/// the loss scalers (FP16Mixed) and the phases' step counts, which checkpoints keep, and the
/// learning rate of the first phase's last update (State::step_learning_rate).
class OptimizationStep {
 public:
  /// `phases` (the trainer's; one for a trainer of one optimizer) must outlive the step.
  OptimizationStep(LoopContext context, const std::vector<OptimizerPhase>& phases,
                   DistributedSync& sync);

  /// At the start of a fit, the model on its device: caches each phase's parameters, sets up the
  /// loss scalers of the precision, clears the gradients and the phases' step counts.
  void prepare();
  /// The parameters each phase trains (cached by `prepare`).
  const std::vector<std::vector<at::Tensor>>& phase_parameters() const noexcept {
    return parameters_;
  }
  /// The first phase's loss scaler of an FP16Mixed fit, null otherwise.
  const LossScaler* loss_scaler() const noexcept {
    return phases_.front().loss_scaler ? &*phases_.front().loss_scaler : nullptr;
  }

  /// Starts a window of `batches` batches, the first of them the run's `first_batch`-th (0-based;
  /// before StepStart: its subscribers see the window).
  void begin(std::size_t batches, std::int64_t first_batch);
  /// Runs one batch of the window: BatchStart; per phase due at it: the phase's train step,
  /// BeforeBackward, the backward of its loss scaled by the phase's window, AfterBackward and,
  /// at the phase's last batch of the window, its optimizer step; BatchEnd.
  void run_batch(Batch& batch);
  /// The window ends after `batches` batches (an epoch end cut it): the gradients and losses of
  /// the phases yet to step are rescaled to those of a window of that many batches.
  void shorten(std::size_t batches);
  /// Ends the window: the optimizer step of every phase that ran and has not stepped (see
  /// `step_phase`). Returns whether any phase updated its weights.
  bool finish();
  /// Records the loss metric of each phase that updated its weights (before StepEnd).
  void record_losses();
  /// The metric names of each phase's loss (the unnamed phase: kTrainLoss, kTrainLossEpoch).
  const std::vector<LossMetricNames>& loss_metrics() const noexcept { return loss_metrics_; }
  /// Whether a window runs (from `begin` to the end of `finish`): no checkpoint may be taken. A
  /// window an error cut short stays open (its End events see it so) until `reset`.
  bool in_window() const noexcept { return in_window_; }
  /// Forgets a window an error cut short (at the start of an action).
  void reset() noexcept;
  /// Writes the window's size, the current phase (index, name, optimizer, step count) and the
  /// step's learning rate into `state` (the trainer does before each emission).
  void publish(State& state) const noexcept;
  /// Clears every phase's gradients (to zero, or to none when the options ask).
  void clear_gradients();

  /// Writes the loss scalers' states, and for named phases their names and step counts.
  void save(torch::serialize::OutputArchive& archive) const;
  /// What a checkpoint holds of the step, validated against this trainer's phases, applied by
  /// `restore` (nothing changes yet).
  OptimizationProgress read(detail::CheckpointReader& reader) const;
  /// Continues with `progress` (what `read` returned).
  void restore(OptimizationProgress progress);

 private:
  /// One phase during a fit: its parameters, loss scaler, window and counts.
  struct PhaseRun {
    std::string step_name;  // the train step as errors name it
    std::optional<LossScaler> loss_scaler;
    double clip_norm = 0.0;
    double clip_value = 0.0;
    at::Tensor window_loss;  // mean loss of the phase's batches of the window
    bool has_backward = false;
    std::int64_t due = 0;    // batches of the window the phase runs on
    std::int64_t seen = 0;   // of them, those reached so far
    bool stepped = false;    // its optimizer step of this window ran
    bool updated = false;    // and updated the weights
    std::int64_t steps = 0;  // optimizer steps made in the fit
  };

  std::int64_t due_batches(std::size_t index, std::int64_t first, std::int64_t count) const;
  void forward_backward(std::size_t index, Batch& batch);
  void step_phase(std::size_t index);
  void enter_phase(std::size_t index) noexcept;
  void leave_phase() noexcept;
  void backward(const at::Tensor& loss, const std::vector<at::Tensor>* inputs);
  void clip_gradients(std::size_t index);
  void capture_learning_rate();
  void clear_gradients(torch::optim::Optimizer& optimizer);

  LoopContext context_;
  const std::vector<OptimizerPhase>& phase_list_;
  DistributedSync& sync_;
  std::vector<PhaseRun> phases_;
  std::vector<std::vector<at::Tensor>> parameters_;  // per phase
  std::vector<LossMetricNames> loss_metrics_;        // per phase
  std::size_t current_phase_ = 0;
  std::int64_t window_size_ = 1;         // batches in the current window
  std::int64_t window_first_batch_ = 0;  // global index of the window's first batch
  std::int64_t window_batches_run_ = 0;  // batches of the window run so far
  at::Tensor backward_seed_;  // ones shaped like the loss, the gradient backward starts from
  std::int64_t backward_seed_version_ = 0;  // its version counter when it was made
  bool in_window_ = false;
  // The first phase's learning rate at its last update, and the step that update is counted as.
  double learning_rate_ = 0.0;
  std::int64_t learning_rate_step_ = -1;
  bool learning_rate_unreadable_ = false;  // its options have no learning rate: not read again
};

}  // namespace torchbus
