#pragma once

// Internal to torchbus::callbacks (not installed): reading a one-element tensor's value.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace torchbus::detail {

/// The value of a one-element real tensor as a double. A dense CPU tensor is read directly from
/// memory: its value is there as soon as the op that made it returned, so this is no host sync,
/// and it skips the dispatcher call of `item()` (~1 µs per call measured inside a training loop,
/// where the dispatcher's code and data are no longer in the cache). Other tensors (accelerators,
/// quantized, views with a conjugate or negative bit) go through `item()`, a host sync.
inline double scalar_value(const at::Tensor& tensor) {
  const auto type = tensor.scalar_type();
  if (tensor.device().is_cpu() && tensor.layout() == at::kStrided && !tensor.is_conj() &&
      !tensor.is_neg() &&
      (c10::isFloatingType(type) || c10::isIntegralType(type, /*includeBool=*/true))) {
    double value = 0.0;
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, type, "scalar_value",
                               [&] { value = static_cast<double>(*tensor.data_ptr<scalar_t>()); });
    return value;
  }
  return tensor.item<double>();
}

}  // namespace torchbus::detail
