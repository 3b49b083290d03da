#include <spdlog/spdlog.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/timer.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/state.hpp>

#include <chrono>

namespace torchbus {
namespace {

double steady_seconds() {
  using Seconds = std::chrono::duration<double>;
  return std::chrono::duration_cast<Seconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void TimerOptions::validate() const {
  TORCHBUS_CHECK(time_limit() >= 0.0, ConfigError,
                 "Timer: time_limit must be >= 0 seconds (0: no limit), got ", time_limit());
  TORCHBUS_CHECK(ema_decay() >= 0.0 && ema_decay() < 1.0, ConfigError,
                 "Timer: ema_decay must be in [0, 1), got ", ema_decay());
  TORCHBUS_CHECK(step_freq() >= 1, ConfigError, "Timer: step_freq must be >= 1, got ", step_freq());
}

Timer::Timer(TimerOptions options) : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Metrics);
  options_.validate();
}

double Timer::now() const {
  return options_.clock() ? options_.clock()() : steady_seconds();
}

double Timer::elapsed() const {
  return elapsed_before_ + (in_action_ ? now() - action_start_ : 0.0);
}

double Timer::samples_per_second() const noexcept {
  return step_time_ema_ > 0.0 && samples_ema_ > 0.0 ? samples_ema_ / step_time_ema_ : 0.0;
}

void Timer::on_action_start(State& /*state*/) {
  action_start_ = now();
  in_action_ = true;
}

void Timer::on_epoch_start(State& /*state*/) {
  epoch_start_ = now();
}

void Timer::on_step_start(State& /*state*/) {
  step_samples_ = 0;
  samples_known_ = false;
  step_start_ = now();
}

void Timer::on_batch_end(State& state) {
  if (state.cancelled || options_.samples_from().empty()) return;
  if (const auto* tensor = find_step_tensor(state, options_.samples_from())) {
    step_samples_ += tensor->dim() > 0 ? tensor->size(0) : 1;
    samples_known_ = true;
  } else if (!warned_samples_) {
    warned_samples_ = true;
    logger()->warn(
        "Timer: no tensor '{}' at BatchEnd; samples/s is not "
        "recorded (set TimerOptions::samples_from to a tensor your train step stores)",
        options_.samples_from());
  }
}

void Timer::on_step_end(State& state) {
  const double seconds = now() - step_start_;
  if (!state.update_skipped) {
    const double decay = steps_timed_ == 0 ? 0.0 : options_.ema_decay();
    step_time_ema_ = decay * step_time_ema_ + (1.0 - decay) * seconds;
    if (samples_known_) {
      samples_ema_ = decay * samples_ema_ + (1.0 - decay) * static_cast<double>(step_samples_);
    }
    ++steps_timed_;
    if (state.step % options_.step_freq() == 0) {
      const auto& prefix = options_.prefix();
      state.record_metric(prefix + std::string(metric_names::kStepTime), seconds);
      state.record_metric(prefix + "step_time_ema", step_time_ema_);
      if (samples_known_) state.record_metric(prefix + "samples_per_sec", samples_per_second());
    }
  }
  check_limit(state);
}

void Timer::on_epoch_end(State& state) {
  state.record_metric(options_.prefix() + "epoch_time", now() - epoch_start_);
  check_limit(state);
}

void Timer::on_action_end(State& /*state*/) {
  if (!in_action_) return;
  elapsed_before_ += now() - action_start_;
  in_action_ = false;
}

void Timer::check_limit(State& state) {
  const double limit = options_.time_limit();
  if (limit <= 0.0 || state.stop_requested()) return;
  const double seconds = elapsed();
  if (seconds < limit) return;
  auto reason = detail::concat("Timer: time limit of ", limit, " s reached after ", seconds,
                               " s, at epoch ", state.epoch, ", step ", state.step);
  logger()->info(reason);
  state.request_stop(std::move(reason));
}

void Timer::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("elapsed", c10::IValue(elapsed()));
  archive.write("step_time_ema", c10::IValue(step_time_ema_));
  archive.write("samples_ema", c10::IValue(samples_ema_));
  archive.write("steps_timed", c10::IValue(steps_timed_));
}

void Timer::load_state(torch::serialize::InputArchive& archive) {
  const auto elapsed = read_non_negative(archive, "elapsed");
  const auto step_time_ema = read_non_negative(archive, "step_time_ema");
  const auto samples_ema = read_non_negative(archive, "samples_ema");
  steps_timed_ = read_integer(archive, "steps_timed", 0);
  elapsed_before_ = elapsed;
  if (in_action_) action_start_ = now();
  step_time_ema_ = step_time_ema;
  samples_ema_ = samples_ema;
}

}  // namespace torchbus
