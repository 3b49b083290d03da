#pragma once

/// \file
/// ProcessGroup: data-parallel training across processes on c10d (Gloo on CPU), plus the
/// all_reduce/gather helpers callbacks use. See docs/distributed.md.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/launch_environment.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace torchbus {

struct State;

/// How a ProcessGroup connects and reduces, e.g. `DistributedOptions().timeout(10s)`.
struct DistributedOptions {
  /// Limit for the rendezvous and for every collective; past it a DistributedError names the
  /// ranks that did not arrive. A peer that exits or crashes is reported at once, not waited out.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  /// Largest gradient bucket in bytes: gradients are averaged with one all-reduce per bucket, the
  /// first (the model's last layers, whose gradients are ready first) at most 1 MiB, as DDP's.
  TORCH_ARG(std::int64_t, bucket_bytes) = std::int64_t{25} << 20;
  /// How often a rank waiting at the rendezvous (for the store to come up, or for the other
  /// ranks to arrive) logs what it waits for and since when.
  TORCH_ARG(std::chrono::milliseconds, wait_report_interval) = std::chrono::seconds(5);

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// A reduction across ranks.
enum class ReduceOp : std::uint8_t { Sum, Min, Max };

/// The processes of one data-parallel run. A world of one needs no network and makes every
/// collective a no-op, so the same program runs on one process or many. A collective that fails
/// (a peer exited or crashed, or the timeout expired) throws DistributedError naming the ranks,
/// and every later collective of the group throws at once.
class ProcessGroup {
 public:
  /// Joins the run described by the launcher's environment (a world of one without launcher).
  static std::shared_ptr<ProcessGroup> from_environment(DistributedOptions options = {});
  /// Joins the run described by `environment`: rendezvous through a c10d TCPStore (hosted by rank
  /// 0, or by torchrun's agent), then a Gloo process group. Throws DistributedError on timeout.
  static std::shared_ptr<ProcessGroup> connect(const LaunchEnvironment& environment,
                                               DistributedOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// Global rank of this process.
  int rank() const noexcept { return environment_.rank; }
  /// Rank on this machine.
  int local_rank() const noexcept { return environment_.local_rank; }
  /// Number of processes.
  int world_size() const noexcept { return environment_.world_size; }
  /// Where the run's rank and rendezvous came from.
  const LaunchEnvironment& environment() const noexcept { return environment_; }
  /// The options it was created with.
  const DistributedOptions& options() const noexcept { return options_; }

  /// Copies `tensors` of rank `root` into the same tensors on every other rank (in place).
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  /// Reduces `tensor` across ranks in place.
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  /// Every rank's `tensor` (same shape on all ranks) concatenated along dim 0 in rank order; a
  /// scalar becomes one element per rank. Usable under inference mode (predict()).
  at::Tensor all_gather(const at::Tensor& tensor);
  /// The ranks whose `flag` is true, agreed by all ranks (one all-reduce).
  std::vector<int> ranks_with(bool flag);

  /// Starts summing `tensor` (contiguous) across ranks in place and returns at once; `tensor`
  /// must stay untouched until wait_pending(). Every rank starts its collectives in one order.
  void start_all_reduce(at::Tensor& tensor);
  /// Waits for the collectives start_all_reduce started, in order; throws as all_reduce.
  void wait_pending();
  /// Collectives this group has run so far (each broadcast tensor, all-reduce and all-gather).
  std::int64_t collectives() const noexcept { return collectives_; }

  /// Tells the other ranks why this one is failing, so that their errors can name it.
  void report_failure(std::string_view message) noexcept;

 private:
  struct Backend;
  ProcessGroup(LaunchEnvironment environment, DistributedOptions options);
  template <typename Operation>
  void run(const char* what, Operation&& operation);

  LaunchEnvironment environment_;
  DistributedOptions options_;
  std::unique_ptr<Backend> backend_;  // null in a world of one
  std::int64_t collectives_ = 0;
  std::string failure_;  // the first failed collective's error; later ones are not attempted
};

/// The mean of `tensor` over the ranks of `state`'s process group (itself without one).
at::Tensor all_reduce_mean(const State& state, const at::Tensor& tensor);
/// Every rank's `tensor` concatenated along dim 0 (itself, a scalar as one element, without a
/// process group), as pytorch-accelerated's `trainer.gather`.
at::Tensor gather(const State& state, const at::Tensor& tensor);

}  // namespace torchbus
