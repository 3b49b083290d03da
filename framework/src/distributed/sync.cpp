#include <torch/torch.h>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/gradient_reducer.hpp>
#include <torchbus/rng_state.hpp>
#include <torchbus/state.hpp>

#include "distributed/sync.hpp"
#include "state/writer.hpp"
#include "support/log_rank.hpp"

#include <algorithm>

namespace torchbus {
namespace {

/// The status riding with the last gradient bucket: sums over the ranks.
enum StatusSlot : std::int64_t {
  kLossSum,               // the step's loss (ranks that ran a backward)
  kRanksWithBackward,     // ranks that ran a backward in the window
  kRanksSkipping,         // ranks that set skip_update before the gradients left
  kRanksUpdatedLastStep,  // ranks that applied the previous step's update: 0 or all
  kStopFlags,             // then one per rank: a StopFlag
};

/// A rank's stop request in the status: none, or the StopKind it asked for.
enum StopFlag : int { kNoStop = 0, kStopFinished = 1, kStopInterrupted = 2 };

}  // namespace

DistributedSync::DistributedSync(State& state) : state_(state) {}

DistributedSync::~DistributedSync() = default;

void DistributedSync::set_group(std::shared_ptr<ProcessGroup> group) {
  group_ = std::move(group);
  detail::StateWriter::set_placement(state_, group_.get(), group_ ? group_->rank() : 0,
                                     group_ ? group_->local_rank() : 0,
                                     group_ ? group_->world_size() : 1);
  detail::set_log_rank(active() ? std::optional<int>(state_.rank) : std::nullopt);
}

bool DistributedSync::active() const noexcept {
  return group_ && group_->world_size() > 1;
}

void DistributedSync::start(torch::nn::Module& module,
                            const std::vector<std::vector<at::Tensor>>& parameters) {
  stop_agreed_ = state_.stop_requested();
  phases_.clear();
  if (!active()) return;
  torch::NoGradGuard no_grad;
  auto tensors = module.parameters();
  for (const auto& buffer : module.buffers()) tensors.push_back(buffer);
  group_->broadcast(tensors);
  phases_.resize(parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    auto& phase = phases_[i];
    phase.reducer = std::make_unique<GradientReducer>(
        *group_, parameters[i], group_->options().bucket_bytes(), kStopFlags + state_.world_size);
    phase.status_host = torch::zeros({phase.reducer->status().numel()}, torch::kDouble);
    phase.status_loss = phase.reducer->status().narrow(0, kLossSum, 1);
  }
}

void DistributedSync::before_backward(std::size_t phase, bool first_of_window,
                                      bool last_of_window) {
  if (phase >= phases_.size()) return;
  auto& reducer = *phases_[phase].reducer;
  if (first_of_window) reducer.attach();
  if (last_of_window) reducer.arm();
}

// One status vector rides with the last gradient bucket and is summed across ranks, so that the
// step's loss and every agreement cost no collective of their own.
void DistributedSync::synchronize(std::size_t phase, bool& has_backward, at::Tensor& window_loss) {
  if (!active()) return;
  auto& buckets = phases_[phase];
  auto* status = buckets.status_host.data_ptr<double>();
  std::fill(status, status + buckets.status_host.numel(), 0.0);
  status[kRanksWithBackward] = has_backward ? 1.0 : 0.0;
  status[kRanksSkipping] = state_.skip_update ? 1.0 : 0.0;
  status[kRanksUpdatedLastStep] = buckets.updated_last_step ? 1.0 : 0.0;
  status[kStopFlags + state_.rank] = !state_.stop_requested()                   ? kNoStop
                                     : state_.stop_kind() == StopKind::Finished ? kStopFinished
                                                                                : kStopInterrupted;
  buckets.reducer->status().copy_(buckets.status_host);
  if (has_backward) buckets.status_loss.copy_(window_loss.detach());
  buckets.reducer->reduce();
  buckets.status_host.copy_(buckets.reducer->status());

  const auto updated = status[kRanksUpdatedLastStep];
  TORCHBUS_CHECK(updated == 0.0 || updated == static_cast<double>(state_.world_size),
                 DistributedError, "rank ", state_.rank, ": ", updated, " of ", state_.world_size,
                 " ranks applied the previous step's update, the others skipped it: "
                 "state.skip_update was set at BeforeOptimizerStep on "
                 "some ranks only. Decide it there from what every rank shares (the averaged "
                 "gradients, the loss) or before the backward, where the ranks agree on it");
  const auto ranks_with_backward = status[kRanksWithBackward];
  has_backward = ranks_with_backward > 0.0;
  if (has_backward) window_loss = buckets.status_loss.reshape({}) / ranks_with_backward;
  if (status[kRanksSkipping] > 0.0) detail::StateWriter::set_skip_update(state_, true);
  for (int rank = 0; rank < state_.world_size; ++rank) {
    const auto flag = status[kStopFlags + rank];
    if (flag != kNoStop) {
      adopt_stop_of(rank, flag == kStopFinished);
      break;
    }
  }
}

void DistributedSync::agree_on_stop() {
  if (!active()) return;
  const auto stopping = group_->ranks_with(state_.stop_requested());
  if (stopping.empty()) return;
  // Rare (the run ends): a second round tells whether the first stopping rank's stop is final.
  const auto interrupted =
      group_->ranks_with(state_.stop_requested() && state_.stop_kind() == StopKind::Interrupted);
  const bool first_interrupted =
      std::find(interrupted.begin(), interrupted.end(), stopping.front()) != interrupted.end();
  adopt_stop_of(stopping.front(), !first_interrupted);
}

void DistributedSync::adopt_stop_of(int rank, bool finished) {
  stop_agreed_ = true;
  if (!state_.stop_requested()) {
    state_.request_stop(detail::concat("rank ", rank, " requested a stop"),
                        finished ? StopKind::Finished : StopKind::Interrupted);
  }
}

bool DistributedSync::stopping() const noexcept {
  return active() ? stop_agreed_ : state_.stop_requested();
}

void DistributedSync::share_cpu_generator() {
  if (!active()) return;
  std::vector<at::Tensor> generator{RngState::capture_cpu()};
  group_->broadcast(generator);
  RngState::restore_cpu(generator.front());
}

void DistributedSync::all_reduce(at::Tensor& tensor) {
  if (active()) group_->all_reduce(tensor);
}

}  // namespace torchbus
