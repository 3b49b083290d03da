#pragma once

/// \file
/// LearningRateScheduler: a closed-form schedule (lr_schedule.hpp: PyTorch's schedulers, chained or
/// any function), reduce-on-plateau or a LibTorch scheduler, applied to every parameter group.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/lr_schedule.hpp>
#include <torchbus/callbacks/metric_monitor.hpp>
#include <torchbus/event.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/metric_names.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch {
namespace optim {
class LRScheduler;
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace torchbus {

/// When a schedule advances: after every optimizer step, or at the end of every epoch.
enum class ScheduleInterval : std::uint8_t { Step, Epoch };

/// Reduce-on-plateau: multiply every group's learning rate by `factor` (not below min_lr) when the
/// monitored metric has not improved for more than `patience` checks.
struct ReduceOnPlateauOptions {
  /// Name of the metric in the metric history to watch.
  TORCH_ARG(std::string, monitor) = std::string(metric_names::kValLoss);
  /// Whether lower (Min) or higher (Max) values are better.
  TORCH_ARG(Mode, mode) = Mode::Min;
  /// Checks without improvement tolerated; the learning rate drops at the next one (>= 0).
  TORCH_ARG(std::int64_t, patience) = 10;
  /// Multiplicative factor of each reduction, in (0, 1).
  TORCH_ARG(double, factor) = 0.1;
  /// Checks after a reduction during which no improvement is counted (>= 0).
  TORCH_ARG(std::int64_t, cooldown) = 0;
  /// Lower bound of every group's learning rate (>= 0).
  TORCH_ARG(double, min_lr) = 0.0;
  /// A group's reduction is skipped when it would lower the rate by `eps` or less (old - new <=
  /// eps), as PyTorch's ReduceLROnPlateau (>= 0).
  TORCH_ARG(double, eps) = 1e-8;
  /// An improvement must beat the best value by more than this (>= 0), measured by
  /// threshold_mode: PyTorch's `threshold`.
  TORCH_ARG(double, min_delta) = 0.0;
  /// How min_delta is measured: Abs (best -/+ min_delta) or Rel (best * (1 -/+ min_delta)), as
  /// PyTorch's `threshold_mode`. Abs by default, unlike PyTorch's 'rel': min_delta is the same
  /// absolute margin as EarlyStopping's (Lightning's), a run that sets it keeps its meaning, and
  /// with the default min_delta 0 both modes agree. PyTorch's defaults (threshold 1e-4 'rel'):
  /// `.threshold_mode(ThresholdMode::Rel).min_delta(1e-4)`.
  TORCH_ARG(ThresholdMode, threshold_mode) = ThresholdMode::Abs;
  /// When to check: Event::EvalEnd (after every evaluation) or Event::EpochEnd.
  TORCH_ARG(Event, check_on) = Event::EvalEnd;
};

/// How a LearningRateScheduler advances and reports.
struct LearningRateSchedulerOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "learning_rate_scheduler";
  /// Advance after every optimizer step (AfterOptimizerStep) or every epoch (EpochEnd); not used
  /// by reduce-on-plateau, which acts at its own check_on event.
  TORCH_ARG(ScheduleInterval, interval) = ScheduleInterval::Step;
  /// Metric recording the learning rate of group 0 for every optimizer step ("" records nothing);
  /// other groups as "<metric>_group_<i>".
  TORCH_ARG(std::string, metric) = std::string(metric_names::kLearningRate);
  /// The optimizer phase whose optimizer it schedules, by name (docs/trainer.md, "Several
  /// optimizers"): it advances after that phase's optimizer steps. Empty: the first phase (a
  /// trainer of one optimizer has only that one).
  TORCH_ARG(std::string, phase) = "";
};

/// Sets the learning rate of every parameter group from a schedule. Closed-form schedules are a
/// function of the schedule step t (optimizer steps or epochs done): at ActionStart every group
/// gets lr(t), and after each interval t advances and the groups get lr(t + 1). The base learning
/// rates are the groups' learning rates at the first ActionStart. Never syncs, except
/// reduce-on-plateau, which reads its metric at each check. Role::Scheduler, after Role::Metrics.
class LearningRateScheduler : public Callback {
 public:
  /// Any closed-form schedule function (t, base_lr) -> lr.
  explicit LearningRateScheduler(LrLambda schedule, LearningRateSchedulerOptions options = {});
  /// A closed-form schedule, e.g. CosineDecayOptions(1000) or SequentialOptions(...) (options
  /// convert to LrSchedule, which throws ConfigError for invalid ones).
  explicit LearningRateScheduler(LrSchedule schedule, LearningRateSchedulerOptions options = {});
  /// Reduce-on-plateau; throws ConfigError for invalid options.
  explicit LearningRateScheduler(ReduceOnPlateauOptions plateau,
                                 LearningRateSchedulerOptions options = {});
  /// A LibTorch scheduler (e.g. torch::optim::StepLR) built on the trainer's optimizer: its
  /// step() is called after each interval.
  explicit LearningRateScheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler,
                                 LearningRateSchedulerOptions options = {});

  /// The options it was built with.
  const LearningRateSchedulerOptions& options() const noexcept { return options_; }
  /// Schedule steps done (optimizer steps or epochs, by the interval).
  std::int64_t schedule_steps() const noexcept { return t_; }
  /// Learning rates of the parameter groups when the run started (empty before).
  const std::vector<double>& base_lrs() const noexcept { return base_lrs_; }
  /// Reductions made by reduce-on-plateau.
  std::int64_t reductions() const noexcept { return reductions_; }

  /// Captures the base learning rates (first time) and applies the schedule's current value.
  void on_action_start(State& state) override;
  /// Applies learning rates restored by load_state before the first step after a resume.
  void on_step_start(State& state) override;
  /// Records the learning rate the step used; advances a per-step schedule.
  void on_after_optimizer_step(State& state) override;
  /// Checks reduce-on-plateau (when check_on is EvalEnd).
  void on_eval_end(State& state) override;
  /// Advances a per-epoch schedule; checks reduce-on-plateau (when check_on is EpochEnd).
  void on_epoch_end(State& state) override;

  /// Writes t, the base and current learning rates and the plateau counters.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  enum class Kind : std::uint8_t { Lambda, Plateau, LibTorch };

  void advance(torch::optim::Optimizer& optimizer);
  void apply(torch::optim::Optimizer& optimizer);
  void capture(torch::optim::Optimizer& optimizer);
  void check_plateau(State& state);
  torch::optim::Optimizer* scheduled_optimizer(const State& state) const;

  Kind kind_;
  std::optional<LrSchedule> schedule_;  // Kind::Lambda
  ReduceOnPlateauOptions plateau_;
  std::shared_ptr<torch::optim::LRScheduler> libtorch_;
  LearningRateSchedulerOptions options_;
  std::vector<std::string> metric_names_;  // per group

  std::int64_t t_ = 0;
  std::vector<double> base_lrs_;
  std::vector<double> lrs_;     // current learning rates (plateau), set on the optimizer
  bool pending_apply_ = false;  // load_state restored values not yet on the optimizer

  // Reduce-on-plateau.
  MetricMonitor monitor_;
  std::int64_t cooldown_left_ = 0;
  std::int64_t reductions_ = 0;
};

}  // namespace torchbus
