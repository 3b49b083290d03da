#pragma once

/// \file
/// EarlyStopping: stops the run when a monitored metric stops improving, reaches a target or
/// diverges.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/metric_monitor.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/event.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/metric_names.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torchbus {

/// What EarlyStopping watches, e.g.
/// `EarlyStoppingOptions().monitor("val_accuracy").mode(Mode::Max).patience(5)`.
struct EarlyStoppingOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "early_stopping";
  /// Name of the metric in the metric history to watch.
  TORCH_ARG(std::string, monitor) = std::string(metric_names::kValLoss);
  /// Whether lower (Min) or higher (Max) values are better.
  TORCH_ARG(Mode, mode) = Mode::Min;
  /// Checks in a row without improvement after which the run stops (>= 0; 0: the first one).
  TORCH_ARG(std::int64_t, patience) = 3;
  /// An improvement must beat the best value by more than this (>= 0).
  TORCH_ARG(double, min_delta) = 0.0;
  /// Stop as soon as the metric is better than this value (Min: <, Max: >; strict, as Lightning).
  TORCH_ARG(std::optional<double>, stopping_threshold) = std::nullopt;
  /// Stop as soon as the metric is worse than this value (Min: >, Max: <).
  TORCH_ARG(std::optional<double>, divergence_threshold) = std::nullopt;
  /// Stop when the metric is NaN or infinite.
  TORCH_ARG(bool, check_finite) = true;
  /// A value the metric must beat (by min_delta) for a check to restart the patience count: with
  /// one, the run stops after `patience` checks that did not beat both the best value and the
  /// baseline (Keras' `baseline`; none: the best value alone).
  TORCH_ARG(std::optional<double>, baseline) = std::nullopt;
  /// Checks in epochs before this one (counted from 0) are not compared with the best value nor
  /// the stopping threshold: a warm-up whose plateaus do not count (Keras' `start_from_epoch`; a
  /// non-finite or diverged value still stops the run). 0: every check counts.
  TORCH_ARG(std::int64_t, start_from_epoch) = 0;
  /// When to check: Event::EvalEnd (after every evaluation) or Event::EpochEnd.
  TORCH_ARG(Event, check_on) = Event::EvalEnd;
  /// When fit() ends without an exception, put back the weights (parameters and buffers) the
  /// model had at the best check, kept in memory (and in checkpoints), as Keras does.
  TORCH_ARG(bool, restore_best_weights) = false;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Stops the run when the monitored metric has not improved for `patience` checks in a row (as
/// Lightning and Keras) or passed `stopping_threshold` (state.request_early_stop: at the next step
/// boundary once TrainerOptions::min_epochs and min_steps are reached), or when it crossed
/// `divergence_threshold` or is not finite (state.request_stop: at the next step boundary). A check
/// reads the metric's newest point (a host sync if it was recorded as a tensor, once per check); a
/// check with no new point since the previous one is skipped. Role::Monitor, after Role::Metrics
/// (so before loggers and checkpoints, which run after monitors).
class EarlyStopping : public Callback {
 public:
  /// An EarlyStopping named by its options; throws ConfigError for invalid options.
  explicit EarlyStopping(EarlyStoppingOptions options = {});

  /// The options it was built with.
  const EarlyStoppingOptions& options() const noexcept { return options_; }
  /// Best value seen so far (+inf for Min, -inf for Max before the first check).
  double best() const noexcept { return monitor_.best(); }
  /// Checks since the last improvement.
  std::int64_t wait() const noexcept { return monitor_.wait(); }
  /// Epoch at which it requested the stop, or -1.
  std::int64_t stopped_epoch() const noexcept { return stopped_epoch_; }

  /// Checks after an evaluation (when check_on is EvalEnd).
  void on_eval_end(State& state) override;
  /// Checks at the end of an epoch (when check_on is EpochEnd).
  void on_epoch_end(State& state) override;
  /// With restore_best_weights: subscribes the restore after the run's final checkpoint.
  void on_added(Trainer& trainer) override;
  /// The weights of the best check (restore_best_weights), parameters then buffers; empty before.
  const std::vector<at::Tensor>& best_weights() const noexcept { return best_weights_; }

  /// Writes best, wait, the last point checked and the stop epoch.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  void check(State& state);
  void keep_best_weights(const State& state);
  void restore_best_weights(const State& state);

  EarlyStoppingOptions options_;
  MetricMonitor monitor_;
  std::int64_t best_step_ = -1;
  std::int64_t best_epoch_ = -1;
  std::int64_t stopped_epoch_ = -1;
  std::vector<at::Tensor> best_weights_;
  ScopedConnection restore_at_end_;
};

}  // namespace torchbus
