#include <torchbus/callbacks/value_scheduler.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <utility>

namespace torchbus {

void ValueSchedulerOptions::validate() const {
  TORCHBUS_CHECK(!value().empty(), ConfigError,
                 "ValueScheduler: the value's name is empty; expected a name such as \"kl_beta\" "
                 "(the callback's and the metric's)");
}

ValueScheduler::ValueScheduler(ValueSchedulerOptions options, double initial, LrSchedule schedule,
                               std::function<void(double)> set)
    : Callback(options.value()),
      options_(std::move(options)),
      initial_(initial),
      schedule_(std::move(schedule)),
      set_(std::move(set)),
      value_(initial) {
  set_role(Role::Scheduler).after(Role::Metrics);
  options_.validate();
  TORCHBUS_CHECK(static_cast<bool>(set_), ConfigError, "ValueScheduler '", options_.value(),
                 "': the function that sets the value is empty");
}

EventList ValueScheduler::unused_hooks() const {
  EventList unused;
  unused |= options_.interval() == ScheduleInterval::Step ? Event::EpochStart : Event::StepStart;
  if (!options_.record()) unused |= Event::StepEnd;
  return unused;
}

void ValueScheduler::apply(std::int64_t t) {
  value_ = schedule_.lr(t, initial_);
  set_(value_);
}

void ValueScheduler::on_action_start(State& state) {
  if (state.action != Action::Fit) return;
  apply(options_.interval() == ScheduleInterval::Step ? state.step : state.epoch);
}

void ValueScheduler::on_step_start(State& state) {
  if (options_.interval() == ScheduleInterval::Step) apply(state.step);
}

void ValueScheduler::on_epoch_start(State& state) {
  if (options_.interval() == ScheduleInterval::Epoch) apply(state.epoch);
}

void ValueScheduler::on_step_end(State& state) {
  if (options_.record() && !state.update_skipped) state.record_metric(options_.value(), value_);
}

}  // namespace torchbus
