#pragma once

/// \file
/// Trainer: the training and evaluation loop that publishes the event protocol.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torchbus/batch_source.hpp>
#include <torchbus/bus.hpp>
#include <torchbus/checkpoint_snapshot.hpp>
#include <torchbus/module_of.hpp>
#include <torchbus/optimizer_phase.hpp>
#include <torchbus/output.hpp>
#include <torchbus/trainer_options.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace torchbus {

class LossScaler;
class ProcessGroup;

/// Runs `fit`, `evaluate`, `test` and `predict` on a LibTorch model and optimizer, publishing every
/// event of docs/events.md on its bus. Subclass it to override the train, eval or optimizer step;
/// or pass step functions without subclassing.
class Trainer {
 public:
  /// Computes the loss from the model's output and the batch's target.
  using LossFunction =
      std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;
  /// Runs the model on a batch's inputs.
  using Forward = std::function<at::Tensor(const at::Tensor& input)>;
  /// Runs the model on a whole batch (any of its fields): a tensor, or named tensors.
  using BatchForward = std::function<Output(const Batch& batch)>;
  /// Computes the loss from the model's output (every tensor of it) and the whole batch.
  using BatchLoss = std::function<at::Tensor(const Output& output, const Batch& batch)>;
  /// A custom train or eval step: returns the batch's scalar loss.
  using StepFunction = std::function<at::Tensor(Trainer& trainer, Batch& batch)>;
  /// A custom predict step: returns the batch's predictions.
  using PredictFunction = std::function<Output(Trainer& trainer, Batch& batch)>;

  /// Trains `model` (a ModuleHolder such as `torch::nn::Sequential`, or a shared_ptr to a module
  /// with `forward(Tensor)`) with `optimizer`, which must outlive the trainer.
  template <typename Model>
  Trainer(Model model, torch::optim::Optimizer& optimizer, LossFunction loss,
          TrainerOptions options = {})
      : Trainer(detail::module_of(model),
                Forward([model](const at::Tensor& input) mutable { return model->forward(input); }),
                optimizer, std::move(loss), std::move(options)) {}

  /// Trains `model` (as above) with a loss of the output and the whole batch; the forward runs on
  /// the batch's `data`.
  template <typename Model>
  Trainer(Model model, torch::optim::Optimizer& optimizer, BatchLoss loss,
          TrainerOptions options = {})
      : Trainer(detail::module_of(model),
                BatchForward([model](const Batch& batch) mutable -> Output {
                  return model->forward(batch.data);
                }),
                optimizer, std::move(loss), std::move(options)) {}

  /// Trains `module`, whose forward pass is `forward`.
  Trainer(std::shared_ptr<torch::nn::Module> module, Forward forward,
          torch::optim::Optimizer& optimizer, LossFunction loss, TrainerOptions options = {});
  /// Trains `module`, whose forward pass `forward` reads the batch's fields and returns a tensor
  /// or named tensors, with `loss` of that output and the batch (docs/any-model.md).
  Trainer(std::shared_ptr<torch::nn::Module> module, BatchForward forward,
          torch::optim::Optimizer& optimizer, BatchLoss loss, TrainerOptions options = {});
  /// Trains `module` (every parameter of a phase's optimizer must be one of its, or of the
  /// phase's own model: checkpoints hold their tensors) with several optimizers: per batch, each
  /// of `phases` in order computes its loss with its step function and updates its optimizer's
  /// parameters (docs/trainer.md, "Several optimizers"). Without a forward and loss of its own,
  /// such a trainer evaluates with the step set by `set_eval_step` (or an `eval_step` override).
  Trainer(std::shared_ptr<torch::nn::Module> module, std::vector<OptimizerPhase> phases,
          TrainerOptions options = {});
  /// Trains with several optimizers, each of `phases` bringing its model (OptimizerPhase::model;
  /// docs/trainer.md, "A model per phase"), e.g. a GAN's generator and discriminator.
  explicit Trainer(std::vector<OptimizerPhase> phases, TrainerOptions options = {});
  virtual ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// The bus every event of this trainer is published on, for subscribing (only the trainer
  /// publishes built-in events).
  EventBus& bus() noexcept { return publisher_.bus(); }
  /// The state passed to every subscriber.
  State& state() noexcept { return state_; }
  /// The options the trainer was built with.
  const TrainerOptions& options() const noexcept { return options_; }
  /// The model being trained: the one it was built with; when optimizer phases have models of
  /// their own, one module holding it as "model" and each phase's model under the phase's name.
  torch::nn::Module& module() noexcept { return *module_; }
  /// The optimizer (with several: the first phase's).
  torch::optim::Optimizer& optimizer() noexcept { return optimizer_; }
  /// The optimizer phases (for a trainer of one optimizer: one, unnamed, whose step function is
  /// the trainer's: the custom train step, else forward and loss).
  const std::vector<OptimizerPhase>& optimizer_phases() const noexcept { return phases_; }

  /// Adds a class callback: calls its `on_added(*this)`, then connects the hooks `T` overrides
  /// (see `EventBus::add`).
  template <typename T>
  CallbackConnection add(std::shared_ptr<T> callback) {
    prepare_to_add(callback.get());
    return bus().add(std::move(callback));
  }
  /// Disconnects the callback called `name` and removes it (see `EventBus::remove`).
  void remove(std::string_view name) { bus().remove(name); }
  /// Connects a subscription made by a decorator helper.
  Connection add(Subscription subscription) { return bus().add(std::move(subscription)); }
  /// Subscribes `slot` to `events` (one event, or several: `Event::StepEnd | Event::EpochEnd`).
  Connection on(EventList events, EventBus::Slot slot, Placement placement = {}) {
    return bus().on(events, std::move(slot), std::move(placement));
  }
  /// Subscribes `slot` to `events` through `filter`.
  Connection on(EventList events, Filter filter, EventBus::Slot slot, Placement placement = {}) {
    return bus().on(events, std::move(filter), std::move(slot), std::move(placement));
  }
  /// The subscribers of `event` in the order they run (see `EventBus::describe`).
  std::string describe(Event event) const { return publisher_.bus().describe(event); }

  /// Trains data-parallel across the ranks of `group` (see docs/distributed.md): rank 0's
  /// parameters are broadcast at the start of fit(), gradients averaged once per step, stop
  /// decisions agreed at step boundaries. Null goes back to one process. Not during a run.
  Trainer& set_process_group(std::shared_ptr<ProcessGroup> group);
  /// The process group, or null.
  ProcessGroup* process_group() const noexcept;
  /// The loss scaler of a Precision::FP16Mixed fit (null under other precisions).
  const LossScaler* loss_scaler() const noexcept;

  /// Replaces the default train step (forward, loss) without subclassing (a trainer of optimizer
  /// phases has theirs: ConfigError).
  Trainer& set_train_step(StepFunction step);
  /// Replaces the default eval step without subclassing.
  Trainer& set_eval_step(StepFunction step);
  /// Replaces the default predict step (the forward) without subclassing.
  Trainer& set_predict_step(PredictFunction step);

  /// Trains on `train` (a torch::data loader or any range of batches).
  template <typename TrainData>
  void fit(TrainData&& train) {
    RangeSource<std::remove_reference_t<TrainData>> source(train);
    fit_sources(source, nullptr);
  }
  /// Trains on `train`, validating on `validation` as scheduled by the options.
  template <typename TrainData, typename ValidationData>
  void fit(TrainData&& train, ValidationData&& validation) {
    RangeSource<std::remove_reference_t<TrainData>> train_source(train);
    RangeSource<std::remove_reference_t<ValidationData>> validation_source(validation);
    fit_sources(train_source, &validation_source);
  }
  /// Trains on `train`, validating on `validation` when it is not null.
  void fit_sources(BatchSource& train, BatchSource* validation);

  /// Evaluates on `data`; returns the mean loss per sample (also recorded as "val_loss").
  template <typename Data>
  double evaluate(Data&& data) {
    RangeSource<std::remove_reference_t<Data>> source(data);
    return evaluate_source(source);
  }
  /// Evaluates on `data`; returns the mean loss per sample (also recorded as "val_loss"), or NaN
  /// when every batch was cancelled.
  double evaluate_source(BatchSource& data);

  /// Tests on `data`: an evaluation (same events, the model in eval mode, `limit_test_batches`)
  /// whose mean loss per sample is recorded as "test_loss" and whose metrics take the `test_`
  /// prefix (State::action is Action::Test). Returns the mean loss.
  template <typename Data>
  double test(Data&& data) {
    RangeSource<std::remove_reference_t<Data>> source(data);
    return test_source(source);
  }
  /// Tests on `data` (see `test`); NaN when every batch was cancelled.
  double test_source(BatchSource& data);

  /// Predicts on `data`: the predict step of every batch under inference mode, between
  /// PredictStart and PredictEnd (docs/events.md). Returns each batch's predictions in order.
  template <typename Data>
  std::vector<Output> predict(Data&& data) {
    RangeSource<std::remove_reference_t<Data>> source(data);
    return predict_source(source, /*keep=*/true);
  }
  /// Predicts on `data`; returns each batch's predictions when `keep` (else nothing: subscribers
  /// of PredictBatchEnd, such as PredictionWriter, take them as they come).
  std::vector<Output> predict_source(BatchSource& data, bool keep = true);

  /// Writes a checkpoint of the run to `path` atomically (see docs/checkpointing.md). Valid
  /// between runs and at step boundaries: not between StepStart and the end of the optimizer step.
  /// Calls every callback's `on_save_checkpoint` first.
  void save_checkpoint(const std::filesystem::path& path);
  /// The framed bytes of a checkpoint of the run now, which the caller writes to `path`
  /// (CheckpointWriter); `path` is what `on_save_checkpoint` is told, and may be empty.
  std::string checkpoint_bytes(const std::filesystem::path& path = {});
  /// A checkpoint of the run now, as copies that later steps do not change: its bytes can be made
  /// later, on another thread (ModelCheckpoint's background writes). Valid where save_checkpoint
  /// is; calls every callback's `on_save_checkpoint` first.
  CheckpointSnapshot capture_checkpoint(const std::filesystem::path& path = {});
  /// Makes the next fit() continue from `path`: a checkpoint file, or a directory whose newest
  /// valid checkpoint is used.
  void resume_from(std::filesystem::path path);
  /// The resume a callback asks for on the user's behalf (ModelCheckpoint's `resume(true)`): as
  /// resume_from, except that a fast_dev_run, which checks the loop from a fresh start, ignores it
  /// (an explicit resume_from is refused there).
  void resume_by_default_from(std::filesystem::path path);
  /// Restores the checkpoint at `path` now, the run's end included (a run that had finished
  /// trains nothing more). Everything is validated before anything changes; a mismatch, or a file
  /// that cannot be read for any reason, throws CheckpointError naming the file and what is wrong.
  /// Then calls every callback's `on_load_checkpoint`.
  void load_checkpoint(const std::filesystem::path& path);

  /// Runs the model's forward pass on a batch whose `data` is `input`: its main output (a
  /// trainer of optimizer phases has none: ConfigError).
  at::Tensor forward(const at::Tensor& input);
  /// Runs the model's forward pass on `batch`.
  Output forward(const Batch& batch);
  /// Applies the loss function to `output` and a batch whose `target` is `target` (a trainer of
  /// optimizer phases has none: ConfigError).
  at::Tensor compute_loss(const at::Tensor& output, const at::Tensor& target);
  /// Applies the loss function to `output` and `batch`.
  at::Tensor compute_loss(const Output& output, const Batch& batch);

 protected:
  /// One training batch: returns its scalar loss. The default runs the custom train step if one
  /// was set, else forward and loss, storing "output", "target" and "loss" in the tensor store;
  /// with optimizer phases, the step function of `state().optimizer_phase`.
  virtual at::Tensor train_step(Batch& batch);
  /// One evaluation batch (under no_grad): returns its scalar loss, as `train_step`.
  virtual at::Tensor eval_step(Batch& batch);
  /// One predict batch (under inference mode): returns its predictions. The default runs the
  /// custom predict step if one was set, else the forward.
  virtual Output predict_step(Batch& batch);
  /// Applies the accumulated gradients: the default calls `optimizer().step()` (with optimizer
  /// phases, the step of `state().optimizer_phase`'s optimizer).
  virtual void optimizer_step();

 private:
  /// What the trainer is a façade over: the loops and the step that run an action (framework/src:
  /// FitLoop, EvaluationLoop, OptimizationStep, DistributedSync, EventFlow; docs/architecture.md),
  /// and the trainer's overridable steps as they call them.
  struct Engine;

  void assemble();  // validates the options, builds the parts, adds registered subscriptions
  at::Tensor forward_and_loss(Batch& batch);
  at::Tensor own_step(Batch& batch);  // a trainer of one optimizer's: custom, else forward_and_loss
  void prepare_run();  // the current action's options, device, model and state's references
  void prepare_to_add(Callback* callback);  // checks it and calls its on_added
  void set_action(Action action) noexcept;  // and the state's trainer context
  // Runs `body` as `action` once the trainer is idle; the trainer is idle again when it returns.
  void run_as(Action action, const std::function<void()>& body);
  void ensure_idle() const;
  double evaluate_as(Action action, BatchSource& data);  // evaluate() and test()

  std::shared_ptr<torch::nn::Module> module_;
  BatchForward forward_;
  std::vector<OptimizerPhase> phases_;  // one, unnamed (the optimizer), unless built with several
  torch::optim::Optimizer& optimizer_;  // the first phase's
  BatchLoss loss_;
  StepFunction train_step_;
  StepFunction eval_step_;
  PredictFunction predict_step_;
  TrainerOptions options_;      // as configured
  TrainerOptions run_options_;  // the current action's: options_ with fast_dev_run's overrides
  EventPublisher publisher_;
  State state_;
  std::unique_ptr<Engine> engine_;
  /// A resume the next fit() applies.
  struct ResumeRequest {
    std::filesystem::path path;
    bool by_default = false;  ///< asked for by a callback: a fast_dev_run ignores it
  };
  std::optional<ResumeRequest> resume_;
};

}  // namespace torchbus
