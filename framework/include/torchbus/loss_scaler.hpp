#pragma once

/// \file
/// LossScaler: dynamic loss scaling for float16 training, as PyTorch's GradScaler.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <vector>

namespace torchbus {

/// How a LossScaler moves its scale, e.g. `LossScalerOptions().init_scale(1024)`; the defaults
/// are GradScaler's.
struct LossScalerOptions {
  /// The scale of the first step.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// Factor applied after `growth_interval` steps in a row without inf or NaN gradients (> 1).
  TORCH_ARG(double, growth_factor) = 2.0;
  /// Factor applied when a step's gradients hold inf or NaN (in (0, 1)).
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Good steps in a row before the scale grows.
  TORCH_ARG(std::int64_t, growth_interval) = 2000;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Scales the loss before backward so that small float16 gradients do not underflow, unscales
/// the gradients before anyone reads them, skips steps whose gradients overflowed and adapts the
/// scale: lower after an overflow, higher after a run of good steps.
class LossScaler {
 public:
  /// A scaler at `options.init_scale()`.
  explicit LossScaler(LossScalerOptions options = {});

  /// `loss` times the current scale, the tensor to run backward on.
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides every defined gradient of `parameters` by the scale, in place; true when one of
  /// them holds inf or NaN (the step must then be skipped).
  bool unscale(const std::vector<at::Tensor>& parameters);
  /// Moves the scale after a step whose gradients had (`found_inf`) or had not overflowed.
  void update(bool found_inf);

  /// The current scale.
  double current_scale() const noexcept { return scale_; }
  /// Good steps in a row since the scale last changed.
  std::int64_t growth_tracker() const noexcept { return growth_tracker_; }
  /// Continues from a saved `current_scale()` and `growth_tracker()` (a resumed run).
  void restore(double scale, std::int64_t growth_tracker);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
};

}  // namespace torchbus
