#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/trainer.hpp>

namespace torchbus {

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
  if (distributed()) {
    torch::NoGradGuard no_grad;
    auto tensors = module_->parameters();
    for (const auto& buffer : module_->buffers()) tensors.push_back(buffer);
    process_group_->broadcast(tensors);
  }
  fire(Event::ProcessGroupStart);
}

void Trainer::synchronize_gradients() {
  // [sum of this step's loss, 1 if this rank ran a backward], summed across ranks in the last
  // gradient bucket's collective.
  auto piggyback = torch::zeros({2});
  if (window_has_backward_) {
    piggyback.narrow(0, 0, 1).copy_(window_loss_.detach().reshape({1}));
    piggyback[1] = 1.0;
  }
  process_group_->average_gradients(parameters_, piggyback);
  const auto ranks_with_backward = piggyback[1].item<double>();
  window_has_backward_ = ranks_with_backward > 0.0;
  if (window_has_backward_) window_loss_ = piggyback[0] / ranks_with_backward;
}

void Trainer::agree_on_skip_update() {
  const auto skipping = process_group_->ranks_with(state_.skip_update);
  state_.skip_update = !skipping.empty();
}

void Trainer::agree_on_stop() {
  if (!distributed()) return;
  const auto stopping = process_group_->ranks_with(state_.stop_requested());
  if (!stopping.empty() && !state_.stop_requested()) {
    state_.request_stop(detail::concat("rank ", stopping.front(), " requested a stop"));
  }
}

}  // namespace torchbus
