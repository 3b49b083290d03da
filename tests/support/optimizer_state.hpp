#pragma once

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace torchbus::testing {

/// The entry of `state` (an optimizer's state map) for the parameter of `impl`. Its key is the
/// parameter's TensorImpl: printed into a string in LibTorch 1.13, the pointer itself in 2.x.
template <typename StateMap>
auto find_optimizer_state(const StateMap& state, c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << static_cast<const void*>(impl);
    return state.find(key.str());
  } else {
    return state.find(impl);
  }
}

/// The state `optimizer` keeps for `parameter` (nullptr when it has none yet).
inline const torch::optim::OptimizerParamState* optimizer_state_of(
    const torch::optim::Optimizer& optimizer, const at::Tensor& parameter) {
  const auto found = find_optimizer_state(optimizer.state(), parameter.unsafeGetTensorImpl());
  return found == optimizer.state().end() ? nullptr : found->second.get();
}

}  // namespace torchbus::testing
