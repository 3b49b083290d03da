// Runs ClassificationMetrics (every average and top-k) in Trainer::evaluate on given scores and
// writes the scores, the targets and the metrics it recorded; compare_metrics.py recomputes them
// with scikit-learn. Usage: metrics_reference OUT.json

#include <nlohmann/json.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>

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

  std::ofstream out(argv[1]);
  out << json{{"cases", cases}}.dump(1) << '\n';
  if (!out) {
    std::cerr << "metrics_reference: cannot write " << argv[1] << '\n';
    return 1;
  }
  std::cout << "metrics_reference: " << cases.size() << " cases written to " << argv[1] << '\n';
  return 0;
}
