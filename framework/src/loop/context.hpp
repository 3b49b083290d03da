#pragma once

/// \file
/// LoopContext (private to torchbus_framework): what every part of the loop works with, and the
/// helpers the training and evaluation batches share.

#include <torchbus/batch_source.hpp>
#include <torchbus/output.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer_options.hpp>

#include <c10/util/FunctionRef.h>

#include "loop/event_flow.hpp"

#include <cstddef>

namespace torch::nn {
class Module;
}

namespace torchbus {

/// The trainer's overridable steps, handed to the loops, which call them with all they need to
/// know (Trainer's virtual train_step, eval_step and optimizer_step, or the step functions set on
/// it): nothing the steps run asks the loops anything back.
class StepHooks {
 public:
  /// One training batch of optimizer phase `phase` (the trainer's order): its scalar loss.
  virtual at::Tensor train_step(std::size_t phase, Batch& batch) = 0;
  /// One evaluation batch (under no_grad): its scalar loss.
  virtual at::Tensor eval_step(Batch& batch) = 0;
  /// One predict batch (under inference mode): its predictions.
  virtual Output predict_step(Batch& batch) = 0;
  /// Applies the gradients optimizer phase `phase` accumulated.
  virtual void optimizer_step(std::size_t phase) = 0;

 protected:
  ~StepHooks() = default;
};

/// What the loop's parts share: the state, the event flow, the trainer's steps, the options of
/// the current action (fast_dev_run's overrides applied) and the model.
struct LoopContext {
  State& state;
  EventFlow& events;
  StepHooks& hooks;
  const TrainerOptions& options;
  torch::nn::Module& module;
};

/// Declared right after a loop's local Batch: when the batch goes out of scope (an error
/// included), State::batch() is made null first, so that the End events still owed, published
/// after the loop has unwound, never see a destroyed batch.
class CurrentBatchScope {
 public:
  explicit CurrentBatchScope(State& state) noexcept : state_(state) {}
  ~CurrentBatchScope() { detail::StateWriter::forget_current_batch(state_); }
  CurrentBatchScope(const CurrentBatchScope&) = delete;
  CurrentBatchScope& operator=(const CurrentBatchScope&) = delete;

 private:
  State& state_;
};

/// Moves `batch` to the state's device, in channels_last when the options ask for it.
void move_to_device(Batch& batch, const LoopContext& context);

/// Runs `step` on `batch` under the precision's autocast: the step's loss as a 0-dim tensor, or an
/// undefined tensor when the batch was cancelled (a control exception thrown by the step becomes
/// the state's request). `what` names the step in errors ("train step").
at::Tensor call_step(const LoopContext& context, c10::function_ref<at::Tensor(Batch&)> step,
                     Batch& batch, const char* what);

}  // namespace torchbus
