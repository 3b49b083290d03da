// GradientStats: norms against a hand computation, frequency, per-parameter names, clipping.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/gradient_stats.hpp>

#include <cmath>
#include <limits>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// The global L2 norm of `module`'s gradients, computed directly.
double global_norm(torch::nn::Module& module) {
  double sum = 0.0;
  for (const auto& parameter : module.parameters()) {
    if (parameter.grad().defined()) sum += parameter.grad().pow(2).sum().item<double>();
  }
  return std::sqrt(sum);
}

bool equal_within_1e5(double a, double b) {
  return std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradient_stats)

BOOST_AUTO_TEST_CASE(global_norm_as_tensor_and_metric) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().accumulate_grad_batches(2).use_registered_subscriptions(false));
  trainer.add(std::make_shared<GradientStats>());
  std::vector<double> by_hand, stored;
  trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    by_hand.push_back(global_norm(trainer.module()));
    stored.push_back(state.tensors.get("grad_norm").item<double>());
  });
  bool kept_for_the_step = true;
  trainer.on(Event::StepEnd, [&](State& state) {
    kept_for_the_step = kept_for_the_step && state.tensors.contains("grad_norm");
  });
  auto data = make_batches(8, 4);
  trainer.fit(data);
  BOOST_REQUIRE_EQUAL(by_hand.size(), 4u);
  BOOST_TEST(kept_for_the_step);
  const auto& series = trainer.state().metrics.series("grad_norm");
  BOOST_REQUIRE_EQUAL(series.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(equal_within_1e5(stored[i], by_hand[i]));
    BOOST_TEST(equal_within_1e5(series[i].value, by_hand[i]));
    BOOST_TEST(series[i].step == static_cast<std::int64_t>(i + 1));  // as "train_loss"
  }
}

BOOST_AUTO_TEST_CASE(per_parameter_norms_and_frequency) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.add(std::make_shared<GradientStats>(
      GradientStatsOptions().per_parameter(true).step_freq(2).metric("gn")));
  std::vector<double> first_weight;
  std::vector<bool> present;
  trainer.on(
      Event::BeforeOptimizerStep,
      [&](State& state) {
        present.push_back(state.tensors.contains("gn"));
        if (state.tensors.contains("gn")) {
          first_weight.push_back(model->parameters()[0].grad().norm().item<double>());
        }
      },
      10);
  auto data = make_batches(5, 4);
  trainer.fit(data);
  BOOST_TEST(present == (std::vector<bool>{false, true, false, true, false}),
             boost::test_tools::per_element());
  const auto& metrics = trainer.state().metrics;
  BOOST_TEST(metrics.contains("gn/0.weight"));
  BOOST_TEST(metrics.contains("gn/0.bias"));
  BOOST_TEST(metrics.contains("gn/2.weight"));
  BOOST_TEST(metrics.contains("gn/2.bias"));
  const auto& series = metrics.series("gn/0.weight");
  BOOST_REQUIRE_EQUAL(series.size(), 2u);
  BOOST_TEST(series[0].step == 2);
  BOOST_TEST(series[1].step == 4);
  BOOST_TEST(equal_within_1e5(series[0].value, first_weight[0]));
  BOOST_TEST(equal_within_1e5(series[1].value, first_weight[1]));
}

BOOST_AUTO_TEST_CASE(infinity_norm_is_the_largest_element) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.add(std::make_shared<GradientStats>(
      GradientStatsOptions().norm_type(std::numeric_limits<double>::infinity())));
  std::vector<double> largest;
  trainer.on(
      Event::BeforeOptimizerStep,
      [&](State&) {
        double value = 0.0;
        for (const auto& p : model->parameters()) {
          value = std::max(value, p.grad().abs().max().item<double>());
        }
        largest.push_back(value);
      },
      10);
  auto data = make_batches(3, 4);
  trainer.fit(data);
  const auto& series = trainer.state().metrics.series("grad_norm");
  BOOST_REQUIRE_EQUAL(series.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(equal_within_1e5(series[i].value, largest[i]));
}

BOOST_AUTO_TEST_CASE(clipping_bounds_the_global_norm) {
  // TrainerOptions clips between BeforeOptimizerStep and the optimizer step: measured before, the
  // norm is the raw one; measured at AfterOptimizerStep, it is what the optimizer applied.
  const double clip = 0.05;
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(
      model, sgd, cross_entropy,
      TrainerOptions().max_epochs(2).gradient_clip_norm(clip).use_registered_subscriptions(false));
  trainer.add(
      std::make_shared<GradientStats>(GradientStatsOptions().metric("raw_norm").name("raw")));
  trainer.add(std::make_shared<GradientStats>(GradientStatsOptions()
                                                  .metric("clipped_norm")
                                                  .name("clipped")
                                                  .event(Event::AfterOptimizerStep)));
  std::vector<double> applied;
  trainer.on(Event::AfterOptimizerStep, [&](State&) { applied.push_back(global_norm(*model)); });
  auto data = make_batches(6, 4);
  trainer.fit(data);
  const auto& raw = trainer.state().metrics.series("raw_norm");
  const auto& clipped = trainer.state().metrics.series("clipped_norm");
  BOOST_REQUIRE_EQUAL(raw.size(), 12u);
  BOOST_REQUIRE_EQUAL(clipped.size(), 12u);
  int clipped_steps = 0;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    BOOST_TEST(clipped[i].value <= clip * (1.0 + 1e-5));
    BOOST_TEST(equal_within_1e5(clipped[i].value, std::min(raw[i].value, clip)));
    BOOST_TEST(equal_within_1e5(clipped[i].value, applied[i]));
    if (raw[i].value > clip) ++clipped_steps;
  }
  BOOST_TEST(clipped_steps > 0);  // the test clips for real
}

BOOST_AUTO_TEST_CASE(no_metric_history_when_record_is_off) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.add(std::make_shared<GradientStats>(GradientStatsOptions().record(false)));
  int seen = 0;
  trainer.on(Event::StepEnd, [&](State& state) { seen += state.tensors.contains("grad_norm"); });
  auto data = make_batches(2, 4);
  trainer.fit(data);
  BOOST_TEST(seen == 2);
  BOOST_TEST(!trainer.state().metrics.contains("grad_norm"));
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_CHECK_THROW(GradientStats(GradientStatsOptions().step_freq(0)), ConfigError);
  BOOST_CHECK_THROW(GradientStats(GradientStatsOptions().norm_type(0.0)), ConfigError);
  BOOST_CHECK_THROW(GradientStats(GradientStatsOptions().metric("")), ConfigError);
  BOOST_CHECK_THROW(GradientStats(GradientStatsOptions().event(Event::StepEnd)), ConfigError);
}

BOOST_AUTO_TEST_CASE(stateless_save_and_load) {
  // Nothing to keep between runs: the archive is empty and loads back.
  GradientStats stats;
  GradientStats restored;
  BOOST_CHECK_NO_THROW(round_trip(stats, restored));
  BOOST_TEST((restored.role() == Role::Metrics));
  BOOST_TEST(restored.name() == "gradient_stats");
}

BOOST_AUTO_TEST_SUITE_END()
