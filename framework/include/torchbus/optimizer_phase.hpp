#pragma once

/// \file
/// OptimizerPhase: one optimizer of a trainer with several (a GAN's discriminator and generator
/// steps, an actor-critic's two updates), with the step function computing its loss.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/batch_source.hpp>
#include <torchbus/module_of.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace torch::optim {
class Optimizer;
}

namespace torchbus {

class Trainer;

/// One optimization phase (docs/trainer.md, "Several optimizers"): per batch, the phases run in
/// order, each its step function, the backward of its loss into its optimizer's parameters only
/// and, at the end of its accumulation window, its optimizer step; a later phase sees the earlier
/// ones' updated weights and what they left in `State::tensors`.
/// E.g. `OptimizerPhase("generator", generator_adam, generator_loss).every_n_batches(5)`.
struct OptimizerPhase {
  /// The loss of the phase for one batch (one element), computed by the phase's step function.
  using StepFunction = std::function<at::Tensor(Trainer& trainer, Batch& batch)>;

  /// A phase called `name` (unique, no line break) that trains the parameters of `optimizer`
  /// (which must outlive the trainer) on the loss `step` returns.
  OptimizerPhase(std::string name, torch::optim::Optimizer& optimizer, StepFunction step)
      : optimizer_(&optimizer), name_(std::move(name)), step_(std::move(step)) {}

  /// The optimizer of the phase; its parameters are the phase's.
  torch::optim::Optimizer* optimizer() const noexcept { return optimizer_; }

  /// Gives the phase a model of its own (a ModuleHolder such as `torch::nn::Sequential`, or a
  /// shared_ptr to a module): the trainer trains, checkpoints and moves it under the phase's name
  /// (docs/trainer.md, "A model per phase").
  template <typename Model>
  OptimizerPhase& model(const Model& model) {
    model_ = detail::module_of(model);
    has_model_ = true;
    return *this;
  }
  /// The phase's own model, or null when it has none.
  const std::shared_ptr<torch::nn::Module>& model() const noexcept { return model_; }
  /// Whether `model(...)` was called (with a null model too: the trainer refuses that).
  bool has_model() const noexcept { return has_model_; }

 private:
  torch::optim::Optimizer* optimizer_;
  std::shared_ptr<torch::nn::Module> model_;
  bool has_model_ = false;

 public:
  /// The phase's name, in State::optimizer_phase_name and its loss metric (`train_loss/<name>`).
  TORCH_ARG(std::string, name);
  /// Computes the phase's loss for a batch.
  TORCH_ARG(StepFunction, step);
  /// Runs on every n-th batch only (the batches whose index since the run began, plus one, is a
  /// multiple of n): WGAN's "n critic steps per generator step" is `every_n_batches(n)` on the
  /// generator's phase.
  TORCH_ARG(std::int64_t, every_n_batches) = 1;
  /// Clips the phase's global gradient norm to this value (none: TrainerOptions's).
  TORCH_ARG(std::optional<double>, gradient_clip_norm) = std::nullopt;
  /// Clips the phase's gradient elements to [-value, value] (none: TrainerOptions's).
  TORCH_ARG(std::optional<double>, gradient_clip_value) = std::nullopt;
};

}  // namespace torchbus
