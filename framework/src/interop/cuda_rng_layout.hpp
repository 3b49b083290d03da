#pragma once

/// \file
/// The layouts of a CUDA generator's state across LibTorch versions (private to
/// torchbus_framework): up to 2.0, 800 bytes of padding, then the seed and the Philox offset
/// (8 bytes each); from 2.1 on, the seed and the offset alone. A state without its offset is 8
/// bytes shorter in both. Each version's CUDAGeneratorImpl::set_state takes only its own layout.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace torchbus::detail {

/// `saved` (a CUDA generator's state, bytes) in the layout of this LibTorch, whose generators'
/// states are `live_size` bytes: the padding dropped or added; `saved` itself when it is already
/// in that layout or in neither (set_state then names what is wrong).
at::Tensor cuda_generator_state_in_layout(const at::Tensor& saved, std::int64_t live_size);

}  // namespace torchbus::detail
