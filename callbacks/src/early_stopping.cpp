#include <spdlog/spdlog.h>
#include <torch/serialize/archive.h>
#include <torchbus/archive_value.hpp>
#include <torchbus/callbacks/early_stopping.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>

#include <cmath>

namespace torchbus {
namespace {

const char* mode_name(Mode mode) {
  return mode == Mode::Min ? "min" : "max";
}

}  // namespace

void EarlyStoppingOptions::validate() const {
  TORCHBUS_CHECK(!monitor().empty(), ConfigError,
                 "EarlyStopping: monitor is empty; expected the name of a metric such as "
                 "\"val_loss\"");
  TORCHBUS_CHECK(patience() >= 0, ConfigError, "EarlyStopping: patience must be >= 0, got ",
                 patience());
  TORCHBUS_CHECK(min_delta() >= 0.0, ConfigError, "EarlyStopping: min_delta must be >= 0, got ",
                 min_delta());
  TORCHBUS_CHECK(check_on() == Event::EvalEnd || check_on() == Event::EpochEnd, ConfigError,
                 "EarlyStopping: check_on must be EvalEnd or EpochEnd, got ",
                 to_string(check_on()));
  if (stopping_threshold() && divergence_threshold()) {
    const double stop = *stopping_threshold();
    const double diverge = *divergence_threshold();
    TORCHBUS_CHECK(mode() == Mode::Min ? stop < diverge : stop > diverge, ConfigError,
                   "EarlyStopping: with mode ", mode_name(mode()), " stopping_threshold (", stop,
                   ") must be ", mode() == Mode::Min ? "below" : "above", " divergence_threshold (",
                   diverge, ")");
  }
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options, std::string name)
    : Callback(std::move(name), kDefaultPriority),
      options_(std::move(options)),
      monitor_(options_.monitor(), options_.mode(), options_.min_delta()) {
  options_.validate();
}

void EarlyStopping::on_eval_end(State& state) {
  if (options_.check_on() == Event::EvalEnd) check(state);
}

void EarlyStopping::on_epoch_end(State& state) {
  if (options_.check_on() == Event::EpochEnd) check(state);
}

void EarlyStopping::check(State& state) {
  const auto& monitor = options_.monitor();
  const MetricPoint* point = monitor_.poll(
      state, options_.check_on(), "EarlyStopping: monitored metric", "EarlyStopping", priority());
  if (point == nullptr) return;

  const double value = point->value;
  const bool min = options_.mode() == Mode::Min;
  std::string reason;
  if (options_.check_finite() && !std::isfinite(value)) {
    reason =
        detail::concat("EarlyStopping: ", monitor, " = ", value,
                       " is not finite; stopping at epoch ", state.epoch, ", step ", state.step);
  } else if (const auto& threshold = options_.stopping_threshold();
             threshold && (min ? value <= *threshold : value >= *threshold)) {
    reason = detail::concat("EarlyStopping: ", monitor, " = ", value,
                            " reached the stopping "
                            "threshold ",
                            *threshold, " at epoch ", state.epoch, ", step ", state.step);
  } else if (const auto& divergence = options_.divergence_threshold();
             divergence && (min ? value > *divergence : value < *divergence)) {
    reason = detail::concat("EarlyStopping: ", monitor, " = ", value, " is ",
                            min ? "above" : "below", " the divergence threshold ", *divergence,
                            " at epoch ", state.epoch, ", step ", state.step);
  } else if (monitor_.update(value)) {
    best_step_ = point->step;
    best_epoch_ = point->epoch;
    logger()->debug("EarlyStopping: {} improved to {}", monitor, value);
  } else if (monitor_.wait() >= options_.patience()) {
    reason = detail::concat("EarlyStopping: ", monitor, " did not improve (mode ",
                            mode_name(options_.mode()), ", min_delta ", options_.min_delta(),
                            ") for ", monitor_.wait(), " checks, patience ", options_.patience(),
                            "; best ", monitor_.best(), " at epoch ", best_epoch_, ", step ",
                            best_step_, "; stopping at epoch ", state.epoch, ", step ", state.step);
  }
  if (!reason.empty()) {
    stopped_epoch_ = state.epoch;
    logger()->info(reason);
    state.request_stop(std::move(reason));
  }
}

void EarlyStopping::save_state(torch::serialize::OutputArchive& archive) const {
  monitor_.save_state(archive);
  archive.write("best_step", c10::IValue(best_step_));
  archive.write("best_epoch", c10::IValue(best_epoch_));
  archive.write("stopped_epoch", c10::IValue(stopped_epoch_));
}

void EarlyStopping::load_state(torch::serialize::InputArchive& archive) {
  monitor_.load_state(archive);
  best_step_ = read_value(archive, "best_step").toInt();
  best_epoch_ = read_value(archive, "best_epoch").toInt();
  stopped_epoch_ = read_value(archive, "stopped_epoch").toInt();
}

}  // namespace torchbus
