#pragma once

/// \file
/// optimizer_state_of: the state a LibTorch optimizer keeps for one parameter, found the same way
/// under every LibTorch version (1.13 keys it by the parameter's TensorImpl printed into a string,
/// 2.x by the pointer itself).

#include <torch/optim/optimizer.h>

namespace torchbus {

/// The state `optimizer` keeps for `parameter` (nullptr when it has none yet).
torch::optim::OptimizerParamState* optimizer_state_of(torch::optim::Optimizer& optimizer,
                                                      const at::Tensor& parameter);
/// The state `optimizer` keeps for `parameter` (nullptr when it has none yet).
const torch::optim::OptimizerParamState* optimizer_state_of(
    const torch::optim::Optimizer& optimizer, const at::Tensor& parameter);

}  // namespace torchbus
