#pragma once

/// \file
/// TensorCopyPool (private to torchbus_framework): the copies a checkpoint capture takes, written
/// into the previous capture's buffers once nothing else holds them.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace torchbus::detail {

/// Copies for one capture after another: a capture copies the same tensors in the same order as
/// the one before, so the n-th copy reuses the previous capture's n-th buffer when it has the
/// same shape, strides, dtype and device and no snapshot still holds it (its write is done).
/// Reused buffers spare the page faults of fresh memory; the pool keeps one capture's copies.
class TensorCopyPool {
 public:
  /// Starts a capture: the buffers of the last one become the ones to reuse.
  void begin_capture();
  /// A copy of `tensor`'s values (detached, same strides): a reused buffer or a new clone.
  at::Tensor copy_of(const at::Tensor& tensor);
  /// Ends the capture: the last one's buffers that were not reused are released.
  void end_capture() noexcept;
  /// Releases every buffer (between runs).
  void clear() noexcept;

 private:
  std::vector<at::Tensor> previous_;  ///< the last capture's buffers, by position
  std::vector<at::Tensor> current_;   ///< this capture's
};

}  // namespace torchbus::detail
