#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torchbus/precision.hpp>

namespace torchbus::detail {

/// Autocast for the lifetime of the scope, as `torch.autocast(device, dtype)`: on for
/// BF16Mixed/FP16Mixed on `device`'s type, nothing for Float32. Thread-local, as autocast is;
/// the previous state comes back at the end, and the outermost scope clears the cast cache.
class AutocastScope {
 public:
  AutocastScope(Precision precision, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;  // CUDA, or CPU for every other device
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace torchbus::detail
