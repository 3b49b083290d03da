#pragma once

/// \file
/// AllPredictionsSame: warns (or stops) when every prediction of an evaluation is the same value.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/tensor_names.hpp>

#include <cstdint>
#include <string>

namespace torchbus {

/// What AllPredictionsSame reads and does, e.g. `AllPredictionsSameOptions().stop(true)`.
struct AllPredictionsSameOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "all_predictions_same";
  /// Tensor holding the model's output in each evaluation batch: by default State::batch_output(),
  /// else a tensor the eval step stores (find_step_tensor).
  TORCH_ARG(std::string, output) = std::string(tensor_names::kOutput);
  /// Predictions are output.argmax(1) when the output has a class dimension (dim >= 2 and
  /// size(1) > 1); otherwise the output values themselves. False: always the output values.
  TORCH_ARG(bool, argmax) = true;
  /// Stop the run (state.request_stop) instead of only logging a warning.
  TORCH_ARG(bool, stop) = false;
};

/// At EvalEnd, reports when every prediction of the evaluation equals one value (a model that
/// collapsed to a constant), as AIToolbox's AllPredictionsSameCallback. Compares every batch with
/// the first prediction on the device (no sync per batch) and reads one flag at EvalEnd (one sync
/// per evaluation). Role::Monitor.
class AllPredictionsSame : public Callback {
 public:
  /// An AllPredictionsSame named by its options.
  explicit AllPredictionsSame(AllPredictionsSameOptions options = {});

  /// The options it was built with.
  const AllPredictionsSameOptions& options() const noexcept { return options_; }
  /// Evaluations in which every prediction was the same (kept in checkpoints).
  std::int64_t detections() const noexcept { return detections_; }

  /// Forgets the previous evaluation's predictions.
  void on_eval_start(State& state) override;
  /// Compares the batch's predictions with the first one, without a sync.
  void on_eval_batch_end(State& state) override;
  /// Reads the flag (one sync); warns or stops.
  void on_eval_end(State& state) override;

  /// Writes the number of detections.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  AllPredictionsSameOptions options_;
  at::Tensor first_;     // the first prediction of the evaluation
  at::Tensor all_same_;  // bool: every prediction so far equals first_
  std::int64_t count_ = 0;
  std::int64_t detections_ = 0;
};

}  // namespace torchbus
