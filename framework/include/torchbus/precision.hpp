#pragma once

/// \file
/// Precision: the arithmetic of the forward pass and the loss (docs/trainer.md, "Precision").

#include <c10/core/Device.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace torchbus {

/// How the trainer computes the forward pass and the loss. Parameters, gradients and optimizer
/// state stay float32 under every precision.
enum class Precision : std::uint8_t {
  /// Everything in float32 (the default).
  Float32,
  /// Autocast to bfloat16 around the train step, the eval step and the loss (CPU with AVX-512, or
  /// CUDA), as Lightning's `precision="bf16-mixed"`.
  BF16Mixed,
  /// Autocast to float16 with dynamic loss scaling (a LossScaler), CUDA only, as Lightning's
  /// `precision="16-mixed"`.
  FP16Mixed,
};

/// Lightning's name of `precision`: "32", "bf16-mixed" or "16-mixed".
std::string_view to_string(Precision precision) noexcept;
/// Writes `to_string(precision)`.
std::ostream& operator<<(std::ostream& out, Precision precision);
/// The precision named "32", "bf16-mixed" or "16-mixed"; ConfigError naming the choices otherwise.
Precision parse_precision(std::string_view name);
/// Throws ConfigError, before training, when `precision` cannot run on `device` (float16 on a
/// CPU, bfloat16 on a CPU without AVX-512 or on a GPU without bfloat16).
void check_precision_supported(Precision precision, const c10::Device& device);

}  // namespace torchbus
