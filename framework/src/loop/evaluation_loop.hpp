#pragma once

/// \file
/// EvaluationLoop (private to torchbus_framework): one pass over evaluation data.

#include <torchbus/metric_names.hpp>

#include "distributed/sync.hpp"
#include "loop/context.hpp"

#include <cstdint>
#include <string_view>

namespace torchbus {

/// Runs an evaluation: EvalStart, each batch between EvalBatchStart and EvalBatchEnd under
/// no_grad with the model in eval mode, the mean loss per sample over every rank recorded (as
/// "val_loss", or "test_loss" in a test), EvalEnd. Owns the count of the evaluation's batches
/// (State::eval_batch is its copy, written before each emission); holds nothing else between
/// evaluations.
class EvaluationLoop {
 public:
  EvaluationLoop(LoopContext context, DistributedSync& sync) : context_(context), sync_(sync) {}

  /// Evaluates at most `batch_limit` batches of `data` (-1: all), recording the mean loss per
  /// sample as `loss_metric`: that mean, or an undefined tensor when every batch was cancelled.
  at::Tensor run(BatchSource& data, std::int64_t batch_limit,
                 std::string_view loss_metric = metric_names::kValLoss);
  /// Writes the batch count into `state` (State::eval_batch).
  void publish(State& state) const noexcept;
  /// Whether the last evaluation started reached its EvalEnd (its metrics are recorded).
  bool ended() const noexcept { return ended_; }

 private:
  LoopContext context_;
  DistributedSync& sync_;
  std::int64_t batch_ = 0;  // the current evaluation batch (after EvalEnd: the batches it had)
  bool ended_ = false;      // the last evaluation reached its EvalEnd
};

}  // namespace torchbus
