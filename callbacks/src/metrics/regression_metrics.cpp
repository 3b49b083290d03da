#include <ATen/ATen.h>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/regression_metrics.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <cmath>
#include <string>

namespace torchbus {
namespace {

/// Rows of `sums_`.
enum Sum : std::int64_t { kCount, kError, kSquaredError, kAbsoluteError, kTrue, kSquaredTrue };

/// 1 - residual / total, as scikit-learn's force_finite: a constant column (total 0) scores 1
/// when predicted exactly (residual 0), else 0.
double one_minus_ratio(double residual, double total) {
  if (total > 0.0) return 1.0 - residual / total;
  return residual == 0.0 ? 1.0 : 0.0;
}

}  // namespace

void RegressionMetricsOptions::validate() const {
  TORCHBUS_CHECK(!name().empty(), ConfigError, "RegressionMetrics: name is empty");
  TORCHBUS_CHECK(!output().empty() && !target().empty(), ConfigError,
                 "RegressionMetrics: the output and target tensor names must not be empty");
}

RegressionMetrics::RegressionMetrics(RegressionMetricsOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Metrics);
  options_.validate();
}

void RegressionMetrics::on_eval_start(State& /*state*/) {
  sums_.reset();
}

void RegressionMetrics::on_eval_batch_end(State& state) {
  if (state.cancelled) return;
  const auto* output = find_step_tensor(state, options_.output());
  const auto* target = find_step_tensor(state, options_.target());
  TORCHBUS_CHECK(output != nullptr && target != nullptr, ConfigError,
                 "RegressionMetrics: needs tensors '", options_.output(), "' and '",
                 options_.target(), "' at EvalBatchEnd (evaluation batch ", state.eval_batch,
                 "); present: ", detail::join_or_none(step_tensor_names(state)));
  TORCHBUS_CHECK(output->dim() >= 1 && output->numel() == target->numel(), DataError,
                 "RegressionMetrics: output '", options_.output(), "' of shape ", output->sizes(),
                 " and target '", options_.target(), "' of shape ", target->sizes(),
                 " do not match; expected [N] or [N, K] predictions of as many true values");
  const auto rows = output->size(0);
  const auto predicted = output->detach().reshape({rows, -1}).to(at::kDouble);
  const auto truth = target->detach().reshape({rows, -1}).to(at::kDouble);
  const auto error = predicted - truth;
  const auto sums = at::stack(
      {at::full({predicted.size(1)}, static_cast<double>(rows), predicted.options()), error.sum(0),
       error.square().sum(0), error.abs().sum(0), truth.sum(0), truth.square().sum(0)});
  TORCHBUS_CHECK(!sums_.defined() || sums_.sizes() == sums.sizes(), DataError,
                 "RegressionMetrics: output '", options_.output(), "' has ", sums.size(1),
                 " columns in evaluation batch ", state.eval_batch, ", ", sums_.size(1),
                 " before; expected as many in every batch");
  sums_ = sums_.defined() ? sums_.add_(sums) : sums;
}

void RegressionMetrics::on_eval_end(State& state) {
  auto* group = state.process_group;
  if (group != nullptr && group->world_size() > 1) {
    if (state.error) return;  // the other ranks are not here while a failure unwinds
    // Each rank summed its shard; a rank without a batch adds zeros of the columns' shape.
    auto columns = at::tensor({sums_.defined() ? sums_.size(1) : 0}, at::kLong);
    group->all_reduce(columns, ReduceOp::Max);
    if (columns.item<std::int64_t>() == 0) return;
    if (!sums_.defined()) sums_ = at::zeros({6, columns.item<std::int64_t>()}, at::kDouble);
    group->all_reduce(sums_);
  }
  if (!sums_.defined()) return;                // every batch was cancelled
  const auto sums = sums_.cpu().contiguous();  // the one sync
  sums_.reset();
  const auto columns = sums.size(1);
  const auto at = [&](Sum row, std::int64_t column) { return sums[row][column].item<double>(); };
  double mse = 0, mae = 0, rmse = 0, r2 = 0, explained = 0;
  for (std::int64_t k = 0; k < columns; ++k) {
    const double n = at(kCount, k);
    const double squared = at(kSquaredError, k);
    const double mean_true = at(kTrue, k) / n;
    const double total = at(kSquaredTrue, k) - n * mean_true * mean_true;  // Σ(y - ȳ)²
    const double mean_error = at(kError, k) / n;
    mse += squared / n;
    mae += at(kAbsoluteError, k) / n;
    rmse += std::sqrt(squared / n);
    r2 += one_minus_ratio(squared, total);
    explained += one_minus_ratio(squared - n * mean_error * mean_error, total);
  }
  const auto& prefix = state.action == Action::Test ? options_.test_prefix() : options_.prefix();
  const double count = static_cast<double>(columns);
  state.record_metric(prefix + "mse", mse / count);
  state.record_metric(prefix + "mae", mae / count);
  state.record_metric(prefix + "rmse", rmse / count);
  state.record_metric(prefix + "r2", r2 / count);
  state.record_metric(prefix + "explained_variance", explained / count);
}

}  // namespace torchbus
