#pragma once

/// \file
/// ValueScheduler: any value of a run (a loss weight, a KL beta, an entropy coefficient, a
/// teacher-forcing ratio) on one of the learning-rate schedules, as Ignite's ParamScheduler.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/lr_schedule.hpp>
#include <torchbus/event_list.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace torchbus {

/// What a ValueScheduler schedules, e.g. `ValueSchedulerOptions("kl_beta").interval(Epoch)`.
struct ValueSchedulerOptions {
  /// Schedules the value named `value`: the callback's name and the metric it records.
  explicit ValueSchedulerOptions(std::string value) : value_(std::move(value)) {}
  /// The value's name (not empty).
  TORCH_ARG(std::string, value);
  /// The schedule step t: optimizer steps done (the value set at each StepStart) or epochs done
  /// (at each EpochStart).
  TORCH_ARG(ScheduleInterval, interval) = ScheduleInterval::Step;
  /// Record the value in the metric history under its name at every StepEnd (no sync).
  TORCH_ARG(bool, record) = true;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Calls `set(schedule.lr(t, initial))` at every ActionStart of a fit and then at every StepStart
/// (ScheduleInterval::Step, t = state.step) or EpochStart (Epoch, t = state.epoch): the value a
/// LearningRateScheduler with the same schedule gives the learning rate, at the same moments.
/// A function of the run's counters, so a resume continues it with no state of its own.
/// Role::Scheduler, after Role::Metrics.
class ValueScheduler : public Callback {
 public:
  /// The value starting at `initial` (the schedule's base), each new one given to `set`; throws
  /// ConfigError for invalid options or an empty `set`.
  ValueScheduler(ValueSchedulerOptions options, double initial, LrSchedule schedule,
                 std::function<void(double)> set);

  /// The options it was built with.
  const ValueSchedulerOptions& options() const noexcept { return options_; }
  /// The value last set (`initial` before the first).
  double value() const noexcept { return value_; }

  /// Sets the value of the run's current schedule step.
  void on_action_start(State& state) override;
  /// Sets the value of this step (ScheduleInterval::Step).
  void on_step_start(State& state) override;
  /// Sets the value of this epoch (ScheduleInterval::Epoch).
  void on_epoch_start(State& state) override;
  /// Records the value the step used.
  void on_step_end(State& state) override;
  /// The hooks its interval and `record` leave unused (not subscribed).
  EventList unused_hooks() const override;

 private:
  void apply(std::int64_t t);

  ValueSchedulerOptions options_;
  double initial_;
  LrSchedule schedule_;
  std::function<void(double)> set_;
  double value_;
};

}  // namespace torchbus
