#include <torchbus/optimizer_state.hpp>

#include <sstream>
#include <string>
#include <type_traits>

namespace torchbus {
namespace {

/// The entry of `state` (an optimizer's state map) for the parameter of `impl`: its key is the
/// TensorImpl printed into a string in 1.13, the pointer itself in 2.x.
template <typename StateMap>
auto find_state(StateMap& state, c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<typename std::remove_const_t<StateMap>::key_type, std::string>) {
    std::ostringstream key;
    key << static_cast<const void*>(impl);
    return state.find(key.str());
  } else {
    return state.find(impl);
  }
}

}  // namespace

torch::optim::OptimizerParamState* optimizer_state_of(torch::optim::Optimizer& optimizer,
                                                      const at::Tensor& parameter) {
  auto& state = optimizer.state();
  const auto found = find_state(state, parameter.unsafeGetTensorImpl());
  return found == state.end() ? nullptr : found->second.get();
}

const torch::optim::OptimizerParamState* optimizer_state_of(
    const torch::optim::Optimizer& optimizer, const at::Tensor& parameter) {
  const auto& state = optimizer.state();
  const auto found = find_state(state, parameter.unsafeGetTensorImpl());
  return found == state.end() ? nullptr : found->second.get();
}

}  // namespace torchbus
