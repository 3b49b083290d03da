#include <ATen/ATen.h>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/regression_metrics.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <cmath>
#include <string>
#include <utility>

namespace torchbus {
namespace {

/// Rows of `sums_`: the errors and the true values are summed shifted by the first batch's column
/// means (`shift_`), so that their spreads are not lost to cancellation when a mean is large.
enum Sum : std::int64_t {
  kCount,
  kShiftedError,
  kShiftedSquaredError,
  kAbsoluteError,
  kSquaredError,
  kShiftedTrue,
  kShiftedSquaredTrue,
  kSums
};
/// Rows of a rank's statistics: count, mean and sum of squared deviations of the errors and of the
/// true values, and the sums of squared and absolute errors.
enum Statistic : std::int64_t {
  kN,
  kMeanError,
  kErrorDeviations,
  kMeanTrue,
  kTrueDeviations,
  kSse,
  kSae,
  kStatistics
};

/// A rank's statistics [kStatistics, K] from its shifted sums [kSums, K] and shifts [2, K].
at::Tensor statistics_of(const at::Tensor& sums, const at::Tensor& shift) {
  const auto n = sums[kCount];
  const auto mean_error = sums[kShiftedError] / n;
  const auto mean_true = sums[kShiftedTrue] / n;
  return at::stack({n, shift[0] + mean_error, sums[kShiftedSquaredError] - n * mean_error.square(),
                    shift[1] + mean_true, sums[kShiftedSquaredTrue] - n * mean_true.square(),
                    sums[kSquaredError], sums[kAbsoluteError]});
}

/// The statistics of every rank's together ([W, kStatistics, K] to [kStatistics, K]), as Chan's
/// pairwise update merges means and sums of squared deviations; ranks without samples add nothing.
at::Tensor merged(const at::Tensor& ranks) {
  const auto n = ranks.select(1, kN);
  const auto total = n.sum(0);
  const auto merge = [&](Statistic mean, Statistic deviations) {
    const auto weights = n / total;
    const auto grand = (ranks.select(1, mean).nan_to_num(0.0) * weights).sum(0);
    const auto spread = ranks.select(1, deviations).nan_to_num(0.0).sum(0) +
                        (n * (ranks.select(1, mean).nan_to_num(0.0) - grand).square()).sum(0);
    return std::pair(grand, spread);
  };
  const auto [mean_error, error_deviations] = merge(kMeanError, kErrorDeviations);
  const auto [mean_true, true_deviations] = merge(kMeanTrue, kTrueDeviations);
  return at::stack({total, mean_error, error_deviations, mean_true, true_deviations,
                    ranks.select(1, kSse).sum(0), ranks.select(1, kSae).sum(0)});
}

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
  if (!sums_.defined()) {
    shift_ = at::stack({error.mean(0), truth.mean(0)});
  } else {
    TORCHBUS_CHECK(sums_.size(1) == predicted.size(1), DataError, "RegressionMetrics: output '",
                   options_.output(), "' has ", predicted.size(1), " columns in evaluation batch ",
                   state.eval_batch, ", ", sums_.size(1),
                   " before; expected as many in every batch");
  }
  const auto shifted_error = error - shift_[0];
  const auto shifted_true = truth - shift_[1];
  const auto sums =
      at::stack({at::full({predicted.size(1)}, static_cast<double>(rows), predicted.options()),
                 shifted_error.sum(0), shifted_error.square().sum(0), error.abs().sum(0),
                 error.square().sum(0), shifted_true.sum(0), shifted_true.square().sum(0)});
  sums_ = sums_.defined() ? sums_.add_(sums) : sums;
}

void RegressionMetrics::on_eval_end(State& state) {
  at::Tensor statistics;  // [kStatistics, K] of every rank's samples
  auto* group = state.process_group;
  if (group != nullptr && group->world_size() > 1) {
    if (state.error) return;  // the other ranks are not here while a failure unwinds
    // Each rank's statistics of its shard; a rank without a batch gives zeros of the columns'
    // shape.
    auto columns = at::tensor({sums_.defined() ? sums_.size(1) : 0}, at::kLong);
    group->all_reduce(columns, ReduceOp::Max);
    const auto width = columns.item<std::int64_t>();
    if (width == 0) return;  // every batch of every rank was cancelled
    const auto own = sums_.defined() ? statistics_of(sums_, shift_).cpu()
                                     : at::zeros({kStatistics, width}, at::kDouble);
    statistics = merged(group->all_gather(own).view({-1, kStatistics, width}));
  } else {
    if (!sums_.defined()) return;                     // every batch was cancelled
    statistics = statistics_of(sums_, shift_).cpu();  // the one sync
  }
  sums_.reset();
  statistics = statistics.contiguous();
  const auto columns = statistics.size(1);
  const auto at = [&](Statistic row, std::int64_t column) {
    return statistics[row][column].item<double>();
  };
  double mse = 0, mae = 0, rmse = 0, r2 = 0, explained = 0;
  for (std::int64_t k = 0; k < columns; ++k) {
    const double n = at(kN, k);
    const double squared = at(kSse, k);
    const double total = at(kTrueDeviations, k);  // Σ(y - ȳ)²
    mse += squared / n;
    mae += at(kSae, k) / n;
    rmse += std::sqrt(squared / n);
    r2 += one_minus_ratio(squared, total);
    explained += one_minus_ratio(at(kErrorDeviations, k), total);
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
