#pragma once

/// \file
/// LearningRateScheduler: warmup, cosine decay, one-cycle, step decay, reduce-on-plateau, any
/// closed-form schedule, or a LibTorch scheduler, applied to every parameter group.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/metric_monitor.hpp>
#include <torchbus/event.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/metric_names.hpp>

#include <cstdint>
#include <functional>
#include <memory>
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

/// Linear warmup: lr * (start_factor + (1 - start_factor) * t / warmup_steps), then lr.
struct LinearWarmupOptions {
  /// Warmup over `warmup_steps` schedule steps.
  explicit LinearWarmupOptions(std::int64_t warmup_steps) : warmup_steps_(warmup_steps) {}
  /// Schedule steps until the full learning rate (>= 1).
  TORCH_ARG(std::int64_t, warmup_steps);
  /// Fraction of the learning rate at t = 0, in [0, 1].
  TORCH_ARG(double, start_factor) = 0.0;
};

/// Cosine decay from lr to min_lr over total_steps, after an optional linear warmup.
struct CosineDecayOptions {
  /// Decay (warmup included) over `total_steps` schedule steps.
  explicit CosineDecayOptions(std::int64_t total_steps) : total_steps_(total_steps) {}
  /// Schedule steps of warmup plus decay (>= 1); min_lr afterwards.
  TORCH_ARG(std::int64_t, total_steps);
  /// Linear warmup steps before the decay, in [0, total_steps).
  TORCH_ARG(std::int64_t, warmup_steps) = 0;
  /// Fraction of the learning rate at t = 0 when warming up, in [0, 1].
  TORCH_ARG(double, warmup_start_factor) = 0.0;
  /// Learning rate at the end of the decay (>= 0).
  TORCH_ARG(double, min_lr) = 0.0;
};

/// One-cycle (Smith; PyTorch's OneCycleLR with cosine annealing): the optimizer's learning rate is
/// the peak; from lr / div_factor up to lr over pct_start of total_steps, then down to
/// lr / (div_factor * final_div_factor).
struct OneCycleOptions {
  /// One cycle over `total_steps` schedule steps.
  explicit OneCycleOptions(std::int64_t total_steps) : total_steps_(total_steps) {}
  /// Schedule steps of the cycle; the final learning rate afterwards.
  TORCH_ARG(std::int64_t, total_steps);
  /// Fraction of the cycle spent increasing the learning rate, in (0, 1).
  TORCH_ARG(double, pct_start) = 0.3;
  /// Initial learning rate = lr / div_factor (> 0).
  TORCH_ARG(double, div_factor) = 25.0;
  /// Final learning rate = initial learning rate / final_div_factor (> 0).
  TORCH_ARG(double, final_div_factor) = 1e4;
};

/// Step decay: lr * gamma^floor(t / step_size).
struct StepDecayOptions {
  /// Decay every `step_size` schedule steps.
  explicit StepDecayOptions(std::int64_t step_size) : step_size_(step_size) {}
  /// Schedule steps between decays (>= 1).
  TORCH_ARG(std::int64_t, step_size);
  /// Multiplicative factor of each decay (> 0).
  TORCH_ARG(double, gamma) = 0.1;
};

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
  /// An improvement must beat the best value by more than this (>= 0).
  TORCH_ARG(double, min_delta) = 0.0;
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
  TORCH_ARG(std::string, metric) = "lr";
};

/// A closed-form schedule: the learning rate after `t` schedule steps of a parameter group whose
/// learning rate was `base_lr` when the run started.
using LrLambda = std::function<double(std::int64_t t, double base_lr)>;

/// Sets the learning rate of every parameter group from a schedule. Closed-form schedules are a
/// function of the schedule step t (optimizer steps or epochs done): at ActionStart every group
/// gets lr(t), and after each interval t advances and the groups get lr(t + 1). The base learning
/// rates are the groups' learning rates at the first ActionStart. Never syncs, except
/// reduce-on-plateau, which reads its metric at each check. Role::Scheduler, after Role::Metrics.
class LearningRateScheduler : public Callback {
 public:
  /// Any closed-form schedule.
  explicit LearningRateScheduler(LrLambda schedule, LearningRateSchedulerOptions options = {});
  /// Linear warmup; throws ConfigError for invalid options.
  explicit LearningRateScheduler(const LinearWarmupOptions& warmup,
                                 LearningRateSchedulerOptions options = {});
  /// Cosine decay with optional warmup; throws ConfigError for invalid options.
  explicit LearningRateScheduler(const CosineDecayOptions& cosine,
                                 LearningRateSchedulerOptions options = {});
  /// One-cycle; throws ConfigError for invalid options.
  explicit LearningRateScheduler(const OneCycleOptions& one_cycle,
                                 LearningRateSchedulerOptions options = {});
  /// Step decay; throws ConfigError for invalid options.
  explicit LearningRateScheduler(const StepDecayOptions& step_decay,
                                 LearningRateSchedulerOptions options = {});
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
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  enum class Kind : std::uint8_t { Lambda, Plateau, LibTorch };

  void advance(torch::optim::Optimizer& optimizer);
  void apply(torch::optim::Optimizer& optimizer);
  void capture(torch::optim::Optimizer& optimizer);
  void check_plateau(State& state);

  Kind kind_;
  LrLambda schedule_;
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
