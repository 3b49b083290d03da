#include <torchbus/callbacks/lr_schedule.hpp>
#include <torchbus/error.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

namespace torchbus {
namespace {

constexpr double kPi = 3.14159265358979323846;

/// Cosine annealing from `start` (pct 0) to `end` (pct 1), as PyTorch's OneCycleLR.
double cosine_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}

/// start + (end - start) * min(t, steps) / steps: PyTorch's LinearLR factor.
double linear_factor(std::int64_t t, std::int64_t steps, double start, double end) {
  const auto done = static_cast<double>(std::min(t, steps));
  return start + (end - start) * done / static_cast<double>(steps);
}

void check_factor(double factor, const char* what) {
  TORCHBUS_CHECK(factor >= 0.0 && factor <= 1.0, ConfigError, "LearningRateScheduler: ", what,
                 " must be in [0, 1], got ", factor);
}

void check_steps(std::int64_t steps, const char* schedule, const char* what) {
  TORCHBUS_CHECK(steps >= 1, ConfigError, "LearningRateScheduler: ", schedule, " needs ", what,
                 " >= 1, got ", steps);
}

void check_gamma(double gamma, const char* schedule) {
  TORCHBUS_CHECK(gamma > 0.0, ConfigError, "LearningRateScheduler: ", schedule,
                 " needs gamma > 0, got ", gamma);
}

/// Milestones ascending and >= 1; `what` names them in the message.
void check_milestones(const std::vector<std::int64_t>& milestones, const char* what) {
  for (std::size_t i = 0; i < milestones.size(); ++i) {
    TORCHBUS_CHECK(milestones[i] >= 1 && (i == 0 || milestones[i] >= milestones[i - 1]),
                   ConfigError, "LearningRateScheduler: ", what,
                   " must be ascending schedule steps >= 1, got ", milestones[i], " at index ", i);
  }
}

/// Milestones up to t: the index of the segment t is in.
std::size_t passed(const std::vector<std::int64_t>& milestones, std::int64_t t) {
  return static_cast<std::size_t>(std::upper_bound(milestones.begin(), milestones.end(), t) -
                                  milestones.begin());
}

LrLambda warmup(const LinearWarmupOptions& o) {
  check_steps(o.warmup_steps(), "linear warmup", "warmup_steps");
  check_factor(o.start_factor(), "start_factor");
  return [o](std::int64_t t, double base) {
    if (t >= o.warmup_steps()) return base;  // exactly
    return base * linear_factor(t, o.warmup_steps(), o.start_factor(), 1.0);
  };
}

LrLambda cosine(const CosineDecayOptions& o) {
  check_steps(o.total_steps(), "cosine decay", "total_steps");
  TORCHBUS_CHECK(o.warmup_steps() >= 0 && o.warmup_steps() < o.total_steps(), ConfigError,
                 "LearningRateScheduler: cosine decay needs warmup_steps in [0, total_steps = ",
                 o.total_steps(), "), got ", o.warmup_steps());
  check_factor(o.warmup_start_factor(), "warmup_start_factor");
  TORCHBUS_CHECK(o.min_lr() >= 0.0, ConfigError, "LearningRateScheduler: min_lr must be >= 0, got ",
                 o.min_lr());
  return [o](std::int64_t t, double base) {
    if (t < o.warmup_steps())
      return base * linear_factor(t, o.warmup_steps(), o.warmup_start_factor(), 1.0);
    const double progress =
        std::min(1.0, static_cast<double>(t - o.warmup_steps()) /
                          static_cast<double>(o.total_steps() - o.warmup_steps()));
    return o.min_lr() + (base - o.min_lr()) * 0.5 * (1.0 + std::cos(kPi * progress));
  };
}

/// PyTorch's OneCycleLR phases at step t (clamped to total_steps - 1): from `start` to `peak` until
/// pct_start * total_steps - 1, then to `end_value`, by cosine annealing.
double one_cycle_value(const OneCycleOptions& o, std::int64_t t, double start, double peak,
                       double end_value) {
  const double rise_end = o.pct_start() * static_cast<double>(o.total_steps()) - 1.0;
  const double end = static_cast<double>(o.total_steps() - 1);
  const double step = std::min(static_cast<double>(t), end);
  if (step <= rise_end) return cosine_anneal(start, peak, step / rise_end);
  return cosine_anneal(peak, end_value, (step - rise_end) / (end - rise_end));
}

LrLambda one_cycle(const OneCycleOptions& o) {
  TORCHBUS_CHECK(o.total_steps() >= 2, ConfigError,
                 "LearningRateScheduler: one-cycle needs total_steps >= 2, got ", o.total_steps());
  TORCHBUS_CHECK(o.pct_start() > 0.0 && o.pct_start() < 1.0, ConfigError,
                 "LearningRateScheduler: one-cycle needs pct_start in (0, 1), got ", o.pct_start());
  TORCHBUS_CHECK(o.pct_start() * static_cast<double>(o.total_steps()) > 1.0, ConfigError,
                 "LearningRateScheduler: one-cycle needs pct_start * total_steps > 1 (a rising "
                 "phase of at least one step), got ",
                 o.pct_start(), " * ", o.total_steps());
  TORCHBUS_CHECK(o.div_factor() > 0.0 && o.final_div_factor() > 0.0, ConfigError,
                 "LearningRateScheduler: one-cycle needs div_factor > 0 and final_div_factor > 0, "
                 "got ",
                 o.div_factor(), " and ", o.final_div_factor());
  return [o](std::int64_t t, double max_lr) {
    const double initial = max_lr / o.div_factor();
    return one_cycle_value(o, t, initial, max_lr, initial / o.final_div_factor());
  };
}

std::function<std::optional<double>(std::int64_t)> one_cycle_momentum(const OneCycleOptions& o) {
  if (!o.cycle_momentum()) return {};
  check_factor(o.base_momentum(), "one-cycle base_momentum");
  check_factor(o.max_momentum(), "one-cycle max_momentum");
  return [o](std::int64_t t) -> std::optional<double> {
    return one_cycle_value(o, t, o.max_momentum(), o.base_momentum(), o.max_momentum());
  };
}

LrLambda step_decay(const StepDecayOptions& o) {
  check_steps(o.step_size(), "step decay", "step_size");
  check_gamma(o.gamma(), "step decay");
  return [o](std::int64_t t, double base) {
    const std::int64_t decays = t / o.step_size();  // floor: t >= 0
    return base * std::pow(o.gamma(), static_cast<double>(decays));
  };
}

LrLambda multi_step_decay(const MultiStepDecayOptions& o) {
  check_milestones(o.milestones(), "multi-step decay milestones");
  check_gamma(o.gamma(), "multi-step decay");
  return [o](std::int64_t t, double base) {
    return base * std::pow(o.gamma(), static_cast<double>(passed(o.milestones(), t)));
  };
}

LrLambda exponential_decay(const ExponentialDecayOptions& o) {
  check_gamma(o.gamma(), "exponential decay");
  return [o](std::int64_t t, double base) {
    return base * std::pow(o.gamma(), static_cast<double>(t));
  };
}

LrLambda cosine_restarts(const CosineRestartsOptions& o) {
  check_steps(o.period(), "cosine restarts", "period");
  check_steps(o.period_mult(), "cosine restarts", "period_mult");
  TORCHBUS_CHECK(o.min_lr() >= 0.0, ConfigError,
                 "LearningRateScheduler: cosine restarts needs min_lr >= 0, got ", o.min_lr());
  return [o](std::int64_t t, double base) {
    // The step within its period, in integers as PyTorch's step() counts T_cur and T_i.
    std::int64_t period = o.period();
    if (o.period_mult() == 1) {
      t %= period;
    } else {
      while (t >= period) {
        t -= period;
        period *= o.period_mult();
      }
    }
    return o.min_lr() +
           (base - o.min_lr()) *
               (1.0 + std::cos(kPi * static_cast<double>(t) / static_cast<double>(period))) / 2.0;
  };
}

LrLambda polynomial_decay(const PolynomialDecayOptions& o) {
  check_steps(o.total_steps(), "polynomial decay", "total_steps");
  TORCHBUS_CHECK(o.power() >= 0.0, ConfigError,
                 "LearningRateScheduler: polynomial decay needs power >= 0, got ", o.power());
  return [o](std::int64_t t, double base) {
    return base * std::pow(linear_factor(t, o.total_steps(), 1.0, 0.0), o.power());
  };
}

LrLambda linear(const LinearFactorOptions& o) {
  check_steps(o.total_steps(), "linear factor", "total_steps");
  check_factor(o.start_factor(), "linear factor start_factor");
  check_factor(o.end_factor(), "linear factor end_factor");
  return [o](std::int64_t t, double base) {
    return base * linear_factor(t, o.total_steps(), o.start_factor(), o.end_factor());
  };
}

LrLambda constant(const ConstantFactorOptions& o) {
  check_steps(o.total_steps(), "constant factor", "total_steps");
  check_factor(o.factor(), "constant factor factor");
  return
      [o](std::int64_t t, double base) { return t < o.total_steps() ? base * o.factor() : base; };
}

/// PyTorch's CyclicLR at step t: where t is in its cycle (0 at the bottom, 1 at the top) times the
/// mode's amplitude.
double cyclic_height(const CyclicOptions& o, std::int64_t t) {
  const auto up = static_cast<double>(o.step_size_up());
  const auto total = up + static_cast<double>(o.step_size_down().value_or(o.step_size_up()));
  const double ratio = up / total;
  const double step = static_cast<double>(t);
  const double cycle = std::floor(1.0 + step / total);
  const double x = 1.0 + step / total - cycle;
  const double scale = x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
  switch (o.mode()) {
    case CyclicMode::Triangular2:
      return scale / std::pow(2.0, cycle - 1.0);
    case CyclicMode::ExpRange:
      return scale * std::pow(o.gamma(), step);
    case CyclicMode::Triangular:
      break;
  }
  return scale;
}

LrLambda cyclic(const CyclicOptions& o) {
  TORCHBUS_CHECK(o.max_lr() > 0.0, ConfigError,
                 "LearningRateScheduler: cyclic needs max_lr > 0, got ", o.max_lr());
  check_steps(o.step_size_up(), "cyclic", "step_size_up");
  if (o.step_size_down()) check_steps(*o.step_size_down(), "cyclic", "step_size_down");
  check_gamma(o.gamma(), "cyclic");
  return
      [o](std::int64_t t, double base) { return base + (o.max_lr() - base) * cyclic_height(o, t); };
}

std::function<std::optional<double>(std::int64_t)> cyclic_momentum(const CyclicOptions& o) {
  if (!o.cycle_momentum()) return {};
  check_factor(o.base_momentum(), "cyclic base_momentum");
  check_factor(o.max_momentum(), "cyclic max_momentum");
  return [o](std::int64_t t) -> std::optional<double> {
    return o.max_momentum() - (o.max_momentum() - o.base_momentum()) * cyclic_height(o, t);
  };
}

/// Schedule step t as the step of its segment, counted from the segment's start.
std::int64_t segment_step(const std::vector<std::int64_t>& milestones, std::size_t segment,
                          std::int64_t t) {
  return segment == 0 ? t : t - milestones[segment - 1];
}

LrLambda sequential(const SequentialOptions& o) {
  TORCHBUS_CHECK(!o.schedules().empty() && o.milestones().size() + 1 == o.schedules().size(),
                 ConfigError,
                 "LearningRateScheduler: sequential needs one milestone fewer than schedules, got ",
                 o.schedules().size(), " schedules and ", o.milestones().size(), " milestones");
  check_milestones(o.milestones(), "sequential milestones");
  return [o](std::int64_t t, double base) {
    const std::size_t segment = passed(o.milestones(), t);
    return o.schedules()[segment].lr(segment_step(o.milestones(), segment, t), base);
  };
}

std::function<std::optional<double>(std::int64_t)> sequential_momentum(const SequentialOptions& o) {
  return [o](std::int64_t t) {
    const std::size_t segment = passed(o.milestones(), t);
    return o.schedules()[segment].momentum(segment_step(o.milestones(), segment, t));
  };
}

}  // namespace

SequentialOptions::SequentialOptions(std::vector<LrSchedule> schedules,
                                     std::vector<std::int64_t> milestones)
    : schedules_(std::move(schedules)), milestones_(std::move(milestones)) {}

LrSchedule::LrSchedule(LrLambda lr, MomentumLambda momentum)
    : lr_(std::move(lr)), momentum_(std::move(momentum)) {
  TORCHBUS_CHECK(static_cast<bool>(lr_), ConfigError,
                 "LearningRateScheduler needs a schedule (t, base_lr) -> lr, got an empty "
                 "function");
}

LrSchedule::LrSchedule(LrLambda lr) : LrSchedule(std::move(lr), MomentumLambda{}) {}

LrSchedule::LrSchedule(const LinearWarmupOptions& options) : LrSchedule(warmup(options)) {}

LrSchedule::LrSchedule(const CosineDecayOptions& options) : LrSchedule(cosine(options)) {}

LrSchedule::LrSchedule(const OneCycleOptions& options)
    : LrSchedule(one_cycle(options), one_cycle_momentum(options)) {}

LrSchedule::LrSchedule(const StepDecayOptions& options) : LrSchedule(step_decay(options)) {}

LrSchedule::LrSchedule(const MultiStepDecayOptions& options)
    : LrSchedule(multi_step_decay(options)) {}

LrSchedule::LrSchedule(const ExponentialDecayOptions& options)
    : LrSchedule(exponential_decay(options)) {}

LrSchedule::LrSchedule(const CosineRestartsOptions& options)
    : LrSchedule(cosine_restarts(options)) {}

LrSchedule::LrSchedule(const PolynomialDecayOptions& options)
    : LrSchedule(polynomial_decay(options)) {}

LrSchedule::LrSchedule(const LinearFactorOptions& options) : LrSchedule(linear(options)) {}

LrSchedule::LrSchedule(const ConstantFactorOptions& options) : LrSchedule(constant(options)) {}

LrSchedule::LrSchedule(const CyclicOptions& options)
    : LrSchedule(cyclic(options), cyclic_momentum(options)) {}

LrSchedule::LrSchedule(const SequentialOptions& options)
    : LrSchedule(sequential(options), sequential_momentum(options)) {}

}  // namespace torchbus
