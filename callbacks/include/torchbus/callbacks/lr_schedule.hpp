#pragma once

/// \file
/// LrSchedule: a closed-form learning-rate schedule (and optionally momentum) of the schedule step,
/// built from the options of PyTorch's schedulers or any function, and chained with
/// SequentialOptions; LearningRateScheduler applies one to every parameter group.

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace torchbus {

/// A closed-form schedule: the learning rate after `t` schedule steps of a parameter group whose
/// learning rate was `base_lr` when the run started.
using LrLambda = std::function<double(std::int64_t t, double base_lr)>;

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
/// lr / (div_factor * final_div_factor). With cycle_momentum (the default, as PyTorch) the momentum
/// (SGD, RMSprop) or beta1 (Adam, AdamW) goes the other way: max_momentum down to base_momentum
/// while the rate rises, then back up.
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
  /// Cycle every group's momentum (SGD, RMSprop) or beta1 (Adam, AdamW) inversely to the rate;
  /// another optimizer is a ConfigError at the first ActionStart.
  TORCH_ARG(bool, cycle_momentum) = true;
  /// Momentum at the peak of the learning rate, in [0, 1].
  TORCH_ARG(double, base_momentum) = 0.85;
  /// Momentum at the start and the end of the cycle, in [0, 1].
  TORCH_ARG(double, max_momentum) = 0.95;
};

/// Step decay (PyTorch's StepLR): lr * gamma^floor(t / step_size).
struct StepDecayOptions {
  /// Decay every `step_size` schedule steps.
  explicit StepDecayOptions(std::int64_t step_size) : step_size_(step_size) {}
  /// Schedule steps between decays (>= 1).
  TORCH_ARG(std::int64_t, step_size);
  /// Multiplicative factor of each decay (> 0).
  TORCH_ARG(double, gamma) = 0.1;
};

/// Decay at given steps (PyTorch's MultiStepLR): lr * gamma^(milestones <= t).
struct MultiStepDecayOptions {
  /// Decay at each of `milestones` (schedule steps).
  explicit MultiStepDecayOptions(std::vector<std::int64_t> milestones)
      : milestones_(std::move(milestones)) {}
  /// Schedule steps at which the rate decays, ascending, >= 1 (a repeated one decays twice).
  TORCH_ARG(std::vector<std::int64_t>, milestones);
  /// Multiplicative factor of each decay (> 0).
  TORCH_ARG(double, gamma) = 0.1;
};

/// Exponential decay (PyTorch's ExponentialLR): lr * gamma^t.
struct ExponentialDecayOptions {
  /// Multiply by `gamma` at every schedule step (> 0).
  explicit ExponentialDecayOptions(double gamma) : gamma_(gamma) {}
  /// Multiplicative factor per schedule step (> 0).
  TORCH_ARG(double, gamma);
};

/// Cosine annealing with warm restarts (SGDR; PyTorch's CosineAnnealingWarmRestarts): from lr down
/// towards min_lr over a period, then back to lr; each period is period_mult times the previous.
struct CosineRestartsOptions {
  /// First period of `period` schedule steps.
  explicit CosineRestartsOptions(std::int64_t period) : period_(period) {}
  /// Schedule steps of the first period (>= 1).
  TORCH_ARG(std::int64_t, period);
  /// Factor of each period's length over the previous one (>= 1).
  TORCH_ARG(std::int64_t, period_mult) = 1;
  /// Learning rate approached at the end of each period (>= 0).
  TORCH_ARG(double, min_lr) = 0.0;
};

/// Polynomial decay (PyTorch's PolynomialLR): lr * (1 - min(t, total_steps) / total_steps)^power.
struct PolynomialDecayOptions {
  /// Decay to 0 over `total_steps` schedule steps.
  explicit PolynomialDecayOptions(std::int64_t total_steps) : total_steps_(total_steps) {}
  /// Schedule steps of the decay (>= 1); 0 afterwards.
  TORCH_ARG(std::int64_t, total_steps);
  /// Power of the polynomial (>= 0).
  TORCH_ARG(double, power) = 1.0;
};

/// A linearly changing factor (PyTorch's LinearLR): lr * (start_factor + (end_factor -
/// start_factor) * min(t, total_steps) / total_steps).
struct LinearFactorOptions {
  /// The factor goes from start_factor to end_factor over `total_steps` schedule steps.
  explicit LinearFactorOptions(std::int64_t total_steps) : total_steps_(total_steps) {}
  /// Schedule steps of the change (>= 1); end_factor afterwards.
  TORCH_ARG(std::int64_t, total_steps);
  /// Factor at t = 0, in [0, 1] (PyTorch's default 1/3).
  TORCH_ARG(double, start_factor) = 1.0 / 3.0;
  /// Factor from t = total_steps on, in [0, 1].
  TORCH_ARG(double, end_factor) = 1.0;
};

/// A constant factor for a while (PyTorch's ConstantLR): lr * factor while t < total_steps, then
/// lr.
struct ConstantFactorOptions {
  /// The factor holds for `total_steps` schedule steps.
  explicit ConstantFactorOptions(std::int64_t total_steps) : total_steps_(total_steps) {}
  /// Schedule steps with the factor (>= 1).
  TORCH_ARG(std::int64_t, total_steps);
  /// Factor of the learning rate meanwhile, in [0, 1] (PyTorch's default 1/3).
  TORCH_ARG(double, factor) = 1.0 / 3.0;
};

/// How CyclicOptions scales each cycle's amplitude (PyTorch's CyclicLR modes).
enum class CyclicMode : std::uint8_t {
  Triangular,   ///< the same amplitude every cycle
  Triangular2,  ///< halved each cycle
  ExpRange      ///< multiplied by gamma^t
};

/// A cyclical learning rate (Smith 2017; PyTorch's CyclicLR): from the optimizer's rate (PyTorch's
/// base_lr) up to max_lr over step_size_up steps and back over step_size_down, the momentum the
/// other way with cycle_momentum (momentum of SGD and RMSprop, beta1 of Adam and AdamW).
struct CyclicOptions {
  /// Cycles between the optimizer's rate and `max_lr`, rising over `step_size_up` steps.
  CyclicOptions(double max_lr, std::int64_t step_size_up)
      : max_lr_(max_lr), step_size_up_(step_size_up) {}
  /// The rate at the top of the cycle, for every group (> 0).
  TORCH_ARG(double, max_lr);
  /// Schedule steps of the rising half (>= 1).
  TORCH_ARG(std::int64_t, step_size_up);
  /// Schedule steps of the falling half (>= 1; none: step_size_up).
  TORCH_ARG(std::optional<std::int64_t>, step_size_down) = std::nullopt;
  /// How the amplitude changes from cycle to cycle.
  TORCH_ARG(CyclicMode, mode) = CyclicMode::Triangular;
  /// Factor of CyclicMode::ExpRange per schedule step (> 0).
  TORCH_ARG(double, gamma) = 1.0;
  /// Cycle every group's momentum inversely to the rate (an optimizer without one is a
  /// ConfigError at the first ActionStart).
  TORCH_ARG(bool, cycle_momentum) = true;
  /// Momentum at the top of the rate, in [0, 1].
  TORCH_ARG(double, base_momentum) = 0.8;
  /// Momentum at the bottom of the rate, in [0, 1].
  TORCH_ARG(double, max_momentum) = 0.9;
};

struct SequentialOptions;

/// A closed-form schedule of the schedule step t (optimizer steps or epochs done): the learning
/// rate of a group from its base rate, and optionally the momentum (beta1 for Adam). Built
/// implicitly from any options struct above (throws ConfigError for invalid options) or from an
/// LrLambda.
class LrSchedule {
 public:
  /// Any learning-rate function; the momentum is left alone. Throws ConfigError if empty.
  LrSchedule(LrLambda lr);  // NOLINT(google-explicit-constructor)
  /// Linear warmup.
  LrSchedule(const LinearWarmupOptions& options);  // NOLINT(google-explicit-constructor)
  /// Cosine decay with optional warmup.
  LrSchedule(const CosineDecayOptions& options);  // NOLINT(google-explicit-constructor)
  /// One-cycle, with the momentum unless cycle_momentum is false.
  LrSchedule(const OneCycleOptions& options);  // NOLINT(google-explicit-constructor)
  /// Step decay.
  LrSchedule(const StepDecayOptions& options);  // NOLINT(google-explicit-constructor)
  /// Decay at milestones.
  LrSchedule(const MultiStepDecayOptions& options);  // NOLINT(google-explicit-constructor)
  /// Exponential decay.
  LrSchedule(const ExponentialDecayOptions& options);  // NOLINT(google-explicit-constructor)
  /// Cosine annealing with warm restarts.
  LrSchedule(const CosineRestartsOptions& options);  // NOLINT(google-explicit-constructor)
  /// Polynomial decay.
  LrSchedule(const PolynomialDecayOptions& options);  // NOLINT(google-explicit-constructor)
  /// Linear factor.
  LrSchedule(const LinearFactorOptions& options);  // NOLINT(google-explicit-constructor)
  /// Constant factor.
  LrSchedule(const ConstantFactorOptions& options);  // NOLINT(google-explicit-constructor)
  /// Cyclical learning rate, with the momentum unless cycle_momentum is false.
  LrSchedule(const CyclicOptions& options);  // NOLINT(google-explicit-constructor)
  /// Schedules chained at milestones.
  LrSchedule(const SequentialOptions& options);  // NOLINT(google-explicit-constructor)

  /// The learning rate at schedule step `t` of a group whose base rate is `base_lr`.
  double lr(std::int64_t t, double base_lr) const { return lr_(t, base_lr); }
  /// The momentum at schedule step `t`, or nullopt where the schedule leaves it alone.
  std::optional<double> momentum(std::int64_t t) const {
    return momentum_ ? momentum_(t) : std::nullopt;
  }

 private:
  using MomentumLambda = std::function<std::optional<double>(std::int64_t t)>;
  LrSchedule(LrLambda lr, MomentumLambda momentum);

  LrLambda lr_;
  MomentumLambda momentum_;  // empty: the momentum is left alone
};

/// Schedules one after another (PyTorch's SequentialLR): schedule i runs from milestone i - 1 (0
/// for the first) with its own step counted from 0 and the run's base learning rate.
struct SequentialOptions {
  /// `schedules` separated by `milestones` (one fewer).
  SequentialOptions(std::vector<LrSchedule> schedules, std::vector<std::int64_t> milestones);
  /// The schedules, in order (at least one).
  TORCH_ARG(std::vector<LrSchedule>, schedules);
  /// Schedule steps at which the next schedule starts: ascending, >= 1, one fewer than schedules.
  TORCH_ARG(std::vector<std::int64_t>, milestones);
};

}  // namespace torchbus
