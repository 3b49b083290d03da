#include "interop/cuda_rng_layout.hpp"

#include <ATen/Functions.h>

namespace torchbus::detail {
namespace {

constexpr std::int64_t kPadding = 800;  // 1.13 and 2.0: 200 * sizeof(4120), kept "for BC"
constexpr std::int64_t kSeedAndOffset = 16;
constexpr std::int64_t kSeedOnly = 8;

bool unpadded(std::int64_t size) {
  return size == kSeedAndOffset || size == kSeedOnly;
}
bool padded(std::int64_t size) {
  return size == kPadding + kSeedAndOffset || size == kPadding + kSeedOnly;
}

}  // namespace

at::Tensor cuda_generator_state_in_layout(const at::Tensor& saved, std::int64_t live_size) {
  if (saved.dim() != 1 || saved.scalar_type() != at::kByte) return saved;
  const auto size = saved.numel();
  if (padded(live_size) && unpadded(size)) {
    // The padding is what 1.13 writes there (all bits set), though it reads none of it.
    return at::cat({at::full({kPadding}, 0xFF, saved.options()), saved});
  }
  if (unpadded(live_size) && padded(size)) return saved.slice(0, kPadding).clone();
  return saved;
}

}  // namespace torchbus::detail
