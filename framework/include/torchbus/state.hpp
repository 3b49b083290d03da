#pragma once

/// \file
/// The one object every event carries.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torchbus/metric_history.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/tensor_store.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace torchbus {

class Batch;
class ProcessGroup;
class Trainer;
namespace detail {
struct StateWriter;
}

/// The action a trainer runs.
enum class Action {
  None,      ///< no fit(), evaluate(), test() or predict() runs
  Fit,       ///< fit(), its validations included
  Evaluate,  ///< evaluate()
  Test,      ///< test(): an evaluation whose metrics take the `test_` prefix
  Predict,   ///< predict()
};

/// The action's name: "none", "fit", "evaluate", "test" or "predict".
std::string_view to_string(Action action) noexcept;

/// What a stop request means for the run (State::request_stop).
enum class StopKind {
  Finished,     ///< the run is over: a checkpoint keeps the decision, a resume trains nothing
  Interrupted,  ///< the run is paused (a signal, a pre-emption): a resume continues training
};

/// Shared state of a run, passed as `State&` to every slot. Counters are plain fields.
struct State {
  // Counters. All are 0-based indices except `step`, which counts completed optimizer steps.
  std::int64_t epoch = 0;            ///< index of the current epoch (after a run: epochs completed)
  std::int64_t step = 0;             ///< optimizer steps completed (at StepEnd: includes this one)
  std::int64_t batch_in_epoch = 0;   ///< index of the current batch within the epoch
  std::int64_t global_batch = 0;     ///< index of the current batch since the run began
  std::int64_t window_position = 0;  ///< index of the current batch in its accumulation window
  std::int64_t window_size = 1;      ///< batches in the current window (k, or fewer at epoch end)
  std::int64_t accumulate_grad_batches = 1;  ///< k: batches per optimizer step
  std::int64_t max_epochs = 1;               ///< epoch limit of the run (-1: none)
  std::int64_t max_steps = -1;               ///< step limit of the run (-1: none)
  std::int64_t min_epochs = 0;     ///< epochs before which an early stop is held (0: none)
  std::int64_t min_steps = 0;      ///< optimizer steps before which an early stop is held (0: none)
  std::int64_t eval_batch = 0;     ///< index of the current evaluation batch
  std::int64_t predict_batch = 0;  ///< index of the current predict batch

  // Ranks.
  int rank = 0;        ///< global rank of this process
  int local_rank = 0;  ///< rank on this machine
  int world_size = 1;  ///< number of processes
  /// The trainer's process group (see distributed.hpp), null when it has none. Use it through
  /// `all_reduce_mean` and `gather`, which also work without one.
  ProcessGroup* process_group = nullptr;

  // What is trained. Owned by the trainer; null outside a run.
  torch::nn::Module* model = nullptr;  ///< the model being trained
  /// Its optimizer; with several optimizers, the current optimizer phase's (below).
  torch::optim::Optimizer* optimizer = nullptr;
  c10::Device device = c10::Device(c10::kCPU);  ///< where model and batches live
  bool training = false;                        ///< true in training batches, false in evaluation
  /// The action running, from before ActionStart (a resume included) to after ActionEnd.
  Action action = Action::None;
  /// The prefix of the evaluation's metrics: "test_" in a test, "val_" elsewhere (metric_names).
  std::string_view metric_prefix() const noexcept {
    return action == Action::Test ? metric_names::kTestPrefix : metric_names::kValPrefix;
  }
  /// During the sanity validation before training (TrainerOptions::num_sanity_val_steps): the
  /// bus does not call subscribers that sit out RunStage::SanityCheck; its metrics are rolled back.
  bool sanity_checking = false;
  /// From where the end of an epoch cut short by a stop or `max_steps` begins (its loss mean,
  /// validation and EpochEnd) until that EpochEnd returns: a resume continues the epoch and runs
  /// its end again, so a schedule per epoch does not advance here (docs/events.md).
  bool epoch_cut_short = false;
  /// During a fit or evaluation with TrainerOptions::fast_dev_run: the bus does not call
  /// subscribers that sit out RunStage::FastDevRun (checkpoints, loggers, the report).
  bool fast_dev_run = false;

  // The optimizer phase (docs/trainer.md, "Several optimizers"): from a phase's train step to its
  // AfterOptimizerStep, the phase whose loss, backward or optimizer step runs; elsewhere, and
  // with one optimizer, the first.

  std::size_t optimizer_phase = 0;  ///< index of the optimizer phase (the trainer's order)
  /// Name of the optimizer phase (OptimizerPhase::name; empty for a trainer of one optimizer).
  std::string_view optimizer_phase_name;
  /// Optimizer steps the phase has made (at its AfterOptimizerStep: this one included); with one
  /// optimizer, `step`.
  std::int64_t optimizer_phase_step = 0;

  TensorStore tensors;    ///< tensors by name, scoped (see Scope)
  MetricHistory metrics;  ///< metric name -> (step, epoch, value) series (metric_names.hpp)

  // The step's output: tensor handles the trainer assigns in place (no allocation, no host sync),
  // each an undefined tensor outside the events named (docs/events.md#the-steps-output).

  /// The loss the train or eval step returned for the current batch (one element, 0-dim; in
  /// training with its autograd graph): at BeforeBackward, AfterBackward, BatchEnd and
  /// EvalBatchEnd of a batch whose step returned one (not cancelled before or in the step).
  const at::Tensor& batch_loss() const noexcept { return batch_loss_; }
  /// The loss back-propagated for the current batch, `batch_loss() / window_size` (before fp16
  /// loss scaling multiplies it): at AfterBackward and BatchEnd of a batch that ran backward.
  const at::Tensor& backward_loss() const noexcept { return backward_loss_; }
  /// The step's loss, the sum of its window's `backward_loss()` values: the mean loss of the
  /// window's batches (and, with a process group, of every rank's). From AfterOptimizerStep (in
  /// the window's last batch) to StepEnd of a step that made an update; with optimizer phases, the
  /// last updated phase's. Also recorded as the metric `kTrainLoss` (a phase's:
  /// `train_loss/<name>`).
  const at::Tensor& step_loss() const noexcept { return step_loss_; }
  /// The learning rate the update of the step `step` counts was made with: parameter group 0 of
  /// the first optimizer phase's optimizer, read right before its optimizer step (after every
  /// BeforeOptimizerStep subscriber). From StepEnd of a step in which that phase updated to the
  /// next StepStart (a LearningRateScheduler may already have set the next step's rate by then).
  /// Empty elsewhere, at a step whose first phase made no update, and for optimizer options
  /// without a learning rate (custom OptimizerOptions).
  std::optional<double> step_learning_rate() const noexcept {
    return step_learning_rate_step_ == step ? std::optional(step_learning_rate_) : std::nullopt;
  }
  /// The model's output for the current batch (its main tensor), as the default step computed it
  /// or a custom step set it (set_batch_output): from the step on, to BatchEnd or EvalBatchEnd;
  /// the predict step's at PredictBatchEnd. Named outputs are in `tensors` under their names.
  const at::Tensor& batch_output() const noexcept { return batch_output_; }
  /// The current batch's target (`Batch::target`, on the device): with `batch_loss()`.
  const at::Tensor& batch_target() const noexcept { return batch_target_; }
  /// The current batch, every field on the device (its named tensors and lists included: a mask,
  /// token ids, boxes): from BatchStart (EvalBatchStart, PredictBatchStart) to BatchEnd
  /// (EvalBatchEnd, PredictBatchEnd), nullptr elsewhere. Include <torchbus/batch.hpp> to read it.
  const Batch* batch() const noexcept { return batch_; }
  /// Sets `batch_output()` for the current batch: a custom train or eval step calls it so that
  /// what reads the output (ClassificationMetrics, AllPredictionsSame, ...) finds it.
  void set_batch_output(at::Tensor output) noexcept { batch_output_ = std::move(output); }

  // Control.
  bool cancelled = false;       ///< the current batch was cancelled (CancelBatch)
  bool update_skipped = false;  ///< at StepEnd: the step made no optimizer update
  /// At StepEnd: a validation (val_every_n_steps) runs right after this step, before the next.
  bool validation_follows = false;
  /// Set up to BeforeOptimizerStep to discard this step's gradients: no optimizer step, no
  /// AfterOptimizerStep, the step is not counted (update_skipped at StepEnd). Reset every step.
  bool skip_update = false;
  std::exception_ptr error;   ///< the exception escaping the run, set before Exception fires
  std::string error_message;  ///< its what(), for logging

  /// Asks the run to stop at the next step boundary; the first reason given is kept. A
  /// `StopKind::Finished` stop ends the run for good (a checkpoint taken at it remembers it, and a
  /// resume from that checkpoint trains nothing); `StopKind::Interrupted` only pauses it (a signal,
  /// a pre-emption: a resume continues training).
  void request_stop(std::string reason, StopKind kind = StopKind::Finished);
  /// Whether a stop was requested.
  bool stop_requested() const noexcept { return stop_requested_; }
  /// Why the run stops (empty when it does not).
  const std::string& stop_reason() const noexcept { return stop_reason_; }
  /// Whether the requested stop ends the run or interrupts it (meaningful when one was requested).
  StopKind stop_kind() const noexcept { return stop_kind_; }
  /// Forgets a stop request and a held early stop (at the start of an action).
  void clear_stop() noexcept;
  /// Asks for a Finished stop that TrainerOptions::min_epochs and min_steps may defer, as a
  /// stop decided from metrics (EarlyStopping) is: in a fit that has not yet ended `min_epochs`
  /// epochs or made `min_steps` steps, it is held (`held_stop_reason()`) and requested once both
  /// are reached; elsewhere it is request_stop(reason). The first reason given is kept.
  void request_early_stop(std::string reason);
  /// The reason of an early stop held until min_epochs and min_steps are reached (none: none).
  const std::optional<std::string>& held_stop_reason() const noexcept { return held_stop_reason_; }
  /// Epochs of the fit trained to their end: `epoch`, plus the current one from the end of its
  /// last batch (its validation and EpochEnd) unless it was cut short.
  std::int64_t epochs_completed() const noexcept { return epochs_completed_; }

  /// Asks the trainer to end the current epoch at the next batch boundary: the step in progress
  /// applies the batches it has, the epoch's validation and EpochEnd follow, then the next epoch
  /// begins. The first reason given is kept until the epoch has ended (see docs/events.md).
  void request_epoch_end(std::string reason);
  /// Whether the current epoch was asked to end.
  bool epoch_end_requested() const noexcept { return epoch_end_requested_; }
  /// Why the current epoch ends early (empty when it does not).
  const std::string& epoch_end_reason() const noexcept { return epoch_end_reason_; }
  /// Forgets an epoch end request (when an epoch has ended, and at the start of an action).
  void clear_epoch_end() noexcept;

  /// The trainer running the current fit() or evaluate(), for callbacks that must ask it to act
  /// (e.g. take a checkpoint); throws ConfigError outside one.
  Trainer& trainer() const;

  /// Records `value` in the metric history at the current step and epoch.
  void record_metric(std::string_view name, double value) {
    metrics.record(name, step, epoch, value);
  }
  /// Records a one-element tensor in the metric history at the current step and epoch, no sync.
  void record_metric(std::string_view name, at::Tensor value) {
    metrics.record(name, step, epoch, std::move(value));
  }

 private:
  friend struct detail::StateWriter;  // the framework's one writer of State's fields

  /// Requests the held early stop if min_epochs and min_steps are reached (or outside a fit).
  void release_held_stop();
  /// Makes the batch's values undefined (after BatchEnd and EvalBatchEnd).
  void clear_batch_output() noexcept;
  /// Makes every value of the step's output undefined (at the start of an action).
  void clear_step_output() noexcept;

  at::Tensor batch_loss_;
  at::Tensor backward_loss_;
  at::Tensor step_loss_;
  double step_learning_rate_ = 0.0;
  std::int64_t step_learning_rate_step_ = -1;  // the `step` whose update used it (-1: none)
  at::Tensor batch_output_;
  at::Tensor batch_target_;
  const Batch* batch_ = nullptr;
  bool stop_requested_ = false;
  std::string stop_reason_;
  std::optional<std::string> held_stop_reason_;
  std::int64_t epochs_completed_ = 0;
  StopKind stop_kind_ = StopKind::Finished;
  bool epoch_end_requested_ = false;
  std::string epoch_end_reason_;
  Trainer* trainer_ = nullptr;
};

}  // namespace torchbus
