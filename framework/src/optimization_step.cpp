#include <torch/torch.h>

#include "optimization_step.hpp"
#include "step_output_access.hpp"

namespace torchbus {

void OptimizationStep::prepare() {
  parameters_ = context_.module.parameters();
  loss_scaler_.reset();
  if (context_.options.precision() == Precision::FP16Mixed) {
    loss_scaler_.emplace(context_.options.loss_scaler());
  }
  clear_gradients();
}

void OptimizationStep::begin(std::size_t batches) {
  auto& state = context_.state;
  state.window_size = static_cast<std::int64_t>(batches);
  state.window_position = 0;
  state.skip_update = false;
  window_has_backward_ = false;
  window_loss_.reset();
  in_window_ = true;
}

void OptimizationStep::run_batch(Batch& batch) {
  auto& state = context_.state;
  auto& events = context_.events;
  state.cancelled = false;
  move_to_device(batch, context_);
  events.open(Event::BatchStart, Event::BatchEnd);
  if (!state.cancelled) {
    const auto loss = call_step(context_, &StepHooks::train_step, batch, "train step");
    if (!state.cancelled) {
      detail::StepOutputAccess::set_batch(state, loss, batch.target);
      events.fire(Event::BeforeBackward);
    }
    if (!state.cancelled) {
      const auto window = state.window_size;
      const auto scaled = window == 1 ? loss : loss / static_cast<double>(window);
      detail::StepOutputAccess::set_backward(state, scaled);
      sync_.before_backward(!window_has_backward_, state.window_position + 1 == window);
      backward(loss_scaler_ ? loss_scaler_->scale(scaled) : scaled);
      // A window of one batch reports its loss as is; longer windows sum their scaled losses.
      window_loss_ = window == 1              ? loss
                     : window_loss_.defined() ? window_loss_ + scaled.detach()
                                              : scaled.detach();
      window_has_backward_ = true;
      events.fire(Event::AfterBackward);
    }
  }
  events.close();  // BatchEnd
  state.tensors.clear(Scope::Batch);
  detail::StepOutputAccess::clear_batch(state);
}

// The batches run were scaled by 1 / window_size: rescaled to 1 / batches, the step's gradients
// and loss are those of a window of that many batches (docs/events.md).
void OptimizationStep::shorten(std::size_t batches) {
  auto& state = context_.state;
  const double factor = static_cast<double>(state.window_size) / static_cast<double>(batches);
  state.window_size = static_cast<std::int64_t>(batches);
  if (!window_has_backward_) return;
  torch::NoGradGuard no_grad;
  for (auto& parameter : parameters_) {
    if (parameter.grad().defined()) parameter.mutable_grad().mul_(factor);
  }
  window_loss_ = window_loss_ * factor;
}

bool OptimizationStep::finish() {
  auto& state = context_.state;
  sync_.synchronize(window_has_backward_, window_loss_);
  // Unscaled after the all-reduce: every rank finds the same overflow and skips alike.
  const bool scaled = loss_scaler_ && window_has_backward_;
  const bool overflow = scaled && loss_scaler_->unscale(parameters_);
  if (overflow) state.skip_update = true;
  if (window_has_backward_ && !state.skip_update) context_.events.fire(Event::BeforeOptimizerStep);
  const bool update = window_has_backward_ && !state.skip_update;
  sync_.record_update(update);
  if (update) {
    clip_gradients();
    context_.hooks.optimizer_step();
    detail::StepOutputAccess::set_step(state, window_loss_);
    context_.events.fire(Event::AfterOptimizerStep);
  }
  if (scaled) loss_scaler_->update(overflow);
  if (window_has_backward_) clear_gradients();
  in_window_ = false;
  return update;
}

// LibTorch's `Tensor::backward()` allocates and fills a tensor of ones for every call; the step
// keeps one while the loss keeps its shape, dtype and device and nothing else holds its memory.
// Should a backward function write to it in place, its version counter moved; should a gradient
// keep a view of it (a leaf reached through view functions only, e.g. `loss + p.squeeze()`, takes
// the gradient it receives), its storage has another owner, which may write to it later through
// `.data()` (gradient clipping does). Either way the next backward gets a fresh one.
void OptimizationStep::backward(const at::Tensor& loss) {
  if (!backward_seed_.defined() || backward_seed_._version() != backward_seed_version_ ||
      !backward_seed_.is_same_size(loss) || backward_seed_.scalar_type() != loss.scalar_type() ||
      backward_seed_.device() != loss.device()) {
    backward_seed_ = at::ones_like(loss, at::MemoryFormat::Contiguous);
    backward_seed_version_ = backward_seed_._version();
  }
  torch::autograd::backward({loss}, {backward_seed_});
  if (backward_seed_.storage().use_count() != 1) backward_seed_.reset();
}

void OptimizationStep::clear_gradients() {
  if (!context_.options.set_grads_to_none()) {
    optimizer_.zero_grad();
    return;
  }
  for (auto& group : optimizer_.param_groups()) {
    for (auto& parameter : group.params()) parameter.mutable_grad().reset();
  }
}

void OptimizationStep::clip_gradients() {
  const auto& options = context_.options;
  if (options.gradient_clip_norm() > 0.0) {
    torch::nn::utils::clip_grad_norm_(parameters_, options.gradient_clip_norm());
  } else if (options.gradient_clip_value() > 0.0) {
    torch::nn::utils::clip_grad_value_(parameters_, options.gradient_clip_value());
  }
}

void OptimizationStep::save(torch::serialize::OutputArchive& archive) const {
  if (!loss_scaler_) return;
  archive.write("loss_scaler", torch::tensor({loss_scaler_->current_scale(),
                                              static_cast<double>(loss_scaler_->growth_tracker())},
                                             torch::kDouble));
}

// The loss scale of a float16 run (absent otherwise; a run in another precision ignores it).
std::optional<LossScaler> OptimizationStep::read(detail::CheckpointReader& reader) const {
  auto scaler = loss_scaler_;
  const auto saved = reader.optional_tensor("loss_scaler");
  if (!scaler || !saved.defined()) return scaler;
  if (saved.numel() != 2) reader.fail("has a malformed 'loss_scaler' entry");
  const auto values = saved.to(torch::kDouble);
  try {
    scaler->restore(values[0].item<double>(), values[1].item<std::int64_t>());
  } catch (const CheckpointError& error) {
    reader.fail("has an unusable loss scale: ", error.what());
  }
  return scaler;
}

}  // namespace torchbus
