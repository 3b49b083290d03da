#include <ATen/ATen.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

namespace torchbus {
namespace {

double ratio(double numerator, double denominator) {
  return denominator > 0.0 ? numerator / denominator : 0.0;
}

}  // namespace

void ClassificationMetricsOptions::validate() const {
  TORCHBUS_CHECK(num_classes() == 0 || num_classes() >= 2, ConfigError,
                 "ClassificationMetrics: num_classes must be >= 2, or 0 to infer it from the "
                 "output, got ",
                 num_classes());
  TORCHBUS_CHECK(!output().empty() && !target().empty(), ConfigError,
                 "ClassificationMetrics: the output and target tensor names must not be empty");
  TORCHBUS_CHECK(!confusion_matrix().empty(), ConfigError,
                 "ClassificationMetrics: the confusion_matrix tensor name must not be empty");
  for (std::size_t i = 0; i < top_k().size(); ++i) {
    const auto k = top_k()[i];
    TORCHBUS_CHECK(k >= 1 && (num_classes() == 0 || k <= num_classes()), ConfigError,
                   "ClassificationMetrics: top_k values must be in [1, num_classes], got ", k);
    TORCHBUS_CHECK(std::count(top_k().begin(), top_k().begin() + i, k) == 0, ConfigError,
                   "ClassificationMetrics: top_k lists ", k, " twice");
  }
}

ClassificationMetrics::ClassificationMetrics(ClassificationMetricsOptions options)
    : Callback(options.name()), options_(std::move(options)), classes_(options_.num_classes()) {
  set_role(Role::Metrics);
  options_.validate();
}

void ClassificationMetrics::on_eval_start(State& /*state*/) {
  matrix_.reset();
  rank_hits_.reset();
}

void ClassificationMetrics::on_eval_batch_end(State& state) {
  if (state.cancelled) return;
  const auto* output = find_step_tensor(state, options_.output());
  const auto* target = find_step_tensor(state, options_.target());
  TORCHBUS_CHECK(output != nullptr && target != nullptr, ConfigError,
                 "ClassificationMetrics: needs tensors '", options_.output(), "' and '",
                 options_.target(), "' at EvalBatchEnd (evaluation batch ", state.eval_batch,
                 "); present: ", detail::join_or_none(step_tensor_names(state)),
                 ". A custom eval step sets the output with state.set_batch_output(...) (or stores "
                 "tensors and names them in the options)");
  TORCHBUS_CHECK(output->dim() >= 2 && output->size(1) >= 2, DataError,
                 "ClassificationMetrics: expected output '", options_.output(),
                 "' of shape [N, C, ...] with C >= 2 class scores, got shape ", output->sizes());
  if (classes_ == 0) classes_ = output->size(1);
  TORCHBUS_CHECK(output->size(1) == classes_, DataError, "ClassificationMetrics: output '",
                 options_.output(), "' has ", output->size(1), " class scores (shape ",
                 output->sizes(), "); expected ", classes_, " classes");
  const auto predicted = output->detach().argmax(1).reshape({-1});
  const auto truth = target->detach().reshape({-1}).to(at::kLong);
  TORCHBUS_CHECK(truth.numel() == predicted.numel(), DataError, "ClassificationMetrics: target '",
                 options_.target(), "' of shape ", target->sizes(),
                 " does not match the predictions of output of shape ", output->sizes(),
                 "; expected a target of shape [N, ...] without the class dimension");
  if (!matrix_.defined()) {
    matrix_ = at::zeros({classes_ * classes_}, predicted.options().dtype(at::kLong));
  }
  // scatter_add_ instead of bincount: bincount reads the maximum on the host (a sync on a GPU).
  const auto index = truth * classes_ + predicted;
  try {
    matrix_.scatter_add_(0, index, at::ones_like(index));
  } catch (const c10::Error& error) {
    throw DataError(detail::concat("ClassificationMetrics: cannot count target '",
                                   options_.target(), "' (expected class indices in [0, ", classes_,
                                   ")): ", error.what_without_backtrace()));
  }
  if (!options_.top_k().empty()) count_rank_hits(*output, *target);
}

void ClassificationMetrics::count_rank_hits(const at::Tensor& output, const at::Tensor& target) {
  const auto max_k = max_top_k();
  TORCHBUS_CHECK(max_k <= classes_, ConfigError, "ClassificationMetrics: top_k ", max_k,
                 " exceeds the ", classes_, " classes of output '", options_.output(), "'");
  // [N, max_k, d...]: whether the j-th highest score is the true class (at most one j per sample).
  const auto ranked = std::get<1>(output.detach().topk(max_k, 1));
  const auto hits = ranked.eq(target.detach().to(at::kLong).unsqueeze(1));
  const auto per_rank = hits.transpose(0, 1).reshape({max_k, -1}).sum(1);
  if (!rank_hits_.defined()) rank_hits_ = at::zeros_like(per_rank);
  rank_hits_.add_(per_rank);
}

void ClassificationMetrics::on_eval_end(State& state) {
  if (state.process_group && state.process_group->world_size() > 1) {
    // Each rank counted its shard: every rank reports the counts of all of them.
    if (!matrix_.defined() && classes_ > 0) matrix_ = at::zeros({classes_ * classes_}, at::kLong);
    if (matrix_.defined()) state.process_group->all_reduce(matrix_);
    if (!options_.top_k().empty()) {
      if (!rank_hits_.defined()) rank_hits_ = at::zeros({max_top_k()}, at::kLong);
      state.process_group->all_reduce(rank_hits_);
    }
  }
  if (!matrix_.defined()) return;                                   // every batch was cancelled
  const auto matrix = matrix_.reshape({classes_, classes_}).cpu();  // the one sync
  matrix_.reset();
  // Top-k hits: samples whose class ranks within the first k scores.
  std::vector<double> top_k_hits;
  if (!options_.top_k().empty()) {
    const auto cumulative = rank_hits_.cumsum(0).to(at::kDouble).cpu();
    rank_hits_.reset();
    for (const auto k : options_.top_k()) top_k_hits.push_back(cumulative[k - 1].item<double>());
  }
  last_ = matrix;
  state.tensors.set(options_.confusion_matrix(), matrix, Scope::Epoch);

  const auto counts = matrix.to(at::kDouble).contiguous();
  const auto* m = counts.data_ptr<double>();
  const auto c = static_cast<std::size_t>(classes_);
  double total = 0.0;
  double correct = 0.0;
  std::vector<double> precision(c), recall(c), f1(c), support(c);
  for (std::size_t k = 0; k < c; ++k) {
    double predicted = 0.0;  // column sum
    double actual = 0.0;     // row sum
    for (std::size_t j = 0; j < c; ++j) {
      predicted += m[j * c + k];
      actual += m[k * c + j];
    }
    const double hits = m[k * c + k];
    support[k] = actual;
    total += actual;
    correct += hits;
    precision[k] = ratio(hits, predicted);
    recall[k] = ratio(hits, actual);
    f1[k] = ratio(2.0 * precision[k] * recall[k], precision[k] + recall[k]);
  }
  const auto mean = [c](const std::vector<double>& values) {
    double sum = 0.0;
    for (double value : values) sum += value;
    return sum / static_cast<double>(c);
  };
  const auto weighted_mean = [&](const std::vector<double>& values) {
    double sum = 0.0;
    for (std::size_t k = 0; k < c; ++k) sum += values[k] * support[k];
    return ratio(sum, total);
  };
  // In the order of metric_names(): accuracy and the macro averages, micro, weighted, top-k, then
  // per class.
  std::vector<double> values{ratio(correct, total), mean(precision), mean(recall), mean(f1)};
  if (options_.micro()) {
    // Summed over the classes, true positives and both kinds of errors all equal `correct` and
    // `total - correct`: precision, recall and F1 are the accuracy.
    values.insert(values.end(), 3, ratio(correct, total));
  }
  if (options_.weighted()) {
    values.insert(values.end(),
                  {weighted_mean(precision), weighted_mean(recall), weighted_mean(f1)});
  }
  for (const double hits : top_k_hits) values.push_back(ratio(hits, total));
  if (options_.per_class()) {
    for (std::size_t k = 0; k < c; ++k)
      values.insert(values.end(), {precision[k], recall[k], f1[k]});
  }
  const auto& prefix = state.action == Action::Test ? options_.test_prefix() : options_.prefix();
  if (names_.size() != values.size() || names_prefix_ != prefix) {
    names_ = metric_names(prefix);
    names_prefix_ = prefix;
  }
  for (std::size_t i = 0; i < values.size(); ++i) state.record_metric(names_[i], values[i]);
}

std::vector<std::string> ClassificationMetrics::metric_names(const std::string& prefix) const {
  std::vector<std::string> names;
  for (const char* name : {"accuracy", "precision", "recall", "f1"}) names.push_back(prefix + name);
  for (const auto& [enabled, suffix] :
       {std::pair{options_.micro(), "_micro"}, std::pair{options_.weighted(), "_weighted"}}) {
    if (!enabled) continue;
    for (const char* name : {"precision", "recall", "f1"}) names.push_back(prefix + name + suffix);
  }
  for (const auto k : options_.top_k())
    names.push_back(prefix + "accuracy_top_" + std::to_string(k));
  if (options_.per_class()) {
    for (std::int64_t k = 0; k < classes_; ++k) {
      for (const char* name : {"precision", "recall", "f1"}) {
        names.push_back(prefix + name + "_class_" + std::to_string(k));
      }
    }
  }
  return names;
}

std::int64_t ClassificationMetrics::max_top_k() const {
  const auto& top_k = options_.top_k();
  return *std::max_element(top_k.begin(), top_k.end());
}

void ClassificationMetrics::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("num_classes", c10::IValue(classes_));
  archive.write("has_confusion_matrix", c10::IValue(last_.defined()));
  if (last_.defined()) archive.write("confusion_matrix", last_);
}

void ClassificationMetrics::load_state(torch::serialize::InputArchive& archive) {
  const auto classes = read_value(archive, "num_classes").toInt();
  TORCHBUS_CHECK(options_.num_classes() == 0 || classes == options_.num_classes(), ConfigError,
                 "ClassificationMetrics: the saved state is for ", classes,
                 " classes; this callback was configured for ", options_.num_classes());
  classes_ = classes;
  last_.reset();
  if (read_value(archive, "has_confusion_matrix").toBool()) {
    at::Tensor matrix;
    archive.read("confusion_matrix", matrix);
    last_ =
        matrix.cpu();  // on the host, as computed (a checkpoint read for a GPU run has it there)
  }
}

}  // namespace torchbus
