#pragma once

/// \file
/// LoopContext (private to torchbus_framework): what every part of the loop works with, and the
/// helpers the training and evaluation batches share.

#include <torchbus/batch_source.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer_options.hpp>

#include "event_flow.hpp"

namespace torch::nn {
class Module;
}

namespace torchbus {

/// The trainer's overridable steps, as the loops call them (Trainer's virtual train_step,
/// eval_step and optimizer_step, or the step functions set on it).
class StepHooks {
 public:
  /// One training batch: its scalar loss.
  virtual at::Tensor train_step(Batch& batch) = 0;
  /// One evaluation batch (under no_grad): its scalar loss.
  virtual at::Tensor eval_step(Batch& batch) = 0;
  /// Applies the accumulated gradients.
  virtual void optimizer_step() = 0;

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

/// Moves `batch` to the state's device, in channels_last when the options ask for it.
void move_to_device(Batch& batch, const LoopContext& context);

/// Runs `step` on `batch` under the precision's autocast: the step's loss as a 0-dim tensor, or an
/// undefined tensor when the batch was cancelled (a control exception thrown by the step becomes
/// the state's request). `what` names the step in errors ("train step").
at::Tensor call_step(const LoopContext& context, at::Tensor (StepHooks::*step)(Batch&),
                     Batch& batch, const char* what);

}  // namespace torchbus
