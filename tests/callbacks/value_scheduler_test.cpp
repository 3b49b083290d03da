// ValueScheduler: any value on a learning-rate schedule, at the moments a LearningRateScheduler
// with the same schedule sets the learning rate, through a resume.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/value_scheduler.hpp>

#include <filesystem>
#include <stdexcept>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A fit of 3 epochs of 5 batches, two batches a step (3 steps an epoch, the last of one batch),
/// with a LearningRateScheduler and a ValueScheduler of the same schedule from the same start.
struct ScheduledRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer{
      model, sgd, cross_entropy,
      TrainerOptions().max_epochs(3).accumulate_grad_batches(2).use_registered_subscriptions(
          false)};
  std::vector<Batch> train = make_batches(5, 4);
  double beta = -1.0;                           // the scheduled value, as a loss would read it
  std::vector<std::pair<double, double>> seen;  // (lr, beta) at every batch

  ScheduledRun(const LrSchedule& schedule, ScheduleInterval interval) {
    trainer.add(std::make_shared<LearningRateScheduler>(
        schedule, LearningRateSchedulerOptions().interval(interval)));
    trainer.add(std::make_shared<ValueScheduler>(ValueSchedulerOptions("beta").interval(interval),
                                                 0.1, schedule,
                                                 [this](double value) { beta = value; }));
    trainer.on(Event::BatchStart, [this](State& state) {
      seen.emplace_back(state.optimizer->param_groups()[0].options().get_lr(), beta);
    });
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(value_scheduler)

BOOST_AUTO_TEST_CASE(follows_the_learning_rate_of_the_same_schedule_at_every_batch) {
  for (const auto interval : {ScheduleInterval::Step, ScheduleInterval::Epoch}) {
    ScheduledRun run(CosineDecayOptions(9).warmup_steps(2).min_lr(0.01), interval);
    run.trainer.fit(run.train);
    BOOST_TEST_REQUIRE(run.seen.size() == 15u);
    for (const auto& [lr, beta] : run.seen) BOOST_TEST(beta == lr);
    // It changes: 9 steps (or 3 epochs) of a warmup and a decay.
    BOOST_TEST(run.seen.front().second != run.seen.back().second);
  }
  // Recorded under its name at every step, the value the step used.
  ScheduledRun run(StepDecayOptions(2).gamma(0.5), ScheduleInterval::Step);
  run.trainer.fit(run.train);
  const auto& series = run.trainer.state().metrics.series("beta");
  BOOST_TEST_REQUIRE(series.size() == 9u);
  BOOST_TEST(series[0].value == 0.1);
  BOOST_TEST(series[2].value == 0.05);
  BOOST_TEST(series[8].value == 0.1 * 0.5 * 0.5 * 0.5 * 0.5);
}

BOOST_AUTO_TEST_CASE(a_resumed_run_continues_the_values) {
  const auto folder = std::filesystem::temp_directory_path() / "torchbus_value_scheduler";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const LrSchedule schedule = ExponentialDecayOptions(0.8);
  ScheduledRun whole(schedule, ScheduleInterval::Step);
  whole.trainer.fit(whole.train);
  ScheduledRun first(schedule, ScheduleInterval::Step);
  first.trainer.on(Event::StepEnd, [&](State& state) {
    if (state.step != 4) return;
    first.trainer.save_checkpoint(folder / "step4.tbckpt");
    throw std::runtime_error("killed");
  });
  BOOST_CHECK_THROW(first.trainer.fit(first.train), std::runtime_error);
  ScheduledRun second(schedule, ScheduleInterval::Step);
  second.trainer.resume_from(folder / "step4.tbckpt");
  second.trainer.fit(second.train);
  // The 8 batches after step 4 (the first of epoch 1) see the uninterrupted run's values.
  BOOST_TEST_REQUIRE(second.seen.size() == 8u);
  for (std::size_t i = 0; i < second.seen.size(); ++i) {
    BOOST_TEST(second.seen[i].second == whole.seen[7 + i].second);
  }
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  const auto set = [](double) {};
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   ValueScheduler(ValueSchedulerOptions(""), 1.0, StepDecayOptions(1), set);
                 }),
                 "ValueScheduler: the value's name is empty"));
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   ValueScheduler(ValueSchedulerOptions("beta"), 1.0, StepDecayOptions(1), nullptr);
                 }),
                 "ValueScheduler 'beta': the function that sets the value is empty"));
}

BOOST_AUTO_TEST_SUITE_END()
