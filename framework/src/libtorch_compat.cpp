#include "libtorch_compat.hpp"

#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sstream>
#include <string>
#include <type_traits>

#define TORCHBUS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace torchbus::detail {

void zero_gradients(torch::optim::Optimizer& optimizer) {
#if TORCHBUS_TORCH_AT_LEAST(2, 0)
  optimizer.zero_grad(/*set_to_none=*/false);
#else
  optimizer.zero_grad();
#endif
}

namespace {

/// The entry of `state` (an optimizer's state map) for the parameter of `impl`: its key is the
/// TensorImpl printed into a string in 1.13, the pointer itself in 2.x.
template <typename StateMap>
auto find_state(StateMap& state, c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
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

void use_classic_store_loop([[maybe_unused]] c10d::TCPStoreOptions& options) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  options.useLibUV = false;
#endif
}

// 2.4 replaced the per-device functions (is_cpu_enabled, get_autocast_gpu_dtype, ...) by ones
// that take the device type, and deprecated the old ones.
bool autocast_enabled(c10::DeviceType device) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace torchbus::detail
