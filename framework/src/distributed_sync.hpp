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
  /// over `parameters`. A run resumed after it had finished stops on every rank alike.
  void start(torch::nn::Module& module, const std::vector<at::Tensor>& parameters);
  /// Before a backward of the window: the first accumulates into the buckets, the last starts
  /// their all-reduces as they become final.
  void before_backward(bool first_of_window, bool last_of_window);
  /// After the window's batches: averages the gradients, and makes `has_backward` (this rank ran
  /// a backward) and `window_loss` every rank's; a skip or stop asked for by any rank is adopted.
  void synchronize(bool& has_backward, at::Tensor& window_loss);
  /// Records whether this rank applied the step's update (checked at the next step).
  void record_update(bool updated) noexcept { updated_last_step_ = updated; }
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

  State& state_;
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<GradientReducer> reducer_;  // a distributed fit's gradient buckets
  at::Tensor status_host_;                    // what rides with the last bucket, on the host
  at::Tensor status_loss_;                    // the loss sum's place in the reducer's status
  bool stop_agreed_ = false;                  // every rank knows a stop was requested
  bool updated_last_step_ = false;            // this rank applied the previous step's update
};

}  // namespace torchbus
