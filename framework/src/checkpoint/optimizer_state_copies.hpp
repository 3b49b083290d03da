#pragma once

/// \file
/// OptimizerStateCopies (private to torchbus_framework): an optimizer's per-parameter state
/// swapped for copies while a checkpoint captures it.

#include <torch/optim/optimizer.h>

#include "checkpoint/tensor_copy_pool.hpp"

#include <vector>

namespace torchbus::detail {

/// While alive, the per-parameter state tensors of an optimizer (momentum buffers, moments, sums)
/// are copies of themselves; the originals are put back when it is destroyed. What
/// `optimizer.save` writes in between are the copies, which later steps do not change.
class OptimizerStateCopies {
 public:
  /// Swaps in copies taken from `copies`; `copied()` is false (and nothing is swapped) when a
  /// state type is not one of LibTorch's SGD, Adam, AdamW, Adagrad or RMSprop.
  OptimizerStateCopies(torch::optim::Optimizer& optimizer, TensorCopyPool& copies);
  OptimizerStateCopies(const OptimizerStateCopies&) = delete;
  OptimizerStateCopies& operator=(const OptimizerStateCopies&) = delete;
  /// Puts the originals back.
  ~OptimizerStateCopies();

  /// Whether the optimizer's state is now copies (false: its type is unknown).
  bool copied() const noexcept { return copied_; }

 private:
  std::vector<at::Tensor*> fields_;    ///< the swapped state tensors, in the optimizer
  std::vector<at::Tensor> originals_;  ///< what they held before
  bool copied_ = true;
};

}  // namespace torchbus::detail
