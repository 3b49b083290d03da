#include <torch/torch.h>
#include <torchbus/metric_names.hpp>
#include <torchbus/tensor_names.hpp>

#include "checkpoint/fit_position.hpp"
#include "interop/libtorch_compat.hpp"
#include "loop/optimization_step.hpp"
#include "state/writer.hpp"

namespace torchbus {

OptimizationStep::OptimizationStep(LoopContext context, const std::vector<OptimizerPhase>& phases,
                                   DistributedSync& sync)
    : context_(context),
      phase_list_(phases),
      sync_(sync),
      phases_(phases.size()),
      parameters_(phases.size()) {
  for (std::size_t i = 0; i < phases.size(); ++i) {
    // A named phase's loss has metrics of its own: train_loss/<phase name>; the unnamed phase of a
    // trainer of one optimizer records train_loss.
    const auto& name = phases[i].name();
    loss_metrics_.push_back(
        name.empty() ? LossMetricNames{std::string(metric_names::kTrainLoss),
                                       std::string(metric_names::kTrainLossEpoch)}
                     : LossMetricNames{detail::concat(metric_names::kTrainLoss, '/', name),
                                       detail::concat(metric_names::kTrainLossEpoch, '/', name)});
    phases_[i].step_name =
        name.empty() ? "train step" : detail::concat("train step of optimizer phase '", name, "'");
  }
}

void OptimizationStep::prepare() {
  const auto& options = context_.options;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    const auto& phase = phase_list_[i];
    auto& run = phases_[i];
    run.loss_scaler.reset();
    if (options.precision() == Precision::FP16Mixed) run.loss_scaler.emplace(options.loss_scaler());
    run.clip_norm = phase.gradient_clip_norm().value_or(options.gradient_clip_norm());
    run.clip_value = phase.gradient_clip_value().value_or(options.gradient_clip_value());
    run.steps = 0;
    // A phase trains its optimizer's parameters that need a gradient: they are clipped,
    // unscaled and synchronised.
    auto& parameters = parameters_[i];
    parameters.clear();
    for (const auto& group : phase.optimizer()->param_groups()) {
      for (const auto& parameter : group.params()) {
        if (parameter.requires_grad()) parameters.push_back(parameter);
      }
    }
    TORCHBUS_CHECK(!parameters.empty(), ConfigError,
                   phase.name().empty() ? std::string("the optimizer")
                                        : detail::concat("optimizer phase '", phase.name(), "'"),
                   " has no parameter that requires a gradient; expected its optimizer to hold "
                   "the parameters it trains");
  }
  learning_rate_step_ = -1;
  learning_rate_unreadable_ = false;
  clear_gradients();
  enter_phase(0);
}

void OptimizationStep::reset() noexcept {
  in_window_ = false;
  enter_phase(0);
}

void OptimizationStep::enter_phase(std::size_t index) noexcept {
  current_phase_ = index;
  context_.events.publish_progress();  // the phase's step function runs next
}

void OptimizationStep::publish(State& state) const noexcept {
  const auto& phase = phase_list_[current_phase_];
  detail::StateWriter::publish_step(state, window_size_, current_phase_, phase.name(),
                                    phase.optimizer(), phases_[current_phase_].steps);
  detail::StateWriter::publish_step_learning_rate(state, learning_rate_step_, learning_rate_);
}

// Read after the BeforeOptimizerStep subscribers and clipping, right before the optimizer step:
// the rate the update uses, also when a subscriber changed it. Options of an optimizer outside
// LibTorch may have no learning rate (get_lr throws): then it is not read again in this fit.
void OptimizationStep::capture_learning_rate() {
  const auto& groups = phase_list_.front().optimizer()->param_groups();
  if (learning_rate_unreadable_ || groups.empty()) return;
  try {
    learning_rate_ = groups.front().options().get_lr();
    learning_rate_step_ = context_.state.step + 1;  // the step this window completes
  } catch (const std::exception&) {
    learning_rate_unreadable_ = true;
  }
}

std::int64_t OptimizationStep::due_batches(std::size_t index, std::int64_t first,
                                           std::int64_t count) const {
  const auto every = phase_list_[index].every_n_batches();
  if (every == 1) return count;
  std::int64_t due = 0;
  for (auto batch = first; batch < first + count; ++batch) due += (batch + 1) % every == 0;
  return due;
}

void OptimizationStep::begin(std::size_t batches, std::int64_t first_batch) {
  auto& state = context_.state;
  window_size_ = static_cast<std::int64_t>(batches);
  detail::StateWriter::set_skip_update(state, false);
  window_first_batch_ = first_batch;
  window_batches_run_ = 0;
  learning_rate_step_ = -1;  // until the first phase updates in this window
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    auto& run = phases_[i];
    run.window_loss.reset();
    run.has_backward = false;
    run.due = due_batches(i, window_first_batch_, window_size_);
    run.seen = 0;
    run.stepped = false;
    run.updated = false;
  }
  in_window_ = true;
}

void OptimizationStep::run_batch(Batch& batch) {
  auto& state = context_.state;
  auto& events = context_.events;
  detail::StateWriter::set_cancelled(state, false);
  move_to_device(batch, context_);
  detail::StateWriter::set_current_batch(state, batch);
  events.open(Event::BatchStart, Event::BatchEnd);
  const auto batch_index = window_first_batch_ + window_batches_run_++;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    auto& run = phases_[i];
    if (due_batches(i, batch_index, 1) == 0) continue;
    ++run.seen;
    if (!state.cancelled) forward_backward(i, batch);
    if (run.seen == run.due) step_phase(i);
  }
  events.close();  // BatchEnd
  state.tensors.clear(Scope::Batch);
  detail::StateWriter::clear_batch(state);
}

void OptimizationStep::forward_backward(std::size_t index, Batch& batch) {
  auto& state = context_.state;
  auto& events = context_.events;
  auto& run = phases_[index];
  enter_phase(index);
  const auto loss = call_step(
      context_, [&](Batch& b) { return context_.hooks.train_step(index, b); }, batch,
      run.step_name.c_str());
  if (!state.cancelled) {
    detail::StateWriter::set_batch(state, loss, batch.target);
    events.fire(Event::BeforeBackward);
  }
  if (!state.cancelled) {
    const auto window = run.due;
    const auto scaled = window == 1 ? loss : loss / static_cast<double>(window);
    detail::StateWriter::set_backward(state, scaled);
    sync_.before_backward(index, !run.has_backward, run.seen == window);
    // One phase's backward reaches every leaf, as `loss.backward()` does; with several, only
    // the phase's parameters: a generator's loss leaves the discriminator's gradients alone.
    backward(run.loss_scaler ? run.loss_scaler->scale(scaled) : scaled,
             phases_.size() > 1 ? &parameters_[index] : nullptr);
    // A window of one batch reports its loss as is; longer windows sum their scaled losses.
    run.window_loss = window == 1                 ? loss
                      : run.window_loss.defined() ? run.window_loss + scaled.detach()
                                                  : scaled.detach();
    run.has_backward = true;
    events.fire(Event::AfterBackward);
  }
  enter_phase(0);
}

// The batches run were scaled by 1 / (the phase's batches of the window): rescaled to 1 / (those
// of the shortened window), the step's gradients and loss are those of a window of that many
// batches (docs/events.md).
void OptimizationStep::shorten(std::size_t batches) {
  window_size_ = static_cast<std::int64_t>(batches);
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    auto& run = phases_[i];
    if (run.stepped) continue;
    const auto due = due_batches(i, window_first_batch_, window_size_);
    if (due == run.due) continue;
    const double factor = static_cast<double>(run.due) / static_cast<double>(due);
    run.due = due;
    if (!run.has_backward) continue;
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters_[i]) {
      if (parameter.grad().defined()) parameter.mutable_grad().mul_(factor);
    }
    run.window_loss = run.window_loss * factor;
  }
}

bool OptimizationStep::finish() {
  bool updated = false;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    auto& run = phases_[i];
    if (run.due > 0 && !run.stepped) step_phase(i);
    updated = updated || run.updated;
  }
  in_window_ = false;
  return updated;
}

// The phase's window ends: synchronises its gradients, unscales them, and unless the step is
// skipped publishes BeforeOptimizerStep, clips, steps the optimizer and publishes
// AfterOptimizerStep; then clears its gradients.
void OptimizationStep::step_phase(std::size_t index) {
  auto& state = context_.state;
  auto& run = phases_[index];
  enter_phase(index);
  sync_.synchronize(index, run.has_backward, run.window_loss);
  // Unscaled after the all-reduce: every rank finds the same overflow and skips alike.
  const bool scaled = run.loss_scaler && run.has_backward;
  const bool overflow = scaled && run.loss_scaler->unscale(parameters_[index]);
  if (overflow) detail::StateWriter::set_skip_update(state, true);
  if (run.has_backward && !state.skip_update) context_.events.fire(Event::BeforeOptimizerStep);
  const bool update = run.has_backward && !state.skip_update;
  sync_.record_update(index, update);
  if (update) {
    clip_gradients(index);
    if (index == 0) capture_learning_rate();
    context_.hooks.optimizer_step(index);
    ++run.steps;
    detail::StateWriter::set_step(state, run.window_loss);
    state.tensors.set(tensor_names::kStepLoss, run.window_loss, Scope::Step);
    context_.events.fire(Event::AfterOptimizerStep);
  }
  if (scaled) run.loss_scaler->update(overflow);
  if (run.has_backward) clear_gradients(*phase_list_[index].optimizer());
  run.stepped = true;
  run.updated = update;
  detail::StateWriter::set_skip_update(state, false);  // a skip applies to one phase's step
  enter_phase(0);
}

void OptimizationStep::record_losses() {
  auto& state = context_.state;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    if (phases_[i].updated) state.record_metric(loss_metrics_[i].step, phases_[i].window_loss);
  }
}

// LibTorch's `Tensor::backward()` allocates and fills a tensor of ones for every call; the step
// keeps one while the loss keeps its shape, dtype and device and nothing else holds its memory.
// Should a backward function write to it in place, its version counter moved; should a gradient
// keep a view of it (a leaf reached through view functions only, e.g. `loss + p.squeeze()`, takes
// the gradient it receives), its storage has another owner, which may write to it later through
// `.data()` (gradient clipping does). Either way the next backward gets a fresh one. With
// `inputs` (a phase's parameters), only their gradients are computed and accumulated: a
// generator's loss leaves the discriminator's gradients alone.
void OptimizationStep::backward(const at::Tensor& loss, const std::vector<at::Tensor>* inputs) {
  if (!backward_seed_.defined() || backward_seed_._version() != backward_seed_version_ ||
      !backward_seed_.is_same_size(loss) || backward_seed_.scalar_type() != loss.scalar_type() ||
      backward_seed_.device() != loss.device()) {
    backward_seed_ = at::ones_like(loss, at::MemoryFormat::Contiguous);
    backward_seed_version_ = backward_seed_._version();
  }
  if (inputs) {
    torch::autograd::backward({loss}, {backward_seed_}, c10::nullopt, false, *inputs);
  } else {
    torch::autograd::backward({loss}, {backward_seed_});
  }
  if (backward_seed_.storage().use_count() != 1) backward_seed_.reset();
}

void OptimizationStep::clear_gradients() {
  for (const auto& phase : phase_list_) clear_gradients(*phase.optimizer());
}

void OptimizationStep::clear_gradients(torch::optim::Optimizer& optimizer) {
  if (!context_.options.set_grads_to_none()) {
    detail::zero_gradients(optimizer);
    return;
  }
  for (auto& group : optimizer.param_groups()) {
    for (auto& parameter : group.params()) parameter.mutable_grad().reset();
  }
}

void OptimizationStep::clip_gradients(std::size_t index) {
  const auto& run = phases_[index];
  if (run.clip_norm > 0.0) {
    torch::nn::utils::clip_grad_norm_(parameters_[index], run.clip_norm);
  } else if (run.clip_value > 0.0) {
    torch::nn::utils::clip_grad_value_(parameters_[index], run.clip_value);
  }
}

namespace {
/// The phases' names, one per phase in order.
std::vector<std::string> phase_names(const std::vector<OptimizerPhase>& phases) {
  std::vector<std::string> names;
  for (const auto& phase : phases) names.push_back(phase.name());
  return names;
}

/// Whether `names` are those of a trainer of one optimizer: one unnamed phase.
bool one_unnamed_phase(const std::vector<std::string>& names) {
  return names.size() == 1 && names.front().empty();
}
}  // namespace

void OptimizationStep::save(torch::serialize::OutputArchive& archive) const {
  std::vector<std::int64_t> steps;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    const auto& scaler = phases_[i].loss_scaler;
    steps.push_back(phases_[i].steps);
    if (!scaler) continue;
    archive.write(
        detail::indexed_key("loss_scaler", i),
        torch::tensor({scaler->current_scale(), static_cast<double>(scaler->growth_tracker())},
                      torch::kDouble));
  }
  // A trainer of one optimizer writes neither (the format before optimizer phases): its one
  // phase's step count is the fit's.
  const auto names = phase_names(phase_list_);
  if (one_unnamed_phase(names)) return;
  archive.write("optimizer_phases", c10::IValue(detail::join_lines(names)));
  archive.write("optimizer_phase_steps", c10::IValue(steps));
}

// The phases must be the same, by name and order. The loss scale of a float16 run is absent
// otherwise (a run in another precision ignores it).
OptimizationProgress OptimizationStep::read(detail::CheckpointReader& reader) const {
  const auto names = phase_names(phase_list_);
  const auto saved_names = reader.optional_value("optimizer_phases");
  const auto saved = saved_names.isString() ? detail::split_lines(saved_names.toStringRef())
                                            : std::vector<std::string>{""};
  if (saved != names) {
    if (one_unnamed_phase(names)) {
      reader.fail("was written by a trainer of several optimizers (optimizer phases ",
                  detail::join_or_none(saved), "); this trainer has one optimizer");
    }
    if (one_unnamed_phase(saved)) {
      reader.fail("was written by a trainer of one optimizer; this trainer has optimizer phases ",
                  detail::join_or_none(names));
    }
    reader.fail("was written with optimizer phases ", detail::join_or_none(saved),
                "; this trainer's are ", detail::join_or_none(names), " (same names, same order)");
  }
  OptimizationProgress progress;
  progress.phase_steps = saved_names.isString()
                             ? reader.value("optimizer_phase_steps").toIntVector()
                             : std::vector<std::int64_t>{read_fit_position(reader).step};
  if (progress.phase_steps.size() != names.size()) {
    reader.fail("has a malformed 'optimizer_phase_steps' entry");
  }
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    auto scaler = phases_[i].loss_scaler;
    const auto key = detail::indexed_key("loss_scaler", i);
    const auto saved = reader.optional_tensor(key);
    if (scaler && saved.defined()) {
      if (saved.numel() != 2) reader.fail("has a malformed '", key, "' entry");
      const auto values = saved.to(torch::kDouble);
      try {
        scaler->restore(values[0].item<double>(), values[1].item<std::int64_t>());
      } catch (const CheckpointError& error) {
        reader.fail("has an unusable loss scale: ", error.what());
      }
    }
    progress.loss_scalers.push_back(std::move(scaler));
  }
  return progress;
}

void OptimizationStep::restore(OptimizationProgress progress) {
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    phases_[i].loss_scaler = std::move(progress.loss_scalers[i]);
    phases_[i].steps = progress.phase_steps[i];
  }
  enter_phase(0);
}

}  // namespace torchbus
