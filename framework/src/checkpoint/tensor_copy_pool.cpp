#include "checkpoint/tensor_copy_pool.hpp"

#include <ATen/ops/clone.h>
#include <c10/core/GradMode.h>

namespace torchbus::detail {
namespace {

/// Whether `buffer` can take `tensor`'s values in place: same layout and nobody else holds it or
/// its storage (a snapshot whose write is still running does).
bool reusable_for(const at::Tensor& buffer, const at::Tensor& tensor) {
  return buffer.use_count() == 1 && buffer.storage().use_count() == 1 &&
         buffer.sizes() == tensor.sizes() && buffer.strides() == tensor.strides() &&
         buffer.dtype() == tensor.dtype() && buffer.device() == tensor.device() &&
         buffer.layout() == tensor.layout() && tensor.is_non_overlapping_and_dense();
}

}  // namespace

void TensorCopyPool::begin_capture() {
  previous_ = std::move(current_);
  current_.clear();
  current_.reserve(previous_.size());
}

at::Tensor TensorCopyPool::copy_of(const at::Tensor& tensor) {
  const c10::NoGradGuard no_grad;
  const auto position = current_.size();
  at::Tensor copy;
  if (position < previous_.size() && reusable_for(previous_[position], tensor)) {
    copy = std::move(previous_[position]);
    copy.copy_(tensor);
  } else {
    copy = tensor.detach().clone();
  }
  current_.push_back(copy);
  return copy;
}

void TensorCopyPool::end_capture() noexcept {
  previous_.clear();
}

void TensorCopyPool::clear() noexcept {
  previous_.clear();
  current_.clear();
}

}  // namespace torchbus::detail
