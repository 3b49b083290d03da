#include "support/model_weights.hpp"

#include <torch/nn/module.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/ema.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <utility>

namespace torchbus {

void EMAOptions::validate() const {
  TORCHBUS_CHECK(decay() >= 0.0 && decay() < 1.0, ConfigError, "EMA: decay must be in [0, 1), got ",
                 decay());
  TORCHBUS_CHECK(every_n_steps() >= 1, ConfigError, "EMA: every_n_steps must be >= 1, got ",
                 every_n_steps());
}

EMA::EMA(EMAOptions options) : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::WeightAveraging).before(Role::Metrics);
  options_.validate();
}

void EMA::on_added(Trainer& trainer) {
  if (!options_.apply_at_end()) return;
  apply_at_end_ = trainer.on(
      Event::ActionEnd, [this](State& state) { apply_at_end(state); },
      detail::after_final_save(name(), "apply_at_end"));
}

std::string EMA::owner() const {
  return detail::concat("EMA '", name(), "'");
}

void EMA::on_action_start(State& state) {
  if (!options_.phase().empty()) detail::averaged_weights(state, options_.phase(), false, owner());
}

void EMA::start_tracking(const State& state) {
  tracked_ = detail::averaged_weights(state, options_.phase(), options_.average_buffers(), owner());
  averaged_.clear();
  for (const auto& tensor : tracked_) averaged_.push_back(tensor.is_floating_point());
  if (!average_.empty()) {  // loaded from a checkpoint
    const auto mismatch = detail::weights_mismatch(average_, tracked_, "the checkpoint's averages");
    TORCHBUS_CHECK(mismatch.empty(), CheckpointError, owner(), ": ", mismatch);
    for (std::size_t i = 0; i < average_.size(); ++i) {
      average_[i] = average_[i].to(tracked_[i].options());
    }
    return;
  }
  at::NoGradGuard no_grad;
  for (const auto& tensor : tracked_) average_.push_back(tensor.detach().clone());
}

void EMA::on_step_start(State& state) {
  if (tracked_.empty()) start_tracking(state);
}

void EMA::on_step_end(State& state) {
  if (state.error || state.update_skipped || tracked_.empty() ||
      state.step % options_.every_n_steps() != 0) {
    return;
  }
  at::NoGradGuard no_grad;
  const double weight = 1.0 - options_.decay();
  for (std::size_t i = 0; i < tracked_.size(); ++i) {
    if (averaged_[i]) {
      average_[i].lerp_(tracked_[i].detach(), weight);
    } else {
      average_[i].copy_(tracked_[i].detach());
    }
  }
  ++updates_;
}

void EMA::on_eval_start(State& state) {
  if (!options_.evaluate_with_average() || average_.empty()) return;
  if (tracked_.empty()) start_tracking(state);  // resumed, evaluating before the first step
  if (raw_.size() != tracked_.size()) {
    raw_.clear();
    for (const auto& tensor : tracked_) raw_.push_back(at::empty_like(tensor));
  }
  detail::copy_weights(tracked_, raw_);
  detail::copy_weights(average_, tracked_);
  swapped_ = true;
}

void EMA::on_eval_end(State&) {
  restore_raw_weights();
}

void EMA::on_exception(State&) {
  restore_raw_weights();
}

void EMA::restore_raw_weights() {
  if (!swapped_) return;
  detail::copy_weights(raw_, tracked_);
  swapped_ = false;
}

void EMA::apply_at_end(const State& state) {
  // Only at the end of fit(), not of evaluate(); an exception leaves the raw weights.
  if (state.action != Action::Fit || state.error || average_.empty()) return;
  copy_average_to(
      detail::averaged_weights(state, options_.phase(), options_.average_buffers(), owner()),
      "apply_at_end");
}

void EMA::copy_to(torch::nn::Module& model) const {
  copy_average_to(detail::model_weights(model, options_.average_buffers()), "copy_to");
}

void EMA::copy_average_to(const std::vector<at::Tensor>& weights, const char* what) const {
  const auto mismatch = detail::weights_mismatch(average_, weights, "the averages");
  TORCHBUS_CHECK(mismatch.empty(), ConfigError, owner(), ": ", what, ": ", mismatch);
  detail::copy_weights(average_, weights);
}

void EMA::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("updates", c10::IValue(updates_));
  archive.write("average", c10::IValue(detail::copies_of(average_)));
}

void EMA::load_state(torch::serialize::InputArchive& archive) {
  updates_ = read_integer(archive, "updates", 0);
  const auto list = read_value(archive, "average").toTensorList();
  average_.assign(list.begin(), list.end());
  tracked_.clear();  // matched against the model at the next step
}

}  // namespace torchbus
