#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/gradient_reducer.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/trainer.hpp>

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

Trainer& Trainer::set_process_group(std::shared_ptr<ProcessGroup> group) {
  ensure_idle();
  process_group_ = std::move(group);
  state_.process_group = process_group_.get();
  state_.rank = process_group_ ? process_group_->rank() : 0;
  state_.local_rank = process_group_ ? process_group_->local_rank() : 0;
  state_.world_size = process_group_ ? process_group_->world_size() : 1;
  if (distributed())
    logger()->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%l] %v", state_.rank));
  return *this;
}

bool Trainer::distributed() const noexcept {
  return process_group_ && process_group_->world_size() > 1;
}

void Trainer::start_process_group() {
  stop_agreed_ = state_.stop_requested();  // a resumed run that had finished: every rank alike
  updated_last_step_ = false;
  reducer_.reset();
  if (distributed()) {
    torch::NoGradGuard no_grad;
    auto tensors = module_->parameters();
    for (const auto& buffer : module_->buffers()) tensors.push_back(buffer);
    process_group_->broadcast(tensors);
    reducer_ = std::make_unique<GradientReducer>(*process_group_, parameters_,
                                                 process_group_->options().bucket_bytes(),
                                                 kStopFlags + state_.world_size);
    status_host_ = torch::zeros({reducer_->status().numel()}, torch::kDouble);
    status_loss_ = reducer_->status().narrow(0, kLossSum, 1);
  }
  fire(Event::ProcessGroupStart);
}

// One status vector rides with the last gradient bucket and is summed across ranks, so that the
// step's loss and every agreement cost no collective of their own.
void Trainer::synchronize_gradients() {
  auto* status = status_host_.data_ptr<double>();
  std::fill(status, status + status_host_.numel(), 0.0);
  status[kRanksWithBackward] = window_has_backward_ ? 1.0 : 0.0;
  status[kRanksSkipping] = state_.skip_update ? 1.0 : 0.0;
  status[kRanksUpdatedLastStep] = updated_last_step_ ? 1.0 : 0.0;
  status[kStopFlags + state_.rank] = !state_.stop_requested()                   ? kNoStop
                                     : state_.stop_kind() == StopKind::Finished ? kStopFinished
                                                                                : kStopInterrupted;
  reducer_->status().copy_(status_host_);
  if (window_has_backward_) status_loss_.copy_(window_loss_.detach());
  reducer_->reduce();
  status_host_.copy_(reducer_->status());

  const auto updated = status[kRanksUpdatedLastStep];
  TORCHBUS_CHECK(updated == 0.0 || updated == static_cast<double>(state_.world_size),
                 DistributedError, "rank ", state_.rank, ": ", updated, " of ", state_.world_size,
                 " ranks applied the previous step's update, the others skipped it: "
                 "state.skip_update was set at BeforeOptimizerStep on "
                 "some ranks only. Decide it there from what every rank shares (the averaged "
                 "gradients, the loss) or before the backward, where the ranks agree on it");
  const auto ranks_with_backward = status[kRanksWithBackward];
  window_has_backward_ = ranks_with_backward > 0.0;
  if (window_has_backward_) window_loss_ = status_loss_.reshape({}) / ranks_with_backward;
  if (status[kRanksSkipping] > 0.0) state_.skip_update = true;
  for (int rank = 0; rank < state_.world_size; ++rank) {
    const auto flag = status[kStopFlags + rank];
    if (flag != kNoStop) {
      adopt_stop_of(rank, flag == kStopFinished ? StopKind::Finished : StopKind::Interrupted);
      break;
    }
  }
}

void Trainer::agree_on_stop() {
  if (!distributed()) return;
  const auto stopping = process_group_->ranks_with(state_.stop_requested());
  if (stopping.empty()) return;
  // Rare (the run ends): a second round tells whether the first stopping rank's stop is final.
  const auto interrupted = process_group_->ranks_with(state_.stop_requested() &&
                                                      state_.stop_kind() == StopKind::Interrupted);
  const bool first_interrupted =
      std::find(interrupted.begin(), interrupted.end(), stopping.front()) != interrupted.end();
  adopt_stop_of(stopping.front(), first_interrupted ? StopKind::Interrupted : StopKind::Finished);
}

void Trainer::adopt_stop_of(int rank, StopKind kind) {
  stop_agreed_ = true;
  if (!state_.stop_requested()) {
    state_.request_stop(detail::concat("rank ", rank, " requested a stop"), kind);
  }
}

bool Trainer::stopping() const noexcept {
  return distributed() ? stop_agreed_ : state_.stop_requested();
}

}  // namespace torchbus
