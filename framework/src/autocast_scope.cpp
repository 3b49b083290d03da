#include "autocast_scope.hpp"

#include <ATen/autocast_mode.h>

namespace torchbus::detail {

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) {
  if (precision == Precision::Float32) return;
  const auto dtype = precision == Precision::BF16Mixed ? at::kBFloat16 : at::kHalf;
  active_ = true;
  cuda_ = device == c10::DeviceType::CUDA;
  if (cuda_) {
    was_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
}

}  // namespace torchbus::detail
