#pragma once

/// \file
/// What LibTorch's optimizers keep per parameter (private to torchbus_framework): the state
/// tensors and the step count of SGD, Adam, AdamW, Adagrad and RMSprop, for the code that copies
/// them into checkpoints and the code that checks a checkpoint's.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torchbus::detail {

/// One parameter's state in a known optimizer.
struct ParamStateView {
  std::vector<at::Tensor*> tensors;  ///< momentum buffers, moments, sums (some undefined)
  std::optional<std::int64_t> step;  ///< the steps it counted (none: SGD counts none)
};

/// The state of a known optimizer's parameter; none for an unknown type (e.g. LBFGS, a user's).
std::optional<ParamStateView> view_of(torch::optim::OptimizerParamState& state);

/// Why `optimizer`'s per-parameter state cannot be what it would keep (a state tensor of another
/// shape or dtype than its parameter, a step count out of 0..kMaxCheckpointCount), or "" when it
/// can; states of unknown types are not checked.
std::string param_state_mismatch(torch::optim::Optimizer& optimizer);

}  // namespace torchbus::detail
