#pragma once

/// \file
/// GradientStats: the global (and per-parameter) gradient norm, as tensors and metrics.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/event.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace torchbus {

/// What GradientStats computes, e.g. `GradientStatsOptions().step_freq(10).per_parameter(true)`.
struct GradientStatsOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "gradient_stats";
  /// Compute every n-th optimizer step (>= 1).
  TORCH_ARG(std::int64_t, step_freq) = 1;
  /// Order of the norm (> 0, or infinity for the largest absolute element).
  TORCH_ARG(double, norm_type) = 2.0;
  /// Also the norm of each parameter's gradient, as "<metric>/<parameter name>".
  TORCH_ARG(bool, per_parameter) = false;
  /// Name of the global norm in the tensor store and the metric history.
  TORCH_ARG(std::string, metric) = "grad_norm";
  /// Event::BeforeOptimizerStep (gradients before clipping) or Event::AfterOptimizerStep (the
  /// gradients the optimizer applied, after TrainerOptions' clipping).
  TORCH_ARG(Event, event) = Event::BeforeOptimizerStep;
  /// Also record the norms in the metric history (as tensors: no sync until they are read).
  TORCH_ARG(bool, record) = true;
  /// With several optimizers (docs/trainer.md, "Several optimizers"): the optimizer phase whose
  /// gradients it measures, by name, at that phase's optimizer event; empty: the first phase.
  TORCH_ARG(std::string, phase) = "";

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Computes gradient norms every `step_freq` optimizer steps and stores them as one-element
/// tensors with Scope::Step ("grad_norm", "grad_norm/<parameter>"), recorded in the metric history
/// at the step's number (state.step + 1, as metric_names::kTrainLoss). Never syncs. Parameters
/// without a gradient are left out. Role::Metrics.
class GradientStats : public Callback {
 public:
  /// A GradientStats named by its options; throws ConfigError for invalid options.
  explicit GradientStats(GradientStatsOptions options = {});

  /// The options it was built with.
  const GradientStatsOptions& options() const noexcept { return options_; }

  /// Caches the model's named parameters.
  void on_action_start(State& state) override;
  /// Computes the norms (when `event` is BeforeOptimizerStep).
  void on_before_optimizer_step(State& state) override;
  /// Computes the norms (when `event` is AfterOptimizerStep).
  void on_after_optimizer_step(State& state) override;

 private:
  void compute(State& state);

  GradientStatsOptions options_;
  std::vector<at::Tensor> parameters_;
  std::vector<std::string> parameter_names_;  // "<metric>/<parameter name>"
  std::vector<at::Tensor> norms_;             // reused per step
};

}  // namespace torchbus
