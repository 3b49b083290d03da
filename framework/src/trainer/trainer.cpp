// Trainer: the façade a user constructs. What a fit does lives in its parts (framework/src:
// FitLoop, EvaluationLoop, OptimizationStep, DistributedSync, EventFlow; checkpoint_io.cpp composes
// their states); see docs/architecture.md.

#include <c10/core/impl/VirtualGuardImpl.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/tensor_names.hpp>
#include <torchbus/trainer.hpp>

#include "checkpoint/format.hpp"
#include "distributed/sync.hpp"
#include "loop/context.hpp"
#include "loop/evaluation_loop.hpp"
#include "loop/event_flow.hpp"
#include "loop/fit_loop.hpp"
#include "loop/optimization_step.hpp"
#include "loop/prediction_loop.hpp"
#include "state/writer.hpp"
#include "trainer/checkpoint_connector.hpp"
#include "trainer/phase_models.hpp"
#include "trainer/process_modes.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace torchbus {

namespace fs = std::filesystem;

namespace {
/// How many of `failures` were disabled.
std::size_t count_disabled(const std::vector<SubscriberFailure>& failures) {
  return static_cast<std::size_t>(std::count_if(
      failures.begin(), failures.end(), [](const SubscriberFailure& f) { return f.disabled; }));
}

/// The first phase's optimizer; throws ConfigError when there is none.
torch::optim::Optimizer& first_optimizer(const std::vector<OptimizerPhase>& phases) {
  TORCHBUS_CHECK(!phases.empty(), ConfigError,
                 "a Trainer of optimizer phases needs at least one phase, got none");
  TORCHBUS_CHECK(phases.front().optimizer() != nullptr, ConfigError, "optimizer phase '",
                 phases.front().name(), "' has a null optimizer");
  return *phases.front().optimizer();
}

/// The parameters of `module` (none: null), by their tensors.
std::unordered_set<const void*> parameter_set(const torch::nn::Module* module) {
  std::unordered_set<const void*> tensors;
  if (module == nullptr) return tensors;
  for (const auto& parameter : module->parameters()) {
    tensors.insert(parameter.unsafeGetTensorImpl());
  }
  return tensors;
}

/// Throws ConfigError naming the first phase that is not usable: a name that is empty, repeated
/// or has a line break, no optimizer or step function, a bad every_n_batches or clipping value,
/// a model that cannot be trained (check_phase_models), a parameter outside `model` (the
/// trainer's, may be null) and the phase's own model, or in two phases' optimizers.
void check_phases(const std::vector<OptimizerPhase>& phases, const torch::nn::Module* model) {
  std::unordered_set<std::string> names;
  for (const auto& phase : phases) {
    const auto& name = phase.name();
    TORCHBUS_CHECK(!name.empty() && name.find('\n') == std::string::npos, ConfigError,
                   "an optimizer phase needs a name without line breaks, got '", name, "'");
    TORCHBUS_CHECK(names.insert(name).second, ConfigError, "two optimizer phases are named '", name,
                   "'; names must be unique");
    TORCHBUS_CHECK(phase.optimizer() != nullptr, ConfigError, "optimizer phase '", name,
                   "' has a null optimizer");
    TORCHBUS_CHECK(static_cast<bool>(phase.step()), ConfigError, "optimizer phase '", name,
                   "' has no step function (Trainer&, Batch&) -> loss");
    TORCHBUS_CHECK(phase.every_n_batches() >= 1, ConfigError, "optimizer phase '", name,
                   "': every_n_batches must be >= 1, got ", phase.every_n_batches());
    TORCHBUS_CHECK(phase.gradient_clip_norm().value_or(0.0) >= 0.0 &&
                       phase.gradient_clip_value().value_or(0.0) >= 0.0,
                   ConfigError, "optimizer phase '", name,
                   "': gradient clipping values must be >= 0 (0: off)");
  }
  check_phase_models(model, phases);
  const auto model_parameters = parameter_set(model);
  std::unordered_map<const void*, std::string> trained_by;  // parameter -> its phase
  for (const auto& phase : phases) {
    const auto& name = phase.name();
    const auto own_parameters = parameter_set(phase.model().get());
    const char* where = !phase.model()     ? "the trainer's model"
                        : model == nullptr ? "the phase's model"
                                           : "the phase's model or the trainer's model";
    for (const auto& group : phase.optimizer()->param_groups()) {
      for (const auto& parameter : group.params()) {
        const auto* tensor = parameter.unsafeGetTensorImpl();
        TORCHBUS_CHECK(model_parameters.count(tensor) > 0 || own_parameters.count(tensor) > 0,
                       ConfigError, "optimizer phase '", name, "' trains a tensor of shape ",
                       parameter.sizes(), " that is not a parameter of ", where,
                       " (its checkpoints would miss it); register it in the model");
        const auto [found, inserted] = trained_by.emplace(tensor, name);
        TORCHBUS_CHECK(inserted || found->second == name, ConfigError, "a parameter of shape ",
                       parameter.sizes(), " is in the optimizers of phases '", found->second,
                       "' and '", name, "'; each parameter belongs to one phase");
      }
    }
  }
}

/// The batch's fields for an error: "an input of shape [4, 3]" for a batch of `data` alone, else
/// each field and its shape ("a batch of data [4, 3], mask [4, 7], boxes (list of 4)").
std::string describe_fields(const Batch& batch) {
  if (!batch.structured() && batch.data.defined()) {
    return detail::concat("an input of shape ", batch.data.sizes());
  }
  std::string fields;
  const auto add = [&fields](std::string_view name, const std::string& what) {
    fields += detail::concat(fields.empty() ? "" : ", ", name, " ", what);
  };
  const auto shape = [](const at::Tensor& tensor) {
    return tensor.defined() ? detail::concat(tensor.sizes()) : std::string("(undefined)");
  };
  if (batch.data.defined()) add("data", shape(batch.data));
  if (batch.target.defined()) add("target", shape(batch.target));
  for (const auto& [name, tensor] : batch.tensors()) add(name, shape(tensor));
  for (const auto& [name, list] : batch.lists()) {
    add(name, detail::concat("(list of ", list.size(), ")"));
  }
  return fields.empty() ? std::string("a batch without fields") : "a batch of " + fields;
}

/// The output's tensors for an error: "output of shape [4, 10]", or each named one.
std::string describe_output(const Output& output) {
  if (output.named().empty()) {
    return output.main().defined() ? detail::concat("output of shape ", output.main().sizes())
                                   : std::string("an undefined output");
  }
  std::string tensors;
  for (const auto& [name, tensor] : output.named()) {
    tensors += detail::concat(tensors.empty() ? "" : ", ", name, " ",
                              tensor.defined() ? detail::concat(tensor.sizes()) : "(undefined)");
  }
  return "outputs " + tensors;
}

/// Logs, at the end of an action that went on past them, the subscribers disabled so far.
void log_disabled(const std::vector<SubscriberFailure>& failures, std::string_view action) {
  std::string list;
  for (const auto& failure : failures) {
    if (!failure.disabled) continue;
    list += detail::concat(list.empty() ? "" : "; ", failure.subscriber, " (", failure.failures,
                           failure.failures == 1 ? " failure" : " failures", ", first during ",
                           failure.event, ": ", failure.first_error, ")");
  }
  logger()->warn("{} completed without {} disabled subscriber(s) after they threw: {}", action,
                 count_disabled(failures), list);
}
}  // namespace

struct Trainer::Engine final : StepHooks {
  explicit Engine(Trainer& owner)
      : trainer(owner),
        events(owner.publisher_, owner.state_),
        sync(owner.state_),
        context{owner.state_, events, *this, owner.run_options_, *owner.module_},
        step(context, owner.phases_, sync),
        evaluation(context, sync),
        prediction(context),
        fit(context, step, evaluation, sync) {
    events.set_progress(&fit);  // the loops' counters, into the state before each emission
  }

  at::Tensor train_step(std::size_t phase, Batch& batch) override {
    serving_phase = phase;
    return trainer.train_step(batch);
  }
  at::Tensor eval_step(Batch& batch) override { return trainer.eval_step(batch); }
  Output predict_step(Batch& batch) override { return trainer.predict_step(batch); }
  void optimizer_step(std::size_t phase) override {
    serving_phase = phase;
    trainer.optimizer_step();
  }

  /// The parts a checkpoint is composed of.
  CheckpointParts checkpoint() {
    return {fit,           step,           *trainer.module_, trainer.phases_,
            trainer.bus(), trainer.state_, trainer.options_, copies};
  }

  Trainer& trainer;
  EventFlow events;
  DistributedSync sync;
  LoopContext context;
  OptimizationStep step;
  EvaluationLoop evaluation;
  PredictionLoop prediction;
  FitLoop fit;
  detail::TensorCopyPool copies;  ///< reused by one background checkpoint after another
  /// The optimizer phase whose step the loop called last: the one the trainer's `train_step` and
  /// `optimizer_step` serve.
  std::size_t serving_phase = 0;
};

Trainer::Trainer(std::shared_ptr<torch::nn::Module> module, Forward forward,
                 torch::optim::Optimizer& optimizer, LossFunction loss, TrainerOptions options)
    : Trainer(std::move(module),
              forward ? BatchForward([forward = std::move(forward)](const Batch& batch) -> Output {
                return forward(batch.data);
              })
                      : BatchForward(),
              optimizer,
              loss ? BatchLoss([loss = std::move(loss)](const Output& output, const Batch& batch) {
                return loss(output.main(), batch.target);
              })
                   : BatchLoss(),
              std::move(options)) {}

Trainer::Trainer(std::shared_ptr<torch::nn::Module> module, BatchForward forward,
                 torch::optim::Optimizer& optimizer, BatchLoss loss, TrainerOptions options)
    : module_(std::move(module)),
      forward_(std::move(forward)),
      phases_{OptimizerPhase(
          "", optimizer, [](Trainer& trainer, Batch& batch) { return trainer.own_step(batch); })},
      optimizer_(optimizer),
      loss_(std::move(loss)),
      options_(std::move(options)) {
  TORCHBUS_CHECK(module_ != nullptr, ConfigError, "Trainer needs a model, got a null module");
  TORCHBUS_CHECK(static_cast<bool>(forward_), ConfigError, "Trainer needs a forward function");
  TORCHBUS_CHECK(static_cast<bool>(loss_), ConfigError,
                 "Trainer needs a loss function (output, target) -> scalar tensor");
  assemble();
}

Trainer::Trainer(std::shared_ptr<torch::nn::Module> module, std::vector<OptimizerPhase> phases,
                 TrainerOptions options)
    : phases_(std::move(phases)),
      optimizer_(first_optimizer(phases_)),
      options_(std::move(options)) {
  TORCHBUS_CHECK(module != nullptr, ConfigError, "Trainer needs a model, got a null module");
  check_phases(phases_, module.get());
  module_ = trained_module(std::move(module), phases_);
  assemble();
}

Trainer::Trainer(std::vector<OptimizerPhase> phases, TrainerOptions options)
    : phases_(std::move(phases)),
      optimizer_(first_optimizer(phases_)),
      options_(std::move(options)) {
  check_phases(phases_, nullptr);
  module_ = trained_module(nullptr, phases_);
  assemble();
}

Trainer::~Trainer() = default;

void Trainer::assemble() {
  options_.validate();
  engine_ = std::make_unique<Engine>(*this);
  if (options_.use_registered_subscriptions()) bus().add_registered();
}

void Trainer::prepare_to_add(Callback* callback) {
  TORCHBUS_CHECK(callback != nullptr, ConfigError, "cannot add a null callback");
  TORCHBUS_CHECK(bus().find_callback(callback->name()) == nullptr, ConfigError,
                 "a callback named '", callback->name(),
                 "' is already added; names must be unique");
  callback->on_added(*this);
}

Trainer& Trainer::set_train_step(StepFunction step) {
  TORCHBUS_CHECK(static_cast<bool>(loss_), ConfigError,
                 "a trainer of optimizer phases trains with each phase's step function; "
                 "set_train_step has nothing to replace (override train_step to replace them all)");
  train_step_ = std::move(step);
  return *this;
}

Trainer& Trainer::set_eval_step(StepFunction step) {
  eval_step_ = std::move(step);
  return *this;
}

Trainer& Trainer::set_predict_step(PredictFunction step) {
  predict_step_ = std::move(step);
  return *this;
}

Trainer& Trainer::set_process_group(std::shared_ptr<ProcessGroup> group) {
  ensure_idle();
  engine_->sync.set_group(std::move(group));
  return *this;
}

ProcessGroup* Trainer::process_group() const noexcept {
  return engine_->sync.group();
}

const LossScaler* Trainer::loss_scaler() const noexcept {
  return engine_->step.loss_scaler();
}

void Trainer::ensure_idle() const {
  engine_->events.ensure_idle();
}

void Trainer::set_action(Action action) noexcept {
  detail::StateWriter::set_action(state_, action, action == Action::None ? nullptr : this);
}

// ---- actions ------------------------------------------------------------------------------------

void Trainer::prepare_run() {
  options_.validate();
  run_options_ = options_.effective();  // fast_dev_run's overrides hold for this action only
  auto device = run_options_.device();
  if (device.is_cuda()) {
    TORCHBUS_CHECK(torch::cuda::is_available(), ConfigError, "device ", device,
                   " was requested but CUDA is not available (this LibTorch has no CUDA support "
                   "or no GPU is visible); use torch::kCPU");
    TORCHBUS_CHECK(device.index() < static_cast<int>(torch::cuda::device_count()), ConfigError,
                   "device ", device, " was requested but only ", torch::cuda::device_count(),
                   " CUDA devices are visible");
    // `torch::kCUDA` (no index) means the current CUDA device. state.device names it with its
    // index, as the tensors moved there do, so a batch already on it skips `to()` at every step.
    if (!device.has_index()) device = c10::impl::VirtualGuardImpl(device.type()).getDevice();
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
  detail::StateWriter::set_run(state_, module_.get(), device, run_options_);
  detail::StateWriter::set_accumulation(state_, run_options_.accumulate_grad_batches_at(0));
}

void Trainer::run_as(Action action, const std::function<void()>& body) {
  ensure_idle();
  struct Idle {
    Trainer& trainer;
    ~Idle() { trainer.set_action(Action::None); }
  } idle{*this};
  set_action(action);
  const auto& failures = bus().subscriber_failures();
  const auto disabled_before = count_disabled(failures);
  const detail::ProcessModes modes(options_);
  body();
  if (count_disabled(failures) > disabled_before) {
    log_disabled(failures, std::string(to_string(action)) + "()");
  }
}

void Trainer::fit_sources(BatchSource& train, BatchSource* validation) {
  run_as(Action::Fit, [&] {
    if (options_.fast_dev_run() > 0 && resume_ && resume_->by_default) {
      logger()->info("fast_dev_run starts from scratch: not resuming from {}",
                     resume_->path.string());
      resume_.reset();
    }
    TORCHBUS_CHECK(options_.fast_dev_run() == 0 || !resume_, ConfigError,
                   "fast_dev_run checks the loop from a fresh start and does not resume (from ",
                   resume_ ? resume_->path.string() : std::string(), "); drop one of them");
    prepare_run();
    auto& engine = *engine_;
    engine.step.reset();
    engine.fit.prepare(train, validation);
    if (run_options_.seed()) torch::manual_seed(*run_options_.seed());
    module_->train();
    engine.step.prepare();
    const bool fresh = !resume_;
    if (resume_) {
      const auto path = resume_->path;
      resume_.reset();
      resume_from_checkpoint(engine.checkpoint(), path);
    }
    try {
      engine.events.run_action([&] { engine.fit.run(train, validation, fresh); }, process_group());
    } catch (...) {
      engine.fit.end_run();
      throw;
    }
    engine.fit.end_run();
    engine.copies.clear();  // the last checkpoint's copies: the next run's first capture is new
  });
}

double Trainer::evaluate_source(BatchSource& data) {
  return evaluate_as(Action::Evaluate, data);
}

double Trainer::test_source(BatchSource& data) {
  return evaluate_as(Action::Test, data);
}

double Trainer::evaluate_as(Action action, BatchSource& data) {
  const bool test = action == Action::Test;
  at::Tensor mean_loss;
  run_as(action, [&] {
    state_.clear_stop();
    detail::StateWriter::clear_all(state_);
    detail::StateWriter::set_epoch_cut_short(state_, false);  // a failed fit may have left it
    prepare_run();
    const auto limit =
        test ? run_options_.limit_test_batches().batches_per_pass(data.size(), "limit_test_batches")
             : run_options_.limit_val_batches().batches_per_pass(data.size(), "limit_val_batches");
    engine_->step.reset();
    engine_->events.run_action(
        [&] {
          mean_loss = engine_->evaluation.run(
              data, limit, test ? metric_names::kTestLoss : metric_names::kValLoss);
        },
        process_group());
  });
  return mean_loss.defined() ? mean_loss.item<double>() : std::nan("");
}

std::vector<Output> Trainer::predict_source(BatchSource& data, bool keep) {
  std::vector<Output> predictions;
  run_as(Action::Predict, [&] {
    state_.clear_stop();
    detail::StateWriter::clear_all(state_);
    detail::StateWriter::set_epoch_cut_short(state_, false);
    prepare_run();
    const auto limit =
        run_options_.limit_predict_batches().batches_per_pass(data.size(), "limit_predict_batches");
    engine_->step.reset();
    engine_->events.run_action(
        [&] { engine_->prediction.run(data, limit, keep ? &predictions : nullptr); },
        process_group());
  });
  return predictions;
}

// ---- checkpoints --------------------------------------------------------------------------------

std::string Trainer::checkpoint_bytes(const fs::path& path) {
  return torchbus::capture_checkpoint(engine_->checkpoint(), path, TensorCapture::References)
      .bytes();
}

CheckpointSnapshot Trainer::capture_checkpoint(const fs::path& path) {
  return torchbus::capture_checkpoint(engine_->checkpoint(), path, TensorCapture::Copies);
}

void Trainer::save_checkpoint(const fs::path& path) {
  write_checkpoint_file(path, checkpoint_bytes(path));
}

void Trainer::resume_from(fs::path path) {
  TORCHBUS_CHECK(fs::exists(path), CheckpointError, "cannot resume from ", path.string(),
                 ": no such file or directory");
  resume_ = ResumeRequest{std::move(path), /*by_default=*/false};
}

void Trainer::resume_by_default_from(fs::path path) {
  resume_from(std::move(path));
  resume_->by_default = true;
}

void Trainer::load_checkpoint(const fs::path& path) {
  ensure_idle();
  torchbus::load_checkpoint(engine_->checkpoint(), path);
}

// ---- steps --------------------------------------------------------------------------------------

at::Tensor Trainer::forward_and_loss(Batch& batch) {
  TORCHBUS_CHECK(static_cast<bool>(loss_), ConfigError,
                 "a trainer of optimizer phases has no forward and loss of its own to evaluate "
                 "with; give it an eval step (set_eval_step) or override eval_step");
  Output output;
  try {
    output = forward_(batch);
  } catch (const c10::Error& error) {
    throw DataError(detail::concat("the model's forward failed on ", describe_fields(batch), ": ",
                                   detail::first_line(error)));
  }
  at::Tensor loss;
  try {
    loss = loss_(output, batch);
  } catch (const c10::Error& error) {
    const auto expected = batch.structured()
                              ? " (expected a batch whose fields fit the model's output)"
                              : " (expected a target that fits the model's output)";
    throw DataError(
        detail::concat("the loss failed on ", describe_output(output),
                       batch.structured() || !batch.target.defined()
                           ? " and " + describe_fields(batch)
                           : detail::concat(" and target of shape ", batch.target.sizes()),
                       ": ", detail::first_line(error), expected));
  }
  for (const auto& [name, tensor] : output.named()) state_.tensors.set(name, tensor);
  state_.tensors.set(tensor_names::kOutput, output.main());
  state_.tensors.set(tensor_names::kTarget, batch.target);
  state_.tensors.set(tensor_names::kLoss, loss);
  state_.set_batch_output(output.main());
  return loss;
}

at::Tensor Trainer::forward(const at::Tensor& input) {
  return forward(Batch(input, at::Tensor())).main();
}

Output Trainer::forward(const Batch& batch) {
  TORCHBUS_CHECK(static_cast<bool>(forward_), ConfigError,
                 "a trainer of optimizer phases has no forward of its own; call the forward of "
                 "the model you mean");
  return forward_(batch);
}

at::Tensor Trainer::compute_loss(const at::Tensor& output, const at::Tensor& target) {
  return compute_loss(Output(output), Batch(at::Tensor(), target));
}

at::Tensor Trainer::compute_loss(const Output& output, const Batch& batch) {
  TORCHBUS_CHECK(static_cast<bool>(loss_), ConfigError,
                 "a trainer of optimizer phases has no loss function of its own; compute the "
                 "loss in the phase's step function");
  return loss_(output, batch);
}

at::Tensor Trainer::train_step(Batch& batch) {
  return phases_[engine_->serving_phase].step()(*this, batch);
}

at::Tensor Trainer::own_step(Batch& batch) {
  return train_step_ ? train_step_(*this, batch) : forward_and_loss(batch);
}

at::Tensor Trainer::eval_step(Batch& batch) {
  return eval_step_ ? eval_step_(*this, batch) : forward_and_loss(batch);
}

Output Trainer::predict_step(Batch& batch) {
  if (predict_step_) return predict_step_(*this, batch);
  TORCHBUS_CHECK(static_cast<bool>(forward_), ConfigError,
                 "a trainer of optimizer phases has no forward of its own to predict with; give it "
                 "a predict step (set_predict_step) or override predict_step");
  try {
    return forward_(batch);
  } catch (const c10::Error& error) {
    throw DataError(detail::concat("the model's forward failed on ", describe_fields(batch), ": ",
                                   detail::first_line(error)));
  }
}

void Trainer::optimizer_step() {
  phases_[engine_->serving_phase].optimizer()->step();
}

}  // namespace torchbus
