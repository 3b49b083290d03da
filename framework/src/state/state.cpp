#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

namespace torchbus {

std::string_view to_string(Action action) noexcept {
  switch (action) {
    case Action::Fit:
      return "fit";
    case Action::Evaluate:
      return "evaluate";
    case Action::Test:
      return "test";
    case Action::Predict:
      return "predict";
    case Action::None:
      break;
  }
  return "none";
}

void State::request_stop(std::string reason, StopKind kind) {
  if (stop_requested_) return;
  stop_requested_ = true;
  stop_reason_ = std::move(reason);
  stop_kind_ = kind;
}

void State::clear_stop() noexcept {
  stop_requested_ = false;
  stop_reason_.clear();
  stop_kind_ = StopKind::Finished;
  held_stop_reason_.reset();
}

void State::request_early_stop(std::string reason) {
  if (stop_requested_ && stop_kind_ == StopKind::Finished) return;
  if (!held_stop_reason_) held_stop_reason_ = std::move(reason);  // the first reason is kept
  release_held_stop();
}

void State::release_held_stop() {
  // Behind an interrupting stop (a signal) it stays held: the checkpoint taken there keeps it.
  if (!held_stop_reason_ || stop_requested_) return;
  const bool may_stop =
      action != Action::Fit || (epochs_completed_ >= min_epochs && step >= min_steps);
  if (!may_stop) return;
  request_stop(std::move(*held_stop_reason_));
  held_stop_reason_.reset();
}

void State::request_epoch_end(std::string reason) {
  if (epoch_end_requested_) return;
  epoch_end_requested_ = true;
  epoch_end_reason_ = std::move(reason);
}

void State::clear_epoch_end() noexcept {
  epoch_end_requested_ = false;
  epoch_end_reason_.clear();
}

void State::clear_batch_output() noexcept {
  batch_loss_.reset();
  backward_loss_.reset();
  batch_output_.reset();
  batch_target_.reset();
  batch_ = nullptr;
}

void State::clear_step_output() noexcept {
  clear_batch_output();
  step_loss_.reset();
}

Trainer& State::trainer() const {
  TORCHBUS_CHECK(trainer_ != nullptr, ConfigError,
                 "state.trainer() was called outside fit() and evaluate(); the trainer is known "
                 "only while it runs an action (from ActionStart to ActionEnd)");
  return *trainer_;
}

}  // namespace torchbus
