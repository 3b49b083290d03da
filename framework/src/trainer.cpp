#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/control.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/gradient_reducer.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/tensor_names.hpp>
#include <torchbus/trainer.hpp>

#include "autocast_scope.hpp"

#include <cmath>

namespace torchbus {
namespace {

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& exception) {
    return exception.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

/// Puts the module back in training or evaluation mode when an evaluation ends, even by an error.
class ModeGuard {
 public:
  explicit ModeGuard(torch::nn::Module& module)
      : module_(module), was_training_(module.is_training()) {}
  ~ModeGuard() { module_.train(was_training_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

Trainer::Trainer(std::shared_ptr<torch::nn::Module> module, Forward forward,
                 torch::optim::Optimizer& optimizer, LossFunction loss, TrainerOptions options)
    : module_(std::move(module)),
      forward_(std::move(forward)),
      optimizer_(optimizer),
      loss_(std::move(loss)),
      options_(std::move(options)) {
  TORCHBUS_CHECK(module_ != nullptr, ConfigError, "Trainer needs a model, got a null module");
  TORCHBUS_CHECK(static_cast<bool>(forward_), ConfigError, "Trainer needs a forward function");
  TORCHBUS_CHECK(static_cast<bool>(loss_), ConfigError,
                 "Trainer needs a loss function (output, target) -> scalar tensor");
  options_.validate();
  open_ends_.reserve(8);
  if (options_.use_registered_subscriptions()) bus().add_registered();
}

Trainer::~Trainer() = default;

void Trainer::prepare_to_add(Callback* callback) {
  TORCHBUS_CHECK(callback != nullptr, ConfigError, "cannot add a null callback");
  TORCHBUS_CHECK(bus().find_callback(callback->name()) == nullptr, ConfigError,
                 "a callback named '", callback->name(),
                 "' is already added; names must be unique");
  callback->on_added(*this);
}

Trainer& Trainer::set_train_step(StepFunction step) {
  train_step_ = std::move(step);
  return *this;
}

Trainer& Trainer::set_eval_step(StepFunction step) {
  eval_step_ = std::move(step);
  return *this;
}

// ---- events -------------------------------------------------------------------------------------

void Trainer::fire(Event event) {
  try {
    publisher_.emit(event, state_);
  } catch (const StopTraining& stop) {
    state_.request_stop(stop.reason());
  } catch (const CancelEpoch& cancel) {
    state_.request_epoch_end(cancel.reason());
  } catch (const CancelBatch&) {
    TORCHBUS_CHECK(event == Event::BatchStart || event == Event::BeforeBackward ||
                       event == Event::EvalBatchStart,
                   ConfigError, "CancelBatch raised at ", to_string(event),
                   ": a batch can only be cancelled before its backward: at BatchStart, in the "
                   "train or eval step, at BeforeBackward or at EvalBatchStart");
    state_.cancelled = true;
  }
}

void Trainer::open(Event start, Event end) {
  open_ends_.push_back(end);  // owed even if a subscriber of `start` throws
  fire(start);
}

void Trainer::close() {
  const Event end = open_ends_.back();
  open_ends_.pop_back();
  fire(end);
}

void Trainer::ensure_idle() const {
  TORCHBUS_CHECK(!running_, ConfigError,
                 "fit() or evaluate() was called while this trainer is already running one; "
                 "start it from outside its subscribers");
}

void Trainer::set_action(Action action) noexcept {
  state_.action = action;
  state_.trainer_ = action == Action::None ? nullptr : this;
}

template <typename Body>
void Trainer::run_action(Body&& body) {
  ensure_idle();
  bus().check_order();  // an unknown name or a cycle fails before ActionStart
  running_ = true;
  struct Finish {
    bool& running;
    ~Finish() { running = false; }
  } finish{running_};
  state_.clear_epoch_end();
  state_.error = nullptr;
  state_.error_message.clear();
  open_ends_.clear();
  in_window_ = false;
  try {
    open(Event::ActionStart, Event::ActionEnd);
    body();
    close();
  } catch (...) {
    state_.error = std::current_exception();
    state_.error_message = torchbus::describe(state_.error);
    if (process_group_) process_group_->report_failure(state_.error_message);
    publisher_.emit_guarded(Event::Exception, state_);
    while (!open_ends_.empty()) {
      const Event end = open_ends_.back();
      open_ends_.pop_back();
      publisher_.emit_guarded(end, state_);
    }
    throw;
  }
}

// ---- fit ----------------------------------------------------------------------------------------

void Trainer::prepare_run() {
  const auto device = run_options_.device();
  if (device.is_cuda()) {
    TORCHBUS_CHECK(torch::cuda::is_available(), ConfigError, "device ", device,
                   " was requested but CUDA is not available (this LibTorch has no CUDA support "
                   "or no GPU is visible); use torch::kCPU");
    TORCHBUS_CHECK(device.index() < static_cast<int>(torch::cuda::device_count()), ConfigError,
                   "device ", device, " was requested but only ", torch::cuda::device_count(),
                   " CUDA devices are visible");
  } else {
    TORCHBUS_CHECK(device.is_cpu(), ConfigError, "device ", device,
                   " is not supported; expected cpu or cuda");
  }
  check_precision_supported(run_options_.precision(), device);
  module_->to(device);
  if (run_options_.channels_last()) {
    // As Python's Module.to(memory_format=...): `contiguous()` would leave a one-channel weight
    // in its old strides (it already counts as channels_last).
    torch::NoGradGuard no_grad;
    for (auto& parameter : module_->parameters()) {
      if (parameter.dim() == 4) {
        parameter.set_data(parameter.to(parameter.options(), /*non_blocking=*/false,
                                        /*copy=*/false, at::MemoryFormat::ChannelsLast));
      }
    }
  }
  parameters_ = module_->parameters();
  state_.model = module_.get();
  state_.optimizer = &optimizer_;
  state_.device = device;
  state_.accumulate_grad_batches = run_options_.accumulate_grad_batches_at(0);
  state_.max_epochs = run_options_.max_epochs();
  state_.max_steps = run_options_.max_steps();
  state_.fast_dev_run = run_options_.fast_dev_run() > 0;
}

void Trainer::fit_sources(BatchSource& train, BatchSource* validation) {
  ensure_idle();
  struct Context {
    Trainer& trainer;
    ~Context() { trainer.set_action(Action::None); }
  } context{*this};
  set_action(Action::Fit);
  options_.validate();
  run_options_ = options_.effective();  // fast_dev_run's overrides hold for this fit only
  TORCHBUS_CHECK(run_options_.fast_dev_run() == 0 || !resume_path_, ConfigError,
                 "fast_dev_run checks the loop from a fresh start and does not resume (from ",
                 resume_path_ ? resume_path_->string() : std::string(),
                 "); drop one of them (a ModelCheckpoint with resume(true) asks for a resume)");
  train_batch_limit_ =
      run_options_.limit_train_batches().batches_per_pass(train.size(), "limit_train_batches");
  val_batch_limit_ = validation ? run_options_.limit_val_batches().batches_per_pass(
                                      validation->size(), "limit_val_batches")
                                : -1;
  prepare_run();
  if (run_options_.seed()) torch::manual_seed(*run_options_.seed());
  state_.epoch = state_.step = state_.batch_in_epoch = state_.global_batch = 0;
  state_.window_position = 0;
  state_.validation_follows = false;
  state_.metrics.clear();
  state_.tensors.clear_all();
  state_.clear_step_output();
  module_->train();
  clear_gradients();
  loss_scaler_.reset();
  if (run_options_.precision() == Precision::FP16Mixed)
    loss_scaler_.emplace(run_options_.loss_scaler());
  state_.sanity_checking = false;
  state_.clear_stop();  // a resume restores the stop that ended the run, if one did
  resume_skip_ = 0;     // and the batches of its epoch already trained
  const bool fresh = !resume_path_;
  if (resume_path_) restore_for_resume();
  run_action([&] {
    if (process_group_) start_process_group();
    if (fresh && validation && run_options_.num_sanity_val_steps() != 0) {
      run_sanity_check(*validation);
    }
    while (!training_finished()) run_epoch(train, validation);
  });
}

bool Trainer::step_limit_reached() const noexcept {
  return run_options_.max_steps() >= 0 && state_.step >= run_options_.max_steps();
}

bool Trainer::training_finished() const noexcept {
  return stopping() || step_limit_reached() ||
         (run_options_.max_epochs() >= 0 && state_.epoch >= run_options_.max_epochs());
}

void Trainer::run_epoch(BatchSource& train, BatchSource* validation) {
  state_.batch_in_epoch = 0;
  state_.training = true;
  epoch_finished_ = false;
  state_.accumulate_grad_batches = run_options_.accumulate_grad_batches_at(state_.epoch);
  open(Event::EpochStart, Event::EpochEnd);
  start_training_epoch(train);
  bool more = true;  // the data has batches left
  while (more && !stopping() && !step_limit_reached() && !state_.epoch_end_requested()) {
    more = fill_window(train);
    if (window_used_ == 0) {
      TORCHBUS_CHECK(state_.batch_in_epoch > 0, DataError,
                     "the training data yielded no batches in epoch ", state_.epoch,
                     "; expected at least one batch per epoch");
      break;
    }
    run_step(validation != nullptr);
    if (state_.validation_follows) {
      run_evaluation(*validation);
      state_.validation_follows = false;
      agree_on_stop();
    }
  }
  // Ended by its data or by request; a stop or max_steps leaves it unfinished.
  const bool completed = !more || state_.epoch_end_requested();
  if (state_.metrics.contains(metric_names::kTrainLoss) &&
      state_.metrics.latest(metric_names::kTrainLoss).epoch == state_.epoch) {
    state_.record_metric(metric_names::kTrainLossEpoch,
                         state_.metrics.epoch_mean(metric_names::kTrainLoss, state_.epoch));
  }
  const auto every = run_options_.val_every_n_epochs();
  if (validation && every > 0 && !stopping() && (state_.epoch + 1) % every == 0) {
    run_evaluation(*validation);
  }
  // An epoch cut short by a stop or max_steps is not completed: a checkpoint taken now or at
  // ActionEnd continues it where it stopped.
  epoch_finished_ = completed;
  close();  // EpochEnd
  agree_on_stop();
  epoch_finished_ = false;
  state_.clear_epoch_end();
  state_.tensors.clear(Scope::Epoch);
  if (completed) {
    ++state_.epoch;
    state_.batch_in_epoch = 0;
  }
}

bool Trainer::fill_window(BatchSource& train) {
  window_used_ = 0;
  auto k = static_cast<std::size_t>(state_.accumulate_grad_batches);
  // limit_train_batches ends the epoch like the end of the data: the last window may be short.
  bool limit_reached = false;
  if (train_batch_limit_ >= 0) {
    const auto left = static_cast<std::size_t>(
        std::max<std::int64_t>(0, train_batch_limit_ - state_.batch_in_epoch));
    limit_reached = left <= k;
    k = std::min(k, left);
  }
  while (window_used_ < k) {
    if (window_.size() <= window_used_) window_.emplace_back();
    if (!train.next(window_[window_used_])) return false;
    ++window_used_;
  }
  return !limit_reached;
}

void Trainer::run_step(bool can_validate) {
  state_.window_size = static_cast<std::int64_t>(window_used_);
  state_.window_position = 0;
  state_.skip_update = false;
  window_has_backward_ = false;
  window_loss_.reset();
  in_window_ = true;
  open(Event::StepStart, Event::StepEnd);
  for (std::size_t i = 0; i < window_used_; ++i) {
    state_.window_position = static_cast<std::int64_t>(i);
    run_batch(window_[i]);
    ++state_.batch_in_epoch;
    ++state_.global_batch;
    // An epoch end is honoured at the batch boundary: the window steps with what it has.
    if (state_.epoch_end_requested() && i + 1 < window_used_) {
      shorten_window(i + 1);
      break;
    }
  }
  if (distributed()) synchronize_gradients();
  // Unscaled after the all-reduce: every rank finds the same overflow and skips alike.
  const bool scaled = loss_scaler_ && window_has_backward_;
  const bool overflow = scaled && loss_scaler_->unscale(parameters_);
  if (overflow) state_.skip_update = true;
  if (window_has_backward_ && !state_.skip_update) fire(Event::BeforeOptimizerStep);
  const bool update = window_has_backward_ && !state_.skip_update;
  updated_last_step_ = update;
  if (update) {
    clip_gradients();
    optimizer_step();
    state_.step_loss_ = window_loss_;
    fire(Event::AfterOptimizerStep);
    ++state_.step;
    state_.tensors.set(tensor_names::kLoss, window_loss_, Scope::Step);
    state_.record_metric(metric_names::kTrainLoss, window_loss_);
  }
  if (scaled) loss_scaler_->update(overflow);
  if (window_has_backward_) clear_gradients();
  in_window_ = false;
  state_.update_skipped = !update;
  // Decided before StepEnd, so that its subscribers (checkpoints) know a validation follows. It
  // runs even if a stop was asked for: it belongs to this step, and every rank decides alike.
  const auto every = run_options_.val_every_n_steps();
  state_.validation_follows = can_validate && every > 0 && update && state_.step % every == 0;
  close();  // StepEnd
  state_.update_skipped = false;
  state_.tensors.clear(Scope::Step);
  state_.step_loss_.reset();
  // Distributed, a stop requested from here on rides with the next step's gradients (or is agreed
  // after the next validation or EpochEnd): one collective per bucket and step, none else.
}

// The batches run were scaled by 1 / window_size: rescaled to 1 / batches, the step's gradients
// and loss are those of a window of that many batches (docs/events.md).
void Trainer::shorten_window(std::size_t batches) {
  const double factor = static_cast<double>(state_.window_size) / static_cast<double>(batches);
  state_.window_size = static_cast<std::int64_t>(batches);
  if (!window_has_backward_) return;
  torch::NoGradGuard no_grad;
  for (auto& parameter : parameters_) {
    if (parameter.grad().defined()) parameter.mutable_grad().mul_(factor);
  }
  window_loss_ = window_loss_ * factor;
}

void Trainer::run_batch(Batch& batch) {
  state_.cancelled = false;
  move_to_device(batch);
  open(Event::BatchStart, Event::BatchEnd);
  if (!state_.cancelled) {
    const auto loss = run_step_function(&Trainer::train_step, batch, "train step");
    if (!state_.cancelled) {
      state_.batch_loss_ = loss;
      state_.batch_target_ = batch.target;
      fire(Event::BeforeBackward);
    }
    if (!state_.cancelled) {
      const auto window = state_.window_size;
      const auto scaled = window == 1 ? loss : loss / static_cast<double>(window);
      state_.backward_loss_ = scaled;
      // The window's first backward accumulates into the gradient buckets, its last starts the
      // all-reduces as buckets become final.
      if (reducer_ && !window_has_backward_) reducer_->attach();
      if (reducer_ && state_.window_position + 1 == window) reducer_->arm();
      backward(loss_scaler_ ? loss_scaler_->scale(scaled) : scaled);
      // A window of one batch reports its loss as is; longer windows sum their scaled losses.
      window_loss_ = window == 1              ? loss
                     : window_loss_.defined() ? window_loss_ + scaled.detach()
                                              : scaled.detach();
      window_has_backward_ = true;
      fire(Event::AfterBackward);
    }
  }
  close();  // BatchEnd
  state_.tensors.clear(Scope::Batch);
  state_.clear_batch_output();
}

// LibTorch's `Tensor::backward()` allocates and fills a tensor of ones for every call; the trainer
// keeps one while the loss keeps its shape, dtype and device and nothing else holds its memory.
// Should a backward function write to it in place, its version counter moved; should a gradient
// keep a view of it (a leaf reached through view functions only, e.g. `loss + p.squeeze()`, takes
// the gradient it receives), its storage has another owner, which may write to it later through
// `.data()` (gradient clipping does). Either way the next backward gets a fresh one.
void Trainer::backward(const at::Tensor& loss) {
  if (!backward_seed_.defined() || backward_seed_._version() != backward_seed_version_ ||
      !backward_seed_.is_same_size(loss) || backward_seed_.scalar_type() != loss.scalar_type() ||
      backward_seed_.device() != loss.device()) {
    backward_seed_ = at::ones_like(loss, at::MemoryFormat::Contiguous);
    backward_seed_version_ = backward_seed_._version();
  }
  torch::autograd::backward({loss}, {backward_seed_});
  if (backward_seed_.storage().use_count() != 1) backward_seed_.reset();
}

void Trainer::clear_gradients() {
  if (!run_options_.set_grads_to_none()) {
    optimizer_.zero_grad();
    return;
  }
  for (auto& group : optimizer_.param_groups()) {
    for (auto& parameter : group.params()) parameter.mutable_grad().reset();
  }
}

void Trainer::clip_gradients() {
  if (run_options_.gradient_clip_norm() > 0.0) {
    torch::nn::utils::clip_grad_norm_(parameters_, run_options_.gradient_clip_norm());
  } else if (run_options_.gradient_clip_value() > 0.0) {
    torch::nn::utils::clip_grad_value_(parameters_, run_options_.gradient_clip_value());
  }
}

void Trainer::move_to_device(Batch& batch) const {
  if (batch.data.defined() && batch.data.device() != state_.device) {
    batch.data = batch.data.to(state_.device);
  }
  if (batch.target.defined() && batch.target.device() != state_.device) {
    batch.target = batch.target.to(state_.device);
  }
  if (run_options_.channels_last() && batch.data.defined() && batch.data.dim() == 4) {
    batch.data = batch.data.contiguous(at::MemoryFormat::ChannelsLast);
  }
}

// ---- steps --------------------------------------------------------------------------------------

at::Tensor Trainer::run_step_function(at::Tensor (Trainer::*step)(Batch&), Batch& batch,
                                      const char* what) {
  at::Tensor loss;
  try {
    const detail::AutocastScope autocast(run_options_.precision(), state_.device.type());
    loss = (this->*step)(batch);
  } catch (const CancelBatch&) {
    state_.cancelled = true;
  } catch (const StopTraining& stop) {
    state_.request_stop(stop.reason());
    state_.cancelled = true;
  } catch (const CancelEpoch& cancel) {
    state_.request_epoch_end(cancel.reason());
    state_.cancelled = true;
  }
  if (state_.cancelled) return {};
  TORCHBUS_CHECK(loss.defined() && loss.numel() == 1, DataError, "the ", what,
                 " must return a scalar loss (one element), got ",
                 loss.defined() ? detail::concat("shape ", loss.sizes()) : "an undefined tensor",
                 "; reduce it, e.g. with .mean()");
  return loss.dim() == 0 ? loss : loss.reshape({});
}

at::Tensor Trainer::forward_and_loss(Batch& batch) {
  at::Tensor output;
  try {
    output = forward_(batch.data);
  } catch (const c10::Error& error) {
    throw DataError(detail::concat("the model's forward failed on an input of shape ",
                                   batch.data.sizes(), ": ", detail::first_line(error)));
  }
  at::Tensor loss;
  try {
    loss = loss_(output, batch.target);
  } catch (const c10::Error& error) {
    throw DataError(detail::concat("the loss failed on output of shape ", output.sizes(),
                                   " and target of shape ", batch.target.sizes(), ": ",
                                   detail::first_line(error),
                                   " (expected a target that fits the model's output)"));
  }
  state_.tensors.set(tensor_names::kOutput, output);
  state_.tensors.set(tensor_names::kTarget, batch.target);
  state_.tensors.set(tensor_names::kLoss, loss);
  state_.set_batch_output(output);
  return loss;
}

at::Tensor Trainer::train_step(Batch& batch) {
  return train_step_ ? train_step_(*this, batch) : forward_and_loss(batch);
}

at::Tensor Trainer::eval_step(Batch& batch) {
  return eval_step_ ? eval_step_(*this, batch) : forward_and_loss(batch);
}

void Trainer::optimizer_step() {
  optimizer_.step();
}

// ---- evaluation ---------------------------------------------------------------------------------

double Trainer::evaluate_source(BatchSource& data) {
  ensure_idle();
  struct Context {
    Trainer& trainer;
    ~Context() { trainer.set_action(Action::None); }
  } context{*this};
  set_action(Action::Evaluate);
  state_.clear_stop();
  state_.clear_step_output();
  run_options_ = options_.effective();
  prepare_run();
  val_batch_limit_ =
      run_options_.limit_val_batches().batches_per_pass(data.size(), "limit_val_batches");
  at::Tensor mean_loss;
  run_action([&] { mean_loss = run_evaluation(data); });
  return mean_loss.defined() ? mean_loss.item<double>() : std::nan("");
}

// A validation of num_sanity_val_steps batches before training. Nothing of it remains: the metric
// history and the CPU generator are put back, and built-in monitors and writers skip events while
// state.sanity_checking is set. An exception escaping it leaves the flag set for Exception's
// subscribers.
void Trainer::run_sanity_check(BatchSource& validation) {
  const auto configured_limit = val_batch_limit_;
  const auto steps = run_options_.num_sanity_val_steps();
  if (steps > 0)
    val_batch_limit_ = configured_limit < 0 ? steps : std::min(steps, configured_limit);
  const MetricHistory metrics = state_.metrics;
  auto generator = at::detail::getDefaultCPUGenerator();
  at::Tensor rng;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng = generator.get_state();
  }
  state_.sanity_checking = true;
  run_evaluation(validation);
  state_.sanity_checking = false;
  val_batch_limit_ = configured_limit;
  state_.metrics = metrics;
  state_.tensors.clear(Scope::Step);
  state_.tensors.clear(Scope::Epoch);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng);
}

at::Tensor Trainer::run_evaluation(BatchSource& data) {
  torch::NoGradGuard no_grad;
  ModeGuard mode(*module_);
  module_->eval();
  state_.training = false;
  state_.eval_batch = 0;
  open(Event::EvalStart, Event::EvalEnd);
  data.start_epoch(0);
  at::Tensor loss_sum;
  std::int64_t samples = 0;
  Batch batch;
  while ((val_batch_limit_ < 0 || state_.eval_batch < val_batch_limit_) && data.next(batch)) {
    state_.cancelled = false;
    move_to_device(batch);
    open(Event::EvalBatchStart, Event::EvalBatchEnd);
    const auto loss = state_.cancelled ? at::Tensor()
                                       : run_step_function(&Trainer::eval_step, batch, "eval step");
    if (!state_.cancelled) {
      state_.batch_loss_ = loss;
      state_.batch_target_ = batch.target;
      const auto size = batch.data.dim() > 0 ? batch.data.size(0) : 1;
      const auto weighted = loss.detach() * static_cast<double>(size);
      loss_sum = loss_sum.defined() ? loss_sum + weighted : weighted;
      samples += size;
    }
    close();  // EvalBatchEnd
    state_.tensors.clear(Scope::Batch);
    state_.clear_batch_output();
    ++state_.eval_batch;
  }
  TORCHBUS_CHECK(state_.eval_batch > 0, DataError,
                 "the evaluation data yielded no batches; expected at least one batch");
  if (distributed()) {
    // Each rank evaluated its shard: the mean is over every rank's samples.
    auto totals = torch::stack(
        {loss_sum.defined() ? loss_sum.to(torch::kDouble) : torch::zeros({}, torch::kDouble),
         torch::tensor(static_cast<double>(samples), torch::kDouble)});
    process_group_->all_reduce(totals);
    samples = static_cast<std::int64_t>(totals[1].item<double>());
    loss_sum = totals[0];
  }
  at::Tensor mean_loss;
  if (samples > 0) {
    mean_loss = loss_sum / static_cast<double>(samples);
    state_.record_metric(metric_names::kValLoss, mean_loss);
  }
  close();  // EvalEnd
  state_.training = true;
  return mean_loss;
}

}  // namespace torchbus
