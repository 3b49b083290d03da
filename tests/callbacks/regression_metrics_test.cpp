// RegressionMetrics in the loop: it reads named outputs and batch fields, skips cancelled batches,
// and names what is wrong with its inputs. (Its numbers are compared with scikit-learn's by the
// metrics_reference suite.)

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/regression_metrics.hpp>
#include <torchbus/torchbus.hpp>

#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A trainer of a linear model of `features` to `y`, its prediction the named output "value".
struct Regression {
  torch::nn::Linear model{torch::nn::Linear(3, 1)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer{model.ptr(), Trainer::BatchForward([this](const Batch& batch) {
                    return Output{{"value", model->forward(batch.get("features"))}};
                  }),
                  optimizer,
                  [](const Output& output, const Batch& batch) {
                    return torch::mse_loss(output.get("value"), batch.get("y"));
                  },
                  TrainerOptions().use_registered_subscriptions(false)};
};

std::vector<Batch> regression_batches(int count) {
  torch::manual_seed(5);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    Batch batch;
    const auto features = torch::randn({6, 3});
    batch.set("features", features).set("y", features.sum(1, /*keepdim=*/true));
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(regression_metrics)

BOOST_AUTO_TEST_CASE(named_fields_are_read_and_cancelled_batches_skipped) {
  Regression run;
  run.trainer.add(
      std::make_shared<RegressionMetrics>(RegressionMetricsOptions().output("value").target("y")));
  run.trainer.on(Event::EvalBatchStart, [](State& state) {
    if (state.eval_batch == 1) throw CancelBatch();
  });
  const auto batches = regression_batches(3);
  run.trainer.evaluate(batches);
  // By hand, over batches 0 and 2.
  torch::NoGradGuard no_grad;
  double squared = 0, absolute = 0;
  for (const int i : {0, 2}) {
    const auto error = run.model->forward(batches[i].get("features")).to(torch::kDouble) -
                       batches[i].get("y").to(torch::kDouble);
    squared += error.square().sum().item<double>();
    absolute += error.abs().sum().item<double>();
  }
  const auto& metrics = run.trainer.state().metrics;
  BOOST_TEST(metrics.latest("val_mse").value == squared / 12, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(metrics.latest("val_mae").value == absolute / 12, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(metrics.contains("val_r2"));
  run.trainer.test(batches);
  BOOST_TEST(metrics.contains("test_rmse"));
}

BOOST_AUTO_TEST_CASE(inputs_that_do_not_fit_are_named) {
  Regression run;
  run.trainer.add(std::make_shared<RegressionMetrics>(RegressionMetricsOptions().output("value")));
  auto batches = regression_batches(1);
  BOOST_TEST(has(message_of<ConfigError>([&] { run.trainer.evaluate(batches); }),
                 "RegressionMetrics: needs tensors 'value' and 'target' at EvalBatchEnd "
                 "(evaluation batch 0); present: "));
  Regression other;
  other.trainer.add(std::make_shared<RegressionMetrics>(
      RegressionMetricsOptions().output("value").target("features")));
  BOOST_TEST(has(message_of<DataError>([&] { other.trainer.evaluate(batches); }),
                 "output 'value' of shape [6, 1] and target 'features' of shape [6, 3] do not "
                 "match"));
  BOOST_TEST(has(message_of<ConfigError>([] { RegressionMetricsOptions().target("").validate(); }),
                 "must not be empty"));
}

BOOST_AUTO_TEST_SUITE_END()
