#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torchbus/callbacks/gradient_stats.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <cmath>

namespace torchbus {

void GradientStatsOptions::validate() const {
  TORCHBUS_CHECK(step_freq() >= 1, ConfigError, "GradientStats: step_freq must be >= 1, got ",
                 step_freq());
  TORCHBUS_CHECK(norm_type() > 0.0, ConfigError,
                 "GradientStats: norm_type must be > 0 (or infinity), got ", norm_type());
  TORCHBUS_CHECK(!metric().empty(), ConfigError,
                 "GradientStats: metric is empty; expected a tensor and metric name such as "
                 "\"grad_norm\"");
  TORCHBUS_CHECK(event() == Event::BeforeOptimizerStep || event() == Event::AfterOptimizerStep,
                 ConfigError,
                 "GradientStats: event must be BeforeOptimizerStep or AfterOptimizerStep, got ",
                 to_string(event()));
}

GradientStats::GradientStats(GradientStatsOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Metrics);
  options_.validate();
}

void GradientStats::on_action_start(State& state) {
  parameters_.clear();
  parameter_names_.clear();
  if (state.model == nullptr) return;
  for (const auto& item : state.model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    parameters_.push_back(item.value());
    parameter_names_.push_back(options_.metric() + "/" + item.key());
  }
  norms_.reserve(parameters_.size());
}

void GradientStats::on_before_optimizer_step(State& state) {
  if (options_.event() == Event::BeforeOptimizerStep) compute(state);
}

void GradientStats::on_after_optimizer_step(State& state) {
  if (options_.event() == Event::AfterOptimizerStep) compute(state);
}

void GradientStats::compute(State& state) {
  if (!names_optimizer_phase(state, options_.phase())) return;
  const auto step = state.step + 1;  // numbered like metric_names::kTrainLoss: this step included
  if (step % options_.step_freq() != 0) return;
  const double p = options_.norm_type();
  norms_.clear();
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const auto& grad = parameters_[i].grad();
    if (!grad.defined()) continue;
    auto norm = grad.detach().norm(p);
    if (options_.per_parameter()) {
      state.tensors.set(parameter_names_[i], norm, Scope::Step);
      if (options_.record()) state.metrics.record(parameter_names_[i], step, state.epoch, norm);
    }
    norms_.push_back(std::move(norm));
  }
  if (norms_.empty()) return;
  const auto stacked = at::stack(norms_);
  auto total = std::isinf(p) ? stacked.max() : stacked.norm(p);
  state.tensors.set(options_.metric(), total, Scope::Step);
  if (options_.record())
    state.metrics.record(options_.metric(), step, state.epoch, std::move(total));
}

}  // namespace torchbus
