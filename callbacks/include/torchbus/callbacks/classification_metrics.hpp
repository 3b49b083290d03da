#pragma once

/// \file
/// ClassificationMetrics: accuracy, precision, recall and F1 of each evaluation, from a confusion
/// matrix accumulated on the device.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/tensor_names.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace torchbus {

/// What ClassificationMetrics reads and records, e.g.
/// `ClassificationMetricsOptions().num_classes(10).prefix("test_")`.
struct ClassificationMetricsOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "classification_metrics";
  /// Number of classes C (0: output.size(1) of the first evaluation batch).
  TORCH_ARG(std::int64_t, num_classes) = 0;
  /// Prefix of every recorded metric of a validation: "<prefix>accuracy", "<prefix>precision", ...
  TORCH_ARG(std::string, prefix) = "val_";
  /// Prefix of every recorded metric of a test (Trainer::test): "test_accuracy", ...
  TORCH_ARG(std::string, test_prefix) = "test_";
  /// Also record "<prefix>precision_class_<c>", "<prefix>recall_class_<c>", "<prefix>f1_class_<c>".
  TORCH_ARG(bool, per_class) = true;
  /// Also record "<prefix>precision_micro", "<prefix>recall_micro", "<prefix>f1_micro": from the
  /// counts summed over the classes (scikit-learn's average="micro"; the accuracy, for one label
  /// per sample).
  TORCH_ARG(bool, micro) = false;
  /// Also record "<prefix>precision_weighted", "<prefix>recall_weighted", "<prefix>f1_weighted":
  /// the per-class values weighted by the class's samples (scikit-learn's average="weighted").
  TORCH_ARG(bool, weighted) = false;
  /// Record "<prefix>accuracy_top_<k>" for each k: the fraction of samples whose class is among
  /// the k highest scores (scikit-learn's top_k_accuracy_score); distinct, each in [1, C].
  TORCH_ARG(std::vector<std::int64_t>, top_k) = {};
  /// Tensor holding the model's scores, shape [N, C] or [N, C, d...] (argmax over dim 1): by
  /// default State::batch_output(), else a tensor the eval step stores (find_step_tensor).
  TORCH_ARG(std::string, output) = std::string(tensor_names::kOutput);
  /// Tensor holding the class indices, shape [N] or [N, d...]: by default State::batch_target().
  TORCH_ARG(std::string, target) = std::string(tensor_names::kTarget);
  /// Name of the confusion matrix in the tensor store (Scope::Epoch).
  TORCH_ARG(std::string, confusion_matrix) = "confusion_matrix";

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Accumulates a C x C confusion matrix (rows: true class, columns: predicted class) over each
/// evaluation with tensor ops on the batches' device (no sync per batch). At EvalEnd it copies the
/// matrix to the host once and records accuracy and macro precision, recall and F1 (means over
/// all C classes; a ratio with a zero denominator counts as 0, as scikit-learn's
/// zero_division=0), optionally micro and weighted averages, top-k accuracies (counted on the
/// device too) and per-class values, and stores the matrix (int64) in the tensor store.
/// Cancelled evaluation batches are skipped. Role::Metrics.
class ClassificationMetrics : public Callback {
 public:
  /// A ClassificationMetrics named by its options; throws ConfigError for invalid options.
  explicit ClassificationMetrics(ClassificationMetricsOptions options = {});

  /// The options it was built with.
  const ClassificationMetricsOptions& options() const noexcept { return options_; }
  /// The number of classes (given, or inferred from the first batch; 0 before).
  std::int64_t num_classes() const noexcept { return classes_; }
  /// Confusion matrix of the last completed evaluation (on the CPU), undefined before.
  const at::Tensor& confusion_matrix() const noexcept { return last_; }

  /// Starts a new confusion matrix.
  void on_eval_start(State& state) override;
  /// Adds the batch's predictions to the matrix, without a sync.
  void on_eval_batch_end(State& state) override;
  /// Reads the matrix (one sync) and records the metrics.
  void on_eval_end(State& state) override;

  /// Writes the number of classes and the last confusion matrix.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  void count_rank_hits(const at::Tensor& output, const at::Tensor& target);
  std::vector<std::string> metric_names(const std::string& prefix) const;
  std::int64_t max_top_k() const;

  ClassificationMetricsOptions options_;
  std::int64_t classes_ = 0;
  at::Tensor matrix_;               // flat C*C counts on the device, for the evaluation in progress
  at::Tensor rank_hits_;            // [max k]: samples whose class has the j-th highest score
  at::Tensor last_;                 // C x C, CPU, last completed evaluation
  std::vector<std::string> names_;  // metric names, in the order on_eval_end records them
  std::string names_prefix_;        // the prefix names_ were made with
};

}  // namespace torchbus
