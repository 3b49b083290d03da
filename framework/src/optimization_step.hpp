#pragma once

/// \file
/// OptimizationStep (private to torchbus_framework): one optimizer step over a window of batches.

#include <torch/serialize/output-archive.h>
#include <torchbus/loss_scaler.hpp>

#include "checkpoint_reader.hpp"
#include "distributed_sync.hpp"
#include "loop_context.hpp"

#include <optional>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace torchbus {

/// The optimization step of a fit: the accumulation window's batches (forward, scaled backward),
/// the gradients' synchronisation, loss scaling, clipping, the optimizer step and clearing the
/// gradients. The fit loop calls `begin`, opens StepStart, calls `run_batch` per batch and
/// `finish`. It owns the loss scaler (FP16Mixed), which checkpoints keep.
class OptimizationStep {
 public:
  OptimizationStep(LoopContext context, torch::optim::Optimizer& optimizer, DistributedSync& sync)
      : context_(context), optimizer_(optimizer), sync_(sync) {}

  /// At the start of a fit, the model on its device: caches the parameters, sets up the loss
  /// scaler of the precision and clears the gradients.
  void prepare();
  /// The parameters being trained (cached by `prepare`).
  const std::vector<at::Tensor>& parameters() const noexcept { return parameters_; }
  /// The loss scaler of an FP16Mixed fit, null otherwise.
  const LossScaler* loss_scaler() const noexcept { return loss_scaler_ ? &*loss_scaler_ : nullptr; }

  /// Starts a window of `batches` batches (before StepStart: its subscribers see the window).
  void begin(std::size_t batches);
  /// Runs one batch of the window: BatchStart, the train step, BeforeBackward, the backward of
  /// its loss scaled by the window, AfterBackward, BatchEnd.
  void run_batch(Batch& batch);
  /// The window ends after `batches` batches (an epoch end cut it): its gradients and loss are
  /// rescaled to those of a window of that many batches.
  void shorten(std::size_t batches);
  /// Ends the window: synchronises the gradients, unscales them, and unless the step is skipped
  /// publishes BeforeOptimizerStep, clips, steps the optimizer and publishes AfterOptimizerStep;
  /// then clears the gradients. Returns whether the weights were updated.
  bool finish();
  /// The step's loss: the mean over its window's batches (every rank's, distributed).
  const at::Tensor& window_loss() const noexcept { return window_loss_; }
  /// Whether a window runs (from `begin` to the end of `finish`): no checkpoint may be taken. A
  /// window an error cut short stays open (its End events see it so) until `reset`.
  bool in_window() const noexcept { return in_window_; }
  /// Forgets a window an error cut short (at the start of an action).
  void reset() noexcept { in_window_ = false; }
  /// Clears the gradients (to zero, or to none when the options ask).
  void clear_gradients();

  /// Writes the loss scaler's state, when there is one.
  void save(torch::serialize::OutputArchive& archive) const;
  /// The loss scaler a checkpoint holds, validated, applied by `restore` (nothing changes yet).
  std::optional<LossScaler> read(detail::CheckpointReader& reader) const;
  /// Continues with `scaler` (what `read` returned).
  void restore(std::optional<LossScaler> scaler) { loss_scaler_ = std::move(scaler); }

 private:
  void backward(const at::Tensor& loss);
  void clip_gradients();

  LoopContext context_;
  torch::optim::Optimizer& optimizer_;
  DistributedSync& sync_;
  std::vector<at::Tensor> parameters_;
  std::optional<LossScaler> loss_scaler_;
  at::Tensor window_loss_;  // mean loss of the window's batches
  bool window_has_backward_ = false;
  at::Tensor backward_seed_;  // ones shaped like the loss, the gradient backward starts from
  std::int64_t backward_seed_version_ = 0;  // its version counter when it was made
  bool in_window_ = false;
};

}  // namespace torchbus
