#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/all_predictions_same.hpp>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>

#include <sstream>

namespace torchbus {

AllPredictionsSame::AllPredictionsSame(AllPredictionsSameOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  // Also watches the sanity validation (a Monitor's default is to sit it out): a model whose
  // predictions are constant from the start shows before training.
  set_role(Role::Monitor).run_during(RunStage::SanityCheck);
  TORCHBUS_CHECK(!options_.output().empty(), ConfigError,
                 "AllPredictionsSame: the output tensor name must not be empty");
}

void AllPredictionsSame::on_eval_start(State& /*state*/) {
  first_.reset();
  all_same_.reset();
  count_ = 0;
}

void AllPredictionsSame::on_eval_batch_end(State& state) {
  if (state.cancelled) return;
  const auto* output = find_step_tensor(state, options_.output());
  TORCHBUS_CHECK(
      output != nullptr, ConfigError, "AllPredictionsSame: needs tensor '", options_.output(),
      "' at EvalBatchEnd (evaluation batch ", state.eval_batch,
      "); present: ", detail::join_or_none(step_tensor_names(state)),
      ". A custom eval step sets the output with state.set_batch_output(...) (or stores a "
      "tensor and names it in the options)");
  if (output->numel() == 0) return;
  const bool classes = options_.argmax() && output->dim() >= 2 && output->size(1) > 1;
  const auto predictions = classes ? output->detach().argmax(1) : output->detach();
  const auto flat = predictions.reshape({-1});
  if (!first_.defined()) first_ = flat[0].clone();  // not a view: the batch's output can go
  const auto same = flat.eq(first_).all();
  all_same_ = all_same_.defined() ? all_same_.logical_and(same) : same;
  count_ += flat.numel();
}

void AllPredictionsSame::on_eval_end(State& state) {
  if (!all_same_.defined() || count_ < 2) return;
  if (!all_same_.item<bool>()) return;  // the one sync per evaluation
  ++detections_;
  std::ostringstream value;
  value << first_.item();
  auto message =
      detail::concat("AllPredictionsSame: all ", count_, " predictions of the evaluation at epoch ",
                     state.epoch, ", step ", state.step, " are ", value.str(),
                     "; the model may have collapsed to a constant output");
  if (options_.stop()) {
    logger()->error(message);
    state.request_stop(std::move(message));
  } else {
    logger()->warn(message);
  }
}

void AllPredictionsSame::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("detections", c10::IValue(detections_));
}

void AllPredictionsSame::load_state(torch::serialize::InputArchive& archive) {
  detections_ = read_integer(archive, "detections", 0);
}

}  // namespace torchbus
