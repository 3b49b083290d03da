#include "support/model_weights.hpp"

#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/early_stopping.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <cmath>
#include <utility>

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
  TORCHBUS_CHECK(start_from_epoch() >= 0, ConfigError,
                 "EarlyStopping: start_from_epoch must be >= 0 (0: every check counts), got ",
                 start_from_epoch());
  TORCHBUS_CHECK(!baseline() || std::isfinite(*baseline()), ConfigError,
                 "EarlyStopping: baseline must be a finite number, got ", baseline().value_or(0));
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

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : Callback(options.name()),
      options_(std::move(options)),
      monitor_(options_.monitor(), options_.mode(), options_.min_delta()) {
  set_role(Role::Monitor).after(Role::Metrics);
  options_.validate();
}

void EarlyStopping::on_added(Trainer& trainer) {
  if (!options_.restore_best_weights()) return;
  restore_at_end_ = trainer.on(
      Event::ActionEnd, [this](State& state) { restore_best_weights(state); },
      detail::after_final_save(name(), "restore_best_weights"));
}

void EarlyStopping::on_eval_end(State& state) {
  if (options_.check_on() == Event::EvalEnd) check(state);
}

void EarlyStopping::on_epoch_end(State& state) {
  if (options_.check_on() == Event::EpochEnd) check(state);
}

void EarlyStopping::check(State& state) {
  // The end of an epoch cut short runs again when a resume continues the epoch: it is checked then.
  if (state.epoch_cut_short) return;
  const auto& monitor = options_.monitor();
  const MetricPoint* point =
      monitor_.poll(state, options_.check_on(), "EarlyStopping: monitored metric", name());
  if (point == nullptr) return;

  const double value = point->value;
  const bool min = options_.mode() == Mode::Min;
  const bool warming_up = state.epoch < options_.start_from_epoch();
  std::string reason;
  bool plateau = false;  // a stop min_epochs and min_steps may hold
  if (options_.check_finite() && !std::isfinite(value)) {
    reason =
        detail::concat("EarlyStopping: ", monitor, " = ", value,
                       " is not finite; stopping at epoch ", state.epoch, ", step ", state.step);
  } else if (const auto& divergence = options_.divergence_threshold();
             divergence && (min ? value > *divergence : value < *divergence)) {
    reason = detail::concat("EarlyStopping: ", monitor, " = ", value, " is ",
                            min ? "above" : "below", " the divergence threshold ", *divergence,
                            " at epoch ", state.epoch, ", step ", state.step);
  } else if (warming_up) {
    return;
  } else if (const auto& threshold = options_.stopping_threshold();
             threshold && (min ? value < *threshold : value > *threshold)) {
    plateau = true;
    // Strictly beyond, as Lightning (callbacks/early_stopping.py: monitor_op is torch.lt / gt).
    reason = detail::concat("EarlyStopping: ", monitor, " = ", value, " is ",
                            min ? "below" : "above", " the stopping threshold ", *threshold,
                            " at epoch ", state.epoch, ", step ", state.step);
  } else if (monitor_.update(value, options_.baseline())) {
    best_step_ = point->step;
    best_epoch_ = point->epoch;
    if (options_.restore_best_weights()) keep_best_weights(state);
    logger()->debug("EarlyStopping: {} improved to {}", monitor, value);
  } else if (monitor_.wait() >= options_.patience()) {
    plateau = true;
    reason = detail::concat("EarlyStopping: ", monitor, " did not improve (mode ",
                            mode_name(options_.mode()), ", min_delta ", options_.min_delta(),
                            ") for ", monitor_.wait(), " checks, patience ", options_.patience(),
                            "; best ", monitor_.best(), " at epoch ", best_epoch_, ", step ",
                            best_step_, "; stopping at epoch ", state.epoch, ", step ", state.step);
  }
  if (reason.empty()) return;
  if (plateau && state.held_stop_reason()) {
    // A stop is held already: its reason and epoch stand; this check would stop too.
    logger()->debug(reason);
    state.request_early_stop(std::move(reason));
    return;
  }
  stopped_epoch_ = state.epoch;
  logger()->info(reason);
  if (!plateau) {
    state.request_stop(std::move(reason));
    return;
  }
  state.request_early_stop(std::move(reason));
  if (state.held_stop_reason()) {
    logger()->info(
        "EarlyStopping: the stop waits for min_epochs {} and min_steps {} ({} epochs ended, {} "
        "steps made)",
        state.min_epochs, state.min_steps, state.epochs_completed(), state.step);
  }
}

void EarlyStopping::keep_best_weights(const State& state) {
  TORCHBUS_CHECK(state.model != nullptr, ConfigError, "EarlyStopping '", name(),
                 "': restore_best_weights needs state.model");
  const auto weights = detail::model_weights(*state.model, /*with_buffers=*/true);
  if (best_weights_.size() != weights.size()) {
    best_weights_.clear();
    for (const auto& tensor : weights) best_weights_.push_back(at::empty_like(tensor));
  }
  detail::copy_weights(weights, best_weights_);
}

void EarlyStopping::restore_best_weights(const State& state) {
  // Only at the end of fit(), not of evaluate(); after an exception the weights stay.
  if (state.action != Action::Fit || state.error || state.model == nullptr || best_weights_.empty())
    return;
  const auto weights = detail::model_weights(*state.model, /*with_buffers=*/true);
  const auto mismatch = detail::weights_mismatch(best_weights_, weights, "the best weights");
  TORCHBUS_CHECK(mismatch.empty(), CheckpointError, "EarlyStopping '", name(), "': ", mismatch);
  detail::copy_weights(best_weights_, weights);
  logger()->info("EarlyStopping: restored the weights of the best {} ({}) from epoch {}, step {}",
                 options_.monitor(), monitor_.best(), best_epoch_, best_step_);
}

void EarlyStopping::save_state(torch::serialize::OutputArchive& archive) const {
  monitor_.save_state(archive);
  archive.write("best_step", c10::IValue(best_step_));
  archive.write("best_epoch", c10::IValue(best_epoch_));
  archive.write("stopped_epoch", c10::IValue(stopped_epoch_));
  if (options_.restore_best_weights()) {
    archive.write("best_weights", c10::IValue(detail::copies_of(best_weights_)));
  }
}

void EarlyStopping::load_state(torch::serialize::InputArchive& archive) {
  monitor_.load_state(archive);
  best_step_ = read_integer(archive, "best_step", -1);
  best_epoch_ = read_integer(archive, "best_epoch", -1);
  stopped_epoch_ = read_integer(archive, "stopped_epoch", -1);
  if (options_.restore_best_weights()) {
    const auto list = read_value(archive, "best_weights").toTensorList();
    best_weights_.assign(list.begin(), list.end());
  }
}

}  // namespace torchbus
