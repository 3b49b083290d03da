#pragma once

/// \file
/// PredictionLoop (private to torchbus_framework): one pass of the predict step over data.

#include <torchbus/output.hpp>

#include "loop/context.hpp"

#include <cstdint>
#include <vector>

namespace torchbus {

/// Runs a prediction: PredictStart, each batch between PredictBatchStart and PredictBatchEnd under
/// inference mode with the model in eval mode, PredictEnd. At PredictBatchEnd the batch's main
/// output is State::batch_output() and its named outputs are in the tensor store. It runs alone
/// in its action, so it writes its batch count (State::predict_batch) itself.
class PredictionLoop {
 public:
  explicit PredictionLoop(LoopContext context) : context_(context) {}

  /// Predicts at most `batch_limit` batches of `data` (-1: all); appends each batch's output to
  /// `kept` when it is not null (a cancelled batch's is not).
  void run(BatchSource& data, std::int64_t batch_limit, std::vector<Output>* kept);

 private:
  LoopContext context_;
};

}  // namespace torchbus
