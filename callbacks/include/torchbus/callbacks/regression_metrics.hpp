#pragma once

/// \file
/// RegressionMetrics: MSE, MAE, RMSE, R² and explained variance of each evaluation, from sums
/// accumulated on the device.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/tensor_names.hpp>

#include <string>

namespace torchbus {

/// What RegressionMetrics reads and records, e.g.
/// `RegressionMetricsOptions().output("prediction").target("targets")`.
struct RegressionMetricsOptions {
  /// The callback's name, unique in a trainer.
  TORCH_ARG(std::string, name) = "regression_metrics";
  /// Prefix of every recorded metric of a validation: "<prefix>mse", "<prefix>mae", ...
  TORCH_ARG(std::string, prefix) = "val_";
  /// Prefix of every recorded metric of a test (Trainer::test): "test_mse", ...
  TORCH_ARG(std::string, test_prefix) = "test_";
  /// Tensor of the predictions, [N] or [N, K] (K targets): by default State::batch_output(), else
  /// a named output or a batch field (find_step_tensor).
  TORCH_ARG(std::string, output) = std::string(tensor_names::kOutput);
  /// Tensor of the true values, with as many elements as the output: by default
  /// State::batch_target().
  TORCH_ARG(std::string, target) = std::string(tensor_names::kTarget);

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Accumulates, per target column, the count, the sums of the errors, their squares and absolute
/// values, and of the true values and their squares (shifted by the first batch's means, so that
/// spreads survive large means), in float64 on the batches' device (no sync per batch; the ranks'
/// statistics merged at EvalEnd). At EvalEnd it records, as scikit-learn's
/// `mean_squared_error`, `mean_absolute_error`, `r2_score` and `explained_variance_score` with
/// `multioutput="uniform_average"` compute them: "<prefix>mse", "<prefix>mae", "<prefix>rmse"
/// (the mean over the columns of each column's root MSE), "<prefix>r2" and
/// "<prefix>explained_variance" (a column of constant true values scores 1 when predicted
/// exactly, else 0, as scikit-learn's force_finite). Cancelled batches are skipped. Role::Metrics.
class RegressionMetrics : public Callback {
 public:
  /// A RegressionMetrics named by its options; throws ConfigError for invalid options.
  explicit RegressionMetrics(RegressionMetricsOptions options = {});

  /// The options it was built with.
  const RegressionMetricsOptions& options() const noexcept { return options_; }

  /// Starts new sums.
  void on_eval_start(State& state) override;
  /// Adds the batch's errors to the sums, without a sync.
  void on_eval_batch_end(State& state) override;
  /// Reads the sums (one sync) and records the metrics.
  void on_eval_end(State& state) override;

 private:
  RegressionMetricsOptions options_;
  at::Tensor sums_;   // [7, K] float64 per column: count, errors and true values shifted (Sum)
  at::Tensor shift_;  // [2, K]: the first batch's mean error and mean true value per column
};

}  // namespace torchbus
