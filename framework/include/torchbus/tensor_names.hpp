#pragma once

/// \file
/// Names under which the trainer puts the step's values in `State::tensors`, for code that reads
/// them by name (a built-in resolves them to State's typed accessors: `State::batch_loss()`, ...).

#include <string_view>

namespace torchbus::tensor_names {

/// The model's output of the default step (`Scope::Batch`), as `State::batch_output()`.
inline constexpr std::string_view kOutput = "output";
/// The batch's target of the default step (`Scope::Batch`), as `State::batch_target()`.
inline constexpr std::string_view kTarget = "target";
/// The batch's loss, stored by the default step (`Scope::Batch`, as `State::batch_loss()`).
inline constexpr std::string_view kLoss = "loss";
/// The step's loss (`Scope::Step`, from AfterOptimizerStep to StepEnd of a step that made an
/// update, as `State::step_loss()`).
inline constexpr std::string_view kStepLoss = "step_loss";

}  // namespace torchbus::tensor_names
