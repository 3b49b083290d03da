#pragma once

/// \file
/// GradientReducer: averages a model's gradients across the ranks of a ProcessGroup the way
/// PyTorch DDP does, each bucket's all-reduce overlapping the rest of the backward pass.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace torchbus {

class ProcessGroup;

/// Persistent gradient buckets of one model: parameters in reverse order (the last layers, whose
/// gradients are final first, lead), at most `bucket_bytes` each and the first at most 1 MiB,
/// one dtype per bucket. The gradients live in the buckets, as PyTorch DDP's with
/// `gradient_as_bucket_view`: from `attach()` on, each parameter's gradient is a tensor sharing its
/// bucket's memory (with the parameter's strides), so autograd accumulates into the bucket and
/// nothing is copied in or out. Armed before the last backward of a step, a bucket's all-reduce
/// starts as soon as autograd has accumulated every gradient in it; `reduce()` starts the rest,
/// waits and turns the sums into means in place. A small status vector rides in the last bucket,
/// summed across ranks.
class GradientReducer {
 public:
  /// Buckets for `parameters` (those requiring a gradient; the same model on every rank) and a
  /// status of `status_size` values.
  GradientReducer(ProcessGroup& group, const std::vector<at::Tensor>& parameters,
                  std::int64_t bucket_bytes, std::int64_t status_size);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before the step's first backward: every gradient becomes its place in the bucket, zeros where
  /// it was undefined; a gradient that replaced its place (set by hand) is copied in.
  void attach();
  /// The next backward is the step's last: buckets start as their gradients become final.
  void arm();
  /// Starts the buckets not started yet (with the status in the last), waits for all, and
  /// replaces every gradient by its mean over the ranks, a missing one counting as zeros: a
  /// gradient no rank computed is undefined, one only others computed is defined afterwards.
  void reduce();
  /// Values summed across ranks by reduce(): write them before, read the sums after. On the
  /// parameters' device, in the last bucket's dtype.
  at::Tensor& status() noexcept { return status_; }
  /// Number of buckets, that is of all-reduces per step.
  std::size_t bucket_count() const noexcept { return buckets_.size(); }

 private:
  struct Slot {
    at::Tensor parameter;
    at::Tensor place;       // its gradient's memory in the bucket, sized and strided like it
    std::size_t bucket;     // index into buckets_
    bool ready = false;     // its gradient is final (this step's last backward)
    bool borrowed = false;  // the gradient is its place, lent to an undefined one: no gradient yet
  };
  struct Bucket {
    at::Tensor flat;
    at::Tensor gradients;            // the part of flat holding gradients
    std::vector<std::size_t> slots;  // indices into slots_
    std::size_t pending = 0;         // slots not ready yet
  };

  void on_gradient_ready(std::size_t slot);
  bool gather(Slot& slot);

  ProcessGroup& group_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;  // in all-reduce order
  std::size_t next_bucket_ = 0;  // the first bucket not started this step
  at::Tensor computed_;          // per slot: 1 when this rank computed its gradient
  at::Tensor status_;            // the caller's values, after computed_ in the last bucket
  at::Tensor computed_host_;     // computed_ on the host (float)
  at::Tensor mean_scale_;        // 1 / world size (0-dim)
  bool armed_ = false;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive for the hooks
  std::vector<std::uintptr_t> hooks_;                                 // one per accumulator
};

}  // namespace torchbus
