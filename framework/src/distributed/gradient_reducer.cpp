#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/gradient_reducer.hpp>

#include <algorithm>

namespace torchbus {
namespace {

/// The first bucket is kept small, as DDP's, so that its all-reduce starts early in the backward.
constexpr std::int64_t kFirstBucketBytes = std::int64_t{1} << 20;

/// The `parameter.numel()` elements of `flat` from `offset` on, as a tensor with the parameter's
/// sizes and strides (contiguous ones when its own overlap or leave gaps). Made with set_, not as
/// a view: autograd does not track it, so Optimizer::zero_grad's detach_() works on it.
at::Tensor place_in(const at::Tensor& flat, std::int64_t offset, const at::Tensor& parameter) {
  std::vector<std::int64_t> strides(parameter.strides().begin(), parameter.strides().end());
  if (!parameter.is_non_overlapping_and_dense()) {
    std::int64_t stride = 1;
    for (auto d = parameter.dim(); d-- > 0;) {
      strides[static_cast<std::size_t>(d)] = stride;
      stride *= parameter.size(d);
    }
  }
  return at::empty({0}, flat.options())
      .set_(flat.storage(), flat.storage_offset() + offset, parameter.sizes(), strides);
}

}  // namespace

GradientReducer::GradientReducer(ProcessGroup& group, const std::vector<at::Tensor>& parameters,
                                 std::int64_t bucket_bytes, std::int64_t status_size)
    : group_(group) {
  TORCHBUS_CHECK(bucket_bytes > 0 && status_size >= 0, ConfigError,
                 "GradientReducer needs a positive bucket size and a status size >= 0, got ",
                 bucket_bytes, " and ", status_size);
  // Slots in reverse parameter order, grouped into buckets of one dtype and device.
  std::vector<std::int64_t> bucket_numel;
  std::int64_t bytes = 0;
  for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
    if (!it->requires_grad()) continue;
    const auto cap =
        buckets_.size() == 1 ? std::min(kFirstBucketBytes, bucket_bytes) : bucket_bytes;
    const auto* leader =
        buckets_.empty() ? nullptr : &slots_[buckets_.back().slots.front()].parameter;
    const bool fits = leader && leader->scalar_type() == it->scalar_type() &&
                      leader->device() == it->device() &&
                      bytes + static_cast<std::int64_t>(it->nbytes()) <= cap;
    if (!fits) {
      buckets_.emplace_back();
      bucket_numel.push_back(0);
      bytes = 0;
    }
    buckets_.back().slots.push_back(slots_.size());
    slots_.push_back({*it, {}, buckets_.size() - 1});
    bytes += static_cast<std::int64_t>(it->nbytes());
    bucket_numel.back() += it->numel();
  }
  if (buckets_.empty()) {
    buckets_.emplace_back();
    bucket_numel.push_back(0);
  }
  const auto slot_count = static_cast<std::int64_t>(slots_.size());
  bucket_numel.back() += slot_count + status_size;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    const auto options = bucket.slots.empty() ? at::TensorOptions(at::kFloat)
                                              : slots_[bucket.slots.front()].parameter.options();
    bucket.flat = at::zeros({bucket_numel[b]}, options.requires_grad(false));
    std::int64_t offset = 0;
    for (const auto index : bucket.slots) {
      auto& slot = slots_[index];
      slot.place = place_in(bucket.flat, offset, slot.parameter);
      offset += slot.parameter.numel();
    }
    bucket.gradients = bucket.flat.narrow(0, 0, offset);
    bucket.pending = bucket.slots.size();
    if (b + 1 == buckets_.size()) {
      computed_ = bucket.flat.narrow(0, offset, slot_count);
      status_ = bucket.flat.narrow(0, offset + slot_count, status_size);
    }
  }
  computed_host_ = at::zeros({slot_count}, at::kFloat);
  mean_scale_ = at::scalar_tensor(1.0 / static_cast<double>(group.world_size()), at::kDouble);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(slots_[i].parameter);
    TORCHBUS_CHECK(accumulator != nullptr, ConfigError, "parameter ", i,
                   " of the model is not a leaf tensor; data-parallel training needs leaves");
    hooks_.push_back(
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, i](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list& /*inputs*/) {
              on_gradient_ready(i);
              return outputs;
            })));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() {
  for (std::size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hooks_[i]);
}

void GradientReducer::attach() {
  for (auto& slot : slots_) {
    auto& gradient = slot.parameter.mutable_grad();
    if (gradient.is_same(slot.place)) continue;
    slot.borrowed = !gradient.defined();
    if (slot.borrowed) {
      slot.place.zero_();
    } else {
      slot.place.copy_(gradient);
    }
    gradient = slot.place;
  }
}

void GradientReducer::arm() {
  armed_ = true;
}

// Autograd accumulated a gradient (in place, into the bucket, unless it was replaced).
void GradientReducer::on_gradient_ready(std::size_t index) {
  auto& slot = slots_[index];
  slot.borrowed = false;
  if (!armed_) return;
  auto& bucket = buckets_[slot.bucket];
  if (slot.ready) {
    // A reentrant backward (activation checkpointing) accumulated this gradient again.
    TORCHBUS_CHECK(slot.bucket >= next_bucket_, DistributedError,
                   "a gradient was accumulated again after its bucket's all-reduce had started "
                   "(reentrant backward in the step's last batch); data-parallel training needs "
                   "each gradient accumulated once per backward");
    gather(slot);
    return;
  }
  computed_host_.data_ptr<float>()[index] = gather(slot) ? 1.0F : 0.0F;
  slot.ready = true;
  --bucket.pending;
  // The last bucket waits for reduce(): it carries the status, final only after the backward.
  while (next_bucket_ + 1 < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    group_.start_all_reduce(buckets_[next_bucket_].flat);
    ++next_bucket_;
  }
}

// The slot's gradient into its place (where something replaced it: copied, and the place
// restored); whether this rank has a gradient for it.
bool GradientReducer::gather(Slot& slot) {
  auto& gradient = slot.parameter.mutable_grad();
  if (gradient.is_same(slot.place)) return !slot.borrowed;
  if (!gradient.defined()) {
    slot.place.zero_();
    return false;
  }
  slot.place.copy_(gradient);
  gradient = slot.place;
  return true;
}

void GradientReducer::reduce() {
  armed_ = false;
  struct Reset {
    GradientReducer& reducer;
    ~Reset() {
      for (auto& slot : reducer.slots_) slot.ready = slot.borrowed = false;
      for (auto& bucket : reducer.buckets_) bucket.pending = bucket.slots.size();
      reducer.next_bucket_ = 0;
    }
  } reset{*this};
  auto* computed = computed_host_.data_ptr<float>();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].ready) computed[i] = gather(slots_[i]) ? 1.0F : 0.0F;
  }
  computed_.copy_(computed_host_);
  for (; next_bucket_ < buckets_.size(); ++next_bucket_) {
    group_.start_all_reduce(buckets_[next_bucket_].flat);
  }
  group_.wait_pending();
  computed_host_.copy_(computed_);
  for (auto& bucket : buckets_) bucket.gradients.mul_(mean_scale_);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    auto& gradient = slots_[i].parameter.mutable_grad();
    if (computed[i] == 0.0F) {
      // No rank computed it: left undefined, as on one process, not turned into zeros that
      // momentum and weight decay would act on.
      gradient.reset();
    } else if (!gradient.defined()) {
      gradient = slots_[i].place;  // only other ranks computed it
    }
  }
}

}  // namespace torchbus
