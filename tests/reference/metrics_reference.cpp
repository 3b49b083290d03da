// Runs ClassificationMetrics (every average and top-k) and RegressionMetrics in Trainer::evaluate
// (and RegressionMetrics in Trainer::test) on given outputs and writes the outputs, the targets and
// the metrics they recorded; compare_metrics.py recomputes them with scikit-learn.
// Usage: metrics_reference OUT.json

#include <nlohmann/json.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>
#include <torchbus/callbacks/regression_metrics.hpp>

#include <fstream>
#include <iostream>

using namespace torchbus;
using namespace torchbus::testing;
using nlohmann::json;

namespace {

/// ClassificationMetrics over `batches` of (scores, targets): what it recorded, with its inputs.
json run_case(const std::string& name, std::int64_t classes, const std::vector<Batch>& batches,
              const std::vector<std::int64_t>& top_k) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.set_eval_step([](Trainer& t, Batch& batch) {  // the batch's data are the scores
    t.state().set_batch_output(batch.data);
    return t.compute_loss(batch.data, batch.target);
  });
  trainer.add(std::make_shared<ClassificationMetrics>(
      ClassificationMetricsOptions().micro(true).weighted(true).top_k(top_k)));
  auto data = batches;
  trainer.evaluate(data);

  json scores = json::array(), targets = json::array(), metrics = json::object();
  for (const auto& batch : batches) {
    const auto rows = batch.data.to(at::kDouble).contiguous();
    for (std::int64_t i = 0; i < rows.size(0); ++i) {
      const auto* row = rows[i].data_ptr<double>();
      scores.push_back(std::vector<double>(row, row + classes));
      targets.push_back(batch.target[i].item<std::int64_t>());
    }
  }
  const auto& history = trainer.state().metrics;
  for (const auto& metric : history.names()) metrics[metric] = history.latest(metric).value;
  return json{{"name", name},     {"classes", classes}, {"top_k", top_k},
              {"scores", scores}, {"targets", targets}, {"metrics", metrics}};
}

/// RegressionMetrics over `batches` of (predictions, true values), in a test when `test`.
json run_regression_case(const std::string& name, const std::vector<Batch>& batches, bool test) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.set_eval_step([](Trainer& t, Batch& batch) {  // the batch's data are the predictions
    t.state().set_batch_output(batch.data);
    return torch::mse_loss(batch.data, batch.target);
  });
  trainer.add(std::make_shared<RegressionMetrics>());
  auto data = batches;
  if (test) {
    trainer.test(data);
  } else {
    trainer.evaluate(data);
  }
  json predictions = json::array(), targets = json::array(), metrics = json::object();
  for (const auto& batch : batches) {
    const auto rows = batch.data.reshape({batch.data.size(0), -1}).to(at::kDouble).contiguous();
    const auto truth = batch.target.reshape({batch.data.size(0), -1}).to(at::kDouble).contiguous();
    for (std::int64_t i = 0; i < rows.size(0); ++i) {
      const auto* row = rows[i].data_ptr<double>();
      const auto* true_row = truth[i].data_ptr<double>();
      predictions.push_back(std::vector<double>(row, row + rows.size(1)));
      targets.push_back(std::vector<double>(true_row, true_row + rows.size(1)));
    }
  }
  const auto& history = trainer.state().metrics;
  for (const auto& metric : history.names()) metrics[metric] = history.latest(metric).value;
  return json{{"name", name},
              {"kind", "regression"},
              {"prefix", test ? "test_" : "val_"},
              {"predictions", predictions},
              {"targets", targets},
              {"metrics", metrics}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: metrics_reference OUT.json\n";
    return 2;
  }
  json cases = json::array();
  // Random scores of 5 classes in batches of 16, 16 and 9.
  torch::manual_seed(3);
  std::vector<Batch> batches;
  for (const std::int64_t size : {16, 16, 9}) {
    batches.emplace_back(torch::randn({size, 5}), torch::randint(5, {size}, torch::kLong));
  }
  cases.push_back(run_case("random_5_classes", 5, batches, {1, 2, 3}));
  // Class 3 is never the target and never predicted; class 1 never predicted: zero divisions.
  std::vector<Batch> sparse;
  for (const std::int64_t size : {12, 12}) {
    auto scores = torch::randn({size, 4});
    scores.select(1, 3).fill_(-100.0);
    scores.select(1, 1).sub_(50.0);
    auto targets = torch::randint(3, {size}, torch::kLong);
    sparse.emplace_back(scores, targets);
  }
  cases.push_back(run_case("absent_classes", 4, sparse, {2}));
  // Regression: one target in batches of 10, 10 and 7 (float32 predictions, as a model's).
  std::vector<Batch> single;
  for (const std::int64_t size : {10, 10, 7}) {
    const auto truth = torch::randn({size}) * 3 + 1;
    single.emplace_back(truth + 0.5 * torch::randn({size}), truth);
  }
  cases.push_back(run_regression_case("regression_one_target", single, /*test=*/false));
  // Three targets of different scales, one of them constant (R² of a constant column), in a test.
  std::vector<Batch> several;
  for (const std::int64_t size : {8, 8, 5}) {
    auto truth = torch::stack(
        {torch::randn({size}) * 100 + 50, torch::randn({size}) * 0.01, torch::full({size}, 2.0)},
        1);
    several.emplace_back(truth + torch::randn({size, 3}) * 0.2, truth);
  }
  cases.push_back(run_regression_case("regression_three_targets", several, /*test=*/true));

  std::ofstream out(argv[1]);
  out << json{{"cases", cases}}.dump(1) << '\n';
  if (!out) {
    std::cerr << "metrics_reference: cannot write " << argv[1] << '\n';
    return 1;
  }
  std::cout << "metrics_reference: " << cases.size() << " cases written to " << argv[1] << '\n';
  return 0;
}
