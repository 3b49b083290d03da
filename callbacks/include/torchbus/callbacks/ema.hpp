#pragma once

/// \file
/// EMA: an exponential moving average of the model's weights, evaluated and kept in place of
/// the raw weights where asked.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/connection.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

/// How EMA averages, e.g. `EMAOptions().decay(0.999).every_n_steps(1)`.
struct EMAOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "ema";
  /// Weight of the old average in each update, in [0, 1): average = decay * average +
  /// (1 - decay) * weights.
  TORCH_ARG(double, decay) = 0.999;
  /// Update the average after every n-th optimizer step (>= 1).
  TORCH_ARG(std::int64_t, every_n_steps) = 1;
  /// Evaluate with the averaged weights (validation inside fit() and evaluate()); the raw
  /// weights are back in the model when the evaluation ends.
  TORCH_ARG(bool, evaluate_with_average) = true;
  /// When fit() ends normally (not by an exception), leave the averaged weights in the model.
  TORCH_ARG(bool, apply_at_end) = true;
  /// Average floating-point buffers (batch-norm statistics) too; other buffers (counters) are
  /// copied. Off: buffers are left to the model.
  TORCH_ARG(bool, average_buffers) = true;
  /// With several optimizers (docs/trainer.md, "Several optimizers"): the optimizer phase whose
  /// weights it averages, by name: that phase's model (parameters and buffers) when it has one,
  /// otherwise the parameters its optimizer trains. Empty: the trainer's whole model.
  TORCH_ARG(std::string, phase) = "";

 public:
  /// Throws ConfigError naming the first option out of range.
  void validate() const;
};

/// Keeps `average = decay * average + (1 - decay) * weights` of every parameter (and floating
/// buffer) after every `every_n_steps`-th optimizer step that updated the weights: one `lerp_` per
/// tensor, no host sync, no allocation. The average starts as a copy of the weights at the first
/// step of the run. It is saved in checkpoints with the step counter, so a resumed run continues
/// the same average bit for bit; the model's own (raw) weights are what ModelCheckpoint saves.
/// Role::WeightAveraging, before Role::Metrics: evaluations see the averaged weights, and the raw
/// ones are back at EvalEnd before any checkpoint (which runs after weight averaging) is taken.
class EMA : public Callback {
 public:
  /// An EMA named by its options; throws ConfigError for invalid options.
  explicit EMA(EMAOptions options = {});

  /// The options it was built with.
  const EMAOptions& options() const noexcept { return options_; }
  /// Updates of the average so far.
  std::int64_t updates() const noexcept { return updates_; }
  /// The averaged tensors: the model's parameters, then its averaged or copied buffers, in
  /// `named_parameters()` / `named_buffers()` order (with a `phase`: its model's, or its
  /// optimizer's parameters in their order; empty before the first step).
  const std::vector<at::Tensor>& average() const noexcept { return average_; }
  /// Copies the averaged weights into `model` (the averaged model, or a copy of it with the same
  /// structure); throws ConfigError when its tensors do not match.
  void copy_to(torch::nn::Module& model) const;

  /// Checks that the trainer has the optimizer phase the options name.
  void on_action_start(State& state) override;
  /// Takes the weights as the first average unless a checkpoint brought one.
  void on_step_start(State& state) override;
  /// Updates the average after every n-th applied optimizer step.
  void on_step_end(State& state) override;
  /// Puts the averaged weights into the model for the evaluation.
  void on_eval_start(State& state) override;
  /// Puts the raw weights back.
  void on_eval_end(State& state) override;
  /// Subscribes the end-of-fit copy (apply_at_end) after every checkpoint and report, so that
  /// the run's last checkpoint holds the raw weights a resume continues from.
  void on_added(Trainer& trainer) override;
  /// Puts the raw weights back if an exception ends an evaluation.
  void on_exception(State& state) override;

  /// Writes the average and the update counter.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  std::string owner() const;  // "EMA '<name>'", for errors
  void start_tracking(const State& state);
  void restore_raw_weights();
  void apply_at_end(const State& state);
  void copy_average_to(const std::vector<at::Tensor>& weights, const char* what) const;

  EMAOptions options_;
  std::vector<at::Tensor> tracked_;  // the model's tensors, in average_'s order
  std::vector<bool> averaged_;       // per tracked tensor: lerp (true) or copy (false)
  std::vector<at::Tensor> average_;  // the averages
  std::vector<at::Tensor> raw_;      // the raw weights while an evaluation uses the averages
  std::int64_t updates_ = 0;
  bool swapped_ = false;
  ScopedConnection apply_at_end_;
};

}  // namespace torchbus
