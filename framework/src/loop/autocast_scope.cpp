#include "loop/autocast_scope.hpp"

#include "interop/libtorch_compat.hpp"

#include <ATen/autocast_mode.h>

namespace torchbus::detail {

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) {
  if (precision == Precision::Float32) return;
  const auto dtype = precision == Precision::BF16Mixed ? at::kBFloat16 : at::kHalf;
  active_ = true;
  device_ = device == c10::DeviceType::CUDA ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  was_enabled_ = autocast_enabled(device_);
  previous_dtype_ = autocast_dtype(device_);
  set_autocast(device_, true, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_, was_enabled_, previous_dtype_);
}

}  // namespace torchbus::detail
