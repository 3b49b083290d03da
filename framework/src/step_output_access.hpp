#pragma once

/// \file
/// How the loop's parts set State's step output (private to torchbus_framework; subscribers read
/// it through State's accessors and set only the batch's output).

#include <torchbus/state.hpp>

namespace torchbus::detail {

/// Sets and clears the step's output held by State (docs/events.md, "The step's output").
struct StepOutputAccess {
  /// The batch's loss as its step returned it, and its target (before BeforeBackward or after the
  /// eval step).
  static void set_batch(State& state, const at::Tensor& loss, const at::Tensor& target) {
    state.batch_loss_ = loss;
    state.batch_target_ = target;
  }
  /// The batch's loss as back-propagated (scaled by the window).
  static void set_backward(State& state, const at::Tensor& loss) { state.backward_loss_ = loss; }
  /// The step's loss (before AfterOptimizerStep); undefined after StepEnd.
  static void set_step(State& state, const at::Tensor& loss) { state.step_loss_ = loss; }
  /// After BatchEnd and EvalBatchEnd.
  static void clear_batch(State& state) noexcept { state.clear_batch_output(); }
  /// At the start of an action.
  static void clear_all(State& state) noexcept { state.clear_step_output(); }
};

}  // namespace torchbus::detail
