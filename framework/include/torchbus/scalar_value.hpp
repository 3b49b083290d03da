#pragma once

/// \file
/// Reading the number in a one-element tensor, without a host sync when it is already in memory.

#include <optional>

namespace at {
class Tensor;
}  // namespace at

namespace torchbus {

/// The value of a defined one-element real tensor in plain CPU memory, read straight from memory
/// (no dispatcher call, no sync: on the CPU the value is there once the op that made it returned);
/// nullopt for every other tensor (accelerators, sparse or quantized, conjugate or negative views).
std::optional<double> host_scalar(const at::Tensor& tensor);

/// The value of a one-element real tensor: `host_scalar` when it can, else `item()` (a host sync on
/// an accelerator). Throws c10::Error for a tensor that does not hold exactly one number.
double scalar_value(const at::Tensor& tensor);

}  // namespace torchbus
