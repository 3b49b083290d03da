#pragma once

/// \file
/// EvaluationLoop (private to torchbus_framework): one pass over evaluation data.

#include "distributed_sync.hpp"
#include "loop_context.hpp"

#include <cstdint>

namespace torchbus {

/// Runs an evaluation: EvalStart, each batch between EvalBatchStart and EvalBatchEnd under
/// no_grad with the model in eval mode, the mean loss per sample over every rank recorded as
/// "val_loss", EvalEnd. Holds no state between evaluations.
class EvaluationLoop {
 public:
  EvaluationLoop(LoopContext context, DistributedSync& sync) : context_(context), sync_(sync) {}

  /// Evaluates at most `batch_limit` batches of `data` (-1: all): the mean loss per sample, or an
  /// undefined tensor when every batch was cancelled.
  at::Tensor run(BatchSource& data, std::int64_t batch_limit);

 private:
  LoopContext context_;
  DistributedSync& sync_;
};

}  // namespace torchbus
