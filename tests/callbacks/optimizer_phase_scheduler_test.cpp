// Built-ins that concern an optimizer, with several optimizers: a LearningRateScheduler schedules
// the optimizer phase it names (the first by default) and advances after its steps only;
// GradientStats measures at the phase it names; the loggers' lr is the first phase's.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/two_phase_gan.hpp>
#include <torchbus/callbacks/gradient_stats.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/logged_values.hpp>

#include <cmath>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

double learning_rate(const torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups()[0].options().get_lr();
}

/// Halves the learning rate at every schedule step.
double halving(std::int64_t t, double base) {
  return base * std::pow(0.5, static_cast<double>(t));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_phase_scheduler)

BOOST_AUTO_TEST_CASE(each_scheduler_follows_the_steps_of_its_phase) {
  // 4 batches: the discriminator steps 4 times, the generator (every 2nd batch) twice.
  GanRun run(TrainerOptions().max_epochs(1), /*generator_every=*/2);
  auto first = std::make_shared<LearningRateScheduler>(LrLambda(halving));
  auto generator =
      std::make_shared<LearningRateScheduler>(LrLambda(halving), LearningRateSchedulerOptions()
                                                                     .name("generator_lr")
                                                                     .metric("generator_lr")
                                                                     .phase("generator"));
  run.trainer.add(first);
  run.trainer.add(generator);
  std::vector<double> generator_lrs_used;
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    if (state.optimizer_phase_name == "generator") {
      generator_lrs_used.push_back(learning_rate(*state.optimizer));
    }
  });
  run.trainer.fit(gan_batches(4));

  BOOST_TEST(first->schedule_steps() == 4);
  BOOST_TEST(generator->schedule_steps() == 2);
  BOOST_TEST(learning_rate(run.discriminator_adam) == 1e-2 * std::pow(0.5, 4));
  BOOST_TEST(learning_rate(run.generator_adam) == 2e-2 * std::pow(0.5, 2));
  BOOST_TEST(generator_lrs_used == (std::vector<double>{2e-2, 1e-2}));
  const auto& metrics = run.trainer.state().metrics;
  BOOST_TEST(metrics.series("lr").size() == 4u);
  BOOST_TEST(metrics.series("generator_lr").size() == 2u);
}

BOOST_AUTO_TEST_CASE(gradient_stats_measure_the_phase_they_name) {
  GanRun run(TrainerOptions().max_epochs(1), /*generator_every=*/2);
  run.trainer.add(std::make_shared<GradientStats>());
  run.trainer.add(std::make_shared<GradientStats>(GradientStatsOptions()
                                                      .name("generator_stats")
                                                      .metric("generator_grad_norm")
                                                      .phase("generator")));
  std::vector<double> generator_norms;  // by hand, over the generator's parameters
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    if (state.optimizer_phase_name != "generator") return;
    double total = 0.0;
    for (const auto& parameter : run.gan->generator->parameters()) {
      total += parameter.grad().pow(2).sum().item<double>();
    }
    generator_norms.push_back(std::sqrt(total));
  });
  run.trainer.fit(gan_batches(4));
  const auto& metrics = run.trainer.state().metrics;
  BOOST_TEST(metrics.series("grad_norm").size() == 4u);  // the discriminator's steps
  const auto& generator = metrics.series("generator_grad_norm");
  BOOST_TEST_REQUIRE(generator.size() == 2u);
  BOOST_TEST(generator[0].step == 2);
  for (std::size_t i = 0; i < generator.size(); ++i) {
    BOOST_TEST(generator[i].value == generator_norms[i], boost::test_tools::tolerance(1e-6));
  }
}

BOOST_AUTO_TEST_CASE(the_loggers_learning_rate_is_the_first_phase_s) {
  GanRun run(TrainerOptions().max_epochs(1));
  StepLearningRate lr;
  const Callback source("source");  // what a warning would name
  std::optional<double> step_rate, read;
  run.trainer.on(Event::StepEnd, [&](State& state) {
    step_rate = state.step_learning_rate();
    read = lr.read(state, {"test", source}, "no lr");
  });
  run.trainer.fit(gan_batches(1));
  BOOST_TEST_REQUIRE(step_rate.has_value());
  BOOST_TEST(*step_rate == 1e-2);  // the discriminator's Adam, not the generator's 2e-2
  BOOST_TEST_REQUIRE(read.has_value());
  BOOST_TEST(*read == 1e-2);
  BOOST_TEST(names_optimizer_phase(run.trainer.state(), ""));
  BOOST_TEST(!names_optimizer_phase(run.trainer.state(), "generator"));
}

BOOST_AUTO_TEST_CASE(a_phase_the_trainer_does_not_have_is_a_config_error) {
  GanRun run(TrainerOptions().max_epochs(1));
  run.trainer.add(std::make_shared<LearningRateScheduler>(
      LrLambda(halving), LearningRateSchedulerOptions().phase("critic")));
  const auto message = message_of<ConfigError>([&] { run.trainer.fit(gan_batches(1)); });
  BOOST_TEST(has(message,
                 "no optimizer phase named 'critic'; its phases are discriminator, "
                 "generator"));
}

BOOST_AUTO_TEST_SUITE_END()
