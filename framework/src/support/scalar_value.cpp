#include <torchbus/scalar_value.hpp>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace torchbus {

std::optional<double> host_scalar(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() != 1 || !tensor.device().is_cpu() ||
      tensor.layout() != at::kStrided || tensor.is_conj() || tensor.is_neg()) {
    return std::nullopt;
  }
  const auto type = tensor.scalar_type();
  if (!c10::isFloatingType(type) && !c10::isIntegralType(type, /*includeBool=*/true)) {
    return std::nullopt;  // complex, quantized
  }
  double value = 0.0;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, type, "host_scalar",
                             [&] { value = static_cast<double>(*tensor.data_ptr<scalar_t>()); });
  return value;
}

double scalar_value(const at::Tensor& tensor) {
  if (const auto value = host_scalar(tensor)) return *value;
  return tensor.item<double>();
}

}  // namespace torchbus
