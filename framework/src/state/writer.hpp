#pragma once

/// \file
/// Every write the framework makes to State's fields, named by what it means (private to
/// torchbus_framework). The loops and the Trainer keep their own records (the fit's counters, the
/// evaluation's batch, the current optimizer phase, the run stage) and hand them here; no other
/// framework file assigns a State field (docs/architecture.md, "Who writes State").

#include <torchbus/state.hpp>
#include <torchbus/trainer_options.hpp>

#include <exception>
#include <string>
#include <string_view>
#include <utility>

namespace torchbus::detail {

/// Sets State's fields for the framework's parts; subscribers read them, and what they write is
/// overwritten by the next publication (progress) or read as a request (skip_update, stops).
struct StateWriter {
  // ---- the action and what it trains (the Trainer, before ActionStart) ----
  /// The action running and the trainer running it (Action::None, null: none).
  static void set_action(State& state, Action action, Trainer* trainer) noexcept {
    state.action = action;
    state.trainer_ = trainer;
  }
  /// The model, its device and the run's limits, for one action.
  static void set_run(State& state, torch::nn::Module* model, c10::Device device,
                      const TrainerOptions& options) {
    state.model = model;
    state.device = device;
    state.max_epochs = options.max_epochs();
    state.max_steps = options.max_steps();
    state.min_epochs = options.min_epochs();
    state.min_steps = options.min_steps();
    state.fast_dev_run = options.fast_dev_run() > 0;
  }
  /// The process group and this process's place in it (null: one process).
  static void set_placement(State& state, ProcessGroup* group, int rank, int local_rank,
                            int world_size) noexcept {
    state.process_group = group;
    state.rank = rank;
    state.local_rank = local_rank;
    state.world_size = world_size;
  }

  // ---- progress, published from the loops' records before each emission ----
  /// Requests an early stop held until now if min_epochs and min_steps are reached.
  static void release_held_stop(State& state) { state.release_held_stop(); }
  /// The fit loop's counters, and the epochs it has trained to their end.
  static void publish_fit(State& state, std::int64_t epoch, std::int64_t step,
                          std::int64_t batch_in_epoch, std::int64_t global_batch,
                          std::int64_t window_position, std::int64_t epochs_completed) noexcept {
    state.epoch = epoch;
    state.epochs_completed_ = epochs_completed;
    state.step = step;
    state.batch_in_epoch = batch_in_epoch;
    state.global_batch = global_batch;
    state.window_position = window_position;
  }
  /// The evaluation loop's batch.
  static void publish_evaluation(State& state, std::int64_t batch) noexcept {
    state.eval_batch = batch;
  }
  /// The predict loop's batch count.
  static void publish_prediction(State& state, std::int64_t batch) noexcept {
    state.predict_batch = batch;
  }
  /// The optimization step's window and current phase.
  static void publish_step(State& state, std::int64_t window_size, std::size_t phase,
                           std::string_view phase_name, torch::optim::Optimizer* optimizer,
                           std::int64_t phase_steps) noexcept {
    state.window_size = window_size;
    state.optimizer_phase = phase;
    state.optimizer_phase_name = phase_name;
    state.optimizer = optimizer;
    state.optimizer_phase_step = phase_steps;
  }
  /// The learning rate the update counted as step `step` used (`step` -1: none yet).
  static void publish_step_learning_rate(State& state, std::int64_t step, double rate) noexcept {
    state.step_learning_rate_step_ = step;
    state.step_learning_rate_ = rate;
  }

  // ---- the run stage ----
  /// Training batches (true) or an evaluation (false).
  static void set_training(State& state, bool training) noexcept { state.training = training; }
  /// During the sanity validation before training.
  static void set_sanity_checking(State& state, bool on) noexcept { state.sanity_checking = on; }

  static void set_epoch_cut_short(State& state, bool cut_short) noexcept {
    state.epoch_cut_short = cut_short;
  }
  /// Batches per optimizer step in the current epoch.
  static void set_accumulation(State& state, std::int64_t batches) noexcept {
    state.accumulate_grad_batches = batches;
  }
  /// At StepEnd: whether a validation runs right after this step.
  static void set_validation_follows(State& state, bool follows) noexcept {
    state.validation_follows = follows;
  }
  /// At StepEnd: whether the step made no optimizer update.
  static void set_update_skipped(State& state, bool skipped) noexcept {
    state.update_skipped = skipped;
  }
  /// The metric history as it was (after the sanity validation).
  static void restore_metrics(State& state, MetricHistory metrics) {
    state.metrics = std::move(metrics);
  }

  // ---- requests a subscriber makes, which the loops read and reset ----
  /// Whether the current batch is cancelled.
  static void set_cancelled(State& state, bool cancelled) noexcept { state.cancelled = cancelled; }
  /// Whether the current phase's update is to be skipped.
  static void set_skip_update(State& state, bool skip) noexcept { state.skip_update = skip; }

  // ---- the exception escaping a run ----
  /// The exception and its text (null, "": none).
  static void set_error(State& state, std::exception_ptr error, std::string message) {
    state.error = std::move(error);
    state.error_message = std::move(message);
  }

  // ---- the step's output (docs/events.md, "The step's output") ----
  /// The batch's loss as its step returned it, and its target (before BeforeBackward or after the
  /// eval step).
  static void set_batch(State& state, const at::Tensor& loss, const at::Tensor& target) {
    state.batch_loss_ = loss;
    state.batch_target_ = target;
  }
  /// The batch being trained or evaluated, from its BatchStart (EvalBatchStart) on; cleared with
  /// the rest of the batch's output.
  static void set_current_batch(State& state, const Batch& batch) noexcept {
    state.batch_ = &batch;
  }
  /// No current batch (its storage is going away).
  static void forget_current_batch(State& state) noexcept { state.batch_ = nullptr; }
  /// The batch's loss as back-propagated (scaled by the window).
  static void set_backward(State& state, const at::Tensor& loss) { state.backward_loss_ = loss; }
  /// The step's loss (before AfterOptimizerStep); undefined after StepEnd.
  static void set_step(State& state, const at::Tensor& loss) { state.step_loss_ = loss; }
  /// After BatchEnd and EvalBatchEnd.
  static void clear_batch(State& state) noexcept { state.clear_batch_output(); }
  /// At the start of an action.
  static void clear_all(State& state) noexcept { state.clear_step_output(); }
};

}  // namespace torchbus::detail
