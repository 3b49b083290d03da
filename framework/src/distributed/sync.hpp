#pragma once

/// \file
/// DistributedSync (private to torchbus_framework): a trainer's data-parallel synchronisation.

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

class GradientReducer;
class ProcessGroup;
struct State;

/// The synchronisation of a data-parallel fit (docs/distributed.md): the process group, the
/// gradient buckets, the status that rides with the last bucket (the step's loss, skips, stop
/// requests) and the stop agreement. Inactive, every method but `set_group` is a no-op.
class DistributedSync {
 public:
  explicit DistributedSync(State& state);
  ~DistributedSync();
  DistributedSync(const DistributedSync&) = delete;
  DistributedSync& operator=(const DistributedSync&) = delete;

  /// Uses `group` (null: none); sets the state's ranks and the log's rank prefix.
  void set_group(std::shared_ptr<ProcessGroup> group);
  /// The process group, or null.
  ProcessGroup* group() const noexcept { return group_.get(); }
  /// Whether there is more than one rank.
  bool active() const noexcept;

  /// At the start of a fit: broadcasts rank 0's parameters and buffers and builds the buckets
  /// of each optimizer phase over its `parameters`. A run resumed after it had finished stops on
  /// every rank alike.
  void start(torch::nn::Module& module, const std::vector<std::vector<at::Tensor>>& parameters);
  /// Before a backward of `phase`'s window: the first accumulates into its buckets, the last
  /// starts their all-reduces as they become final.
  void before_backward(std::size_t phase, bool first_of_window, bool last_of_window);
  /// After `phase`'s batches of the window: averages its gradients, and makes `has_backward`
  /// (this rank ran a backward) and `window_loss` every rank's; a skip or stop asked for by any
  /// rank is adopted.
  void synchronize(std::size_t phase, bool& has_backward, at::Tensor& window_loss);
  /// Records whether this rank applied `phase`'s update (checked at its next step).
  void record_update(std::size_t phase, bool updated) noexcept {
    if (phase < phases_.size()) phases_[phase].updated_last_step = updated;
  }
  /// At boundaries where no gradients travel (after a validation, at EpochEnd): one collective
  /// that tells every rank of a stop requested by any.
  void agree_on_stop();
  /// Whether the run stops: every rank knows of a stop request (one process: one was made).
  bool stopping() const noexcept;
  /// Puts rank 0's CPU generator state into every rank's (the epoch's data order).
  void share_cpu_generator();
  /// Sums `tensor` over the ranks, in place.
  void all_reduce(at::Tensor& tensor);

 private:
  void adopt_stop_of(int rank, bool finished);

  /// One optimizer phase's gradient buckets (a trainer of one optimizer has one).
  struct PhaseBuckets {
    std::unique_ptr<GradientReducer> reducer;
    at::Tensor status_host;          // what rides with the last bucket, on the host
    at::Tensor status_loss;          // the loss sum's place in the reducer's status
    bool updated_last_step = false;  // this rank applied the phase's previous update
  };

  State& state_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<PhaseBuckets> phases_;  // a distributed fit's, per optimizer phase
  bool stop_agreed_ = false;          // every rank knows a stop was requested
};

}  // namespace torchbus
