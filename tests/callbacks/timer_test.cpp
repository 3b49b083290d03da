// Timer on a scripted clock: step times, moving average, throughput, epoch time, time limit.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/timer.hpp>

#include <chrono>
#include <sstream>
#include <thread>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

bool equal_within_1e9(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
}

/// A trainer whose time only moves when a batch starts: each batch "takes" `seconds(batch)`.
struct ClockedRun {
  double now = 0.0;
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;

  ClockedRun(TrainerOptions options, std::function<double(std::int64_t)> seconds)
      : trainer(model, sgd, cross_entropy, options.use_registered_subscriptions(false)) {
    trainer.on(Event::BatchStart,
               [this, seconds](State& state) { now += seconds(state.global_batch); });
  }
  std::function<double()> clock() {
    return [this] { return now; };
  }
  std::vector<double> values(const std::string& name) {
    std::vector<double> out;
    for (const auto& point : trainer.state().metrics.series(name)) out.push_back(point.value);
    return out;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(timer)

BOOST_AUTO_TEST_CASE(step_times_moving_average_and_throughput) {
  // k = 2, 4 samples per batch: 8 samples per step. Batch b takes 0.1 * (b + 1) s.
  ClockedRun run(TrainerOptions().accumulate_grad_batches(2),
                 [](std::int64_t batch) { return 0.1 * static_cast<double>(batch + 1); });
  auto timer = std::make_shared<Timer>(TimerOptions().ema_decay(0.5).clock(run.clock()));
  run.trainer.add(timer);
  auto data = make_batches(6, 4);
  run.trainer.fit(data);

  const std::vector<double> steps{0.1 + 0.2, 0.3 + 0.4, 0.5 + 0.6};
  std::vector<double> ema{steps[0]};
  ema.push_back(0.5 * ema[0] + 0.5 * steps[1]);
  ema.push_back(0.5 * ema[1] + 0.5 * steps[2]);
  const auto step_time = run.values("step_time");
  const auto step_time_ema = run.values("step_time_ema");
  const auto throughput = run.values("samples_per_sec");
  BOOST_REQUIRE_EQUAL(step_time.size(), 3u);
  BOOST_REQUIRE_EQUAL(throughput.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(equal_within_1e9(step_time[i], steps[i]));
    BOOST_TEST(equal_within_1e9(step_time_ema[i], ema[i]));
    BOOST_TEST(equal_within_1e9(throughput[i], 8.0 / ema[i]));
  }
  BOOST_TEST(equal_within_1e9(run.values("epoch_time").at(0), 2.1));
  BOOST_TEST(equal_within_1e9(timer->elapsed(), 2.1));
  BOOST_TEST(timer->steps_timed() == 3);
  BOOST_TEST(equal_within_1e9(timer->samples_per_second(), 8.0 / ema[2]));
}

BOOST_AUTO_TEST_CASE(step_freq_and_prefix) {
  ClockedRun run(TrainerOptions(), [](std::int64_t) { return 1.0; });
  run.trainer.add(
      std::make_shared<Timer>(TimerOptions().step_freq(2).prefix("time/").clock(run.clock())));
  auto data = make_batches(5, 4);
  run.trainer.fit(data);
  const auto& series = run.trainer.state().metrics.series("time/step_time");
  BOOST_REQUIRE_EQUAL(series.size(), 2u);
  BOOST_TEST(series[0].step == 2);
  BOOST_TEST(series[1].step == 4);
  BOOST_TEST(run.trainer.state().metrics.contains("time/epoch_time"));
}

// The default counts the batch's target (State::batch_target()), also with a custom train step.
BOOST_AUTO_TEST_CASE(a_custom_step_counts_the_samples_of_the_batch_target) {
  ClockedRun run(TrainerOptions(), [](std::int64_t) { return 1.0; });
  run.trainer.set_train_step(
      [](Trainer& t, Batch& batch) { return t.compute_loss(t.forward(batch.data), batch.target); });
  run.trainer.add(std::make_shared<Timer>(TimerOptions().clock(run.clock())));
  auto data = make_batches(2, 4);
  run.trainer.fit(data);
  BOOST_TEST(run.trainer.state().metrics.contains("samples_per_sec"));
}

BOOST_AUTO_TEST_CASE(no_throughput_without_the_samples_tensor) {
  ClockedRun run(TrainerOptions(), [](std::int64_t) { return 1.0; });
  run.trainer.add(
      std::make_shared<Timer>(TimerOptions().clock(run.clock()).samples_from("weights")));
  auto data = make_batches(2, 4);
  CapturedLog log;
  run.trainer.fit(data);
  BOOST_TEST(run.trainer.state().metrics.contains("step_time"));
  BOOST_TEST(!run.trainer.state().metrics.contains("samples_per_sec"));
  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(warnings[0].find("no tensor 'weights' at BatchEnd") != std::string::npos, warnings[0]);
}

BOOST_AUTO_TEST_CASE(time_limit_stops_at_a_step_boundary) {
  // Each step takes 0.5 s; the limit of 1.2 s is passed during step 3, so the run stops after it.
  ClockedRun run(TrainerOptions().max_epochs(3), [](std::int64_t) { return 0.5; });
  auto timer = std::make_shared<Timer>(TimerOptions().time_limit(1.2).clock(run.clock()));
  run.trainer.add(timer);
  int epochs_started = 0;
  run.trainer.on(Event::EpochStart, [&](State&) { ++epochs_started; });
  auto data = make_batches(10, 4);
  run.trainer.fit(data);
  const auto& state = run.trainer.state();
  BOOST_TEST(state.stop_requested());
  BOOST_TEST(state.step == 3);
  BOOST_TEST(epochs_started == 1);
  BOOST_TEST(contains(state.stop_reason(), "time limit of 1.2 s reached after 1.5 s"));
  BOOST_TEST(contains(state.stop_reason(), "step 3"));
}

BOOST_AUTO_TEST_CASE(elapsed_time_survives_save_and_load) {
  ClockedRun first(TrainerOptions(), [](std::int64_t) { return 0.5; });
  auto before = std::make_shared<Timer>(TimerOptions().clock(first.clock()));
  first.trainer.add(before);
  auto data = make_batches(3, 4);
  first.trainer.fit(data);
  BOOST_TEST(equal_within_1e9(before->elapsed(), 1.5));

  // The resumed run has 1.5 s behind it: with a limit of 2 s it stops after one more step.
  ClockedRun second(TrainerOptions(), [](std::int64_t) { return 0.5; });
  auto after = std::make_shared<Timer>(TimerOptions().time_limit(2.0).clock(second.clock()));
  round_trip(*before, *after);
  BOOST_TEST(equal_within_1e9(after->elapsed(), 1.5));
  BOOST_TEST(equal_within_1e9(after->step_time_ema(), before->step_time_ema()));
  BOOST_TEST(after->steps_timed() == 3);
  second.trainer.add(after);
  second.trainer.fit(data);
  BOOST_TEST(second.trainer.state().step == 1);
  BOOST_TEST(second.trainer.state().stop_requested());
  BOOST_TEST(equal_within_1e9(after->elapsed(), 2.0));
}

BOOST_AUTO_TEST_CASE(real_clock_step_and_epoch_times_include_the_time_slept) {
  // Every batch sleeps 30 ms inside its step: 2 epochs of 3 one-batch steps of 4 samples.
  constexpr double kSlept = 0.030;
  constexpr double kSlack = 1.0;  // a loaded machine may be slow, but not by a second per step
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  auto timer = std::make_shared<Timer>(TimerOptions().ema_decay(0.5));
  trainer.add(timer);
  trainer.on(Event::BatchStart,
             [](State&) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  auto data = make_batches(3, 4);
  trainer.fit(data);

  const auto& metrics = trainer.state().metrics;
  const auto& step_time = metrics.series("step_time");
  const auto& step_time_ema = metrics.series("step_time_ema");
  const auto& throughput = metrics.series("samples_per_sec");
  BOOST_REQUIRE_EQUAL(step_time.size(), 6u);
  BOOST_REQUIRE_EQUAL(step_time_ema.size(), 6u);
  BOOST_REQUIRE_EQUAL(throughput.size(), 6u);
  std::vector<double> epoch_steps_sum(2, 0.0);
  for (std::size_t i = 0; i < 6; ++i) {
    BOOST_TEST_CONTEXT("step point " << i) {
      BOOST_TEST(step_time[i].step == static_cast<std::int64_t>(i + 1));
      BOOST_TEST(step_time[i].epoch == static_cast<std::int64_t>(i / 3));
      BOOST_TEST(step_time[i].value >= kSlept);
      BOOST_TEST(step_time[i].value < kSlept + kSlack);
      BOOST_TEST(step_time_ema[i].step == step_time[i].step);
      BOOST_TEST(step_time_ema[i].value >= kSlept);
      BOOST_TEST(step_time_ema[i].value < kSlept + kSlack);
      BOOST_TEST(throughput[i].value <= 4.0 / kSlept);
      BOOST_TEST(throughput[i].value > 4.0 / (kSlept + kSlack));
    }
    epoch_steps_sum[i / 3] += step_time[i].value;
  }
  BOOST_TEST(step_time_ema[0].value == step_time[0].value);  // the first step has no history

  const auto& epoch_time = metrics.series("epoch_time");
  BOOST_REQUIRE_EQUAL(epoch_time.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    BOOST_TEST_CONTEXT("epoch " << e) {
      BOOST_TEST(epoch_time[e].epoch == static_cast<std::int64_t>(e));
      BOOST_TEST(epoch_time[e].step == static_cast<std::int64_t>(3 * (e + 1)));
      // An epoch's time contains its steps' times.
      BOOST_TEST(epoch_time[e].value >= epoch_steps_sum[e]);
      BOOST_TEST(epoch_time[e].value < 3 * kSlept + kSlack);
    }
  }
  BOOST_TEST(timer->steps_timed() == 6);
  BOOST_TEST(timer->elapsed() >= epoch_time[0].value + epoch_time[1].value);
  BOOST_TEST(timer->elapsed() < 6 * kSlept + kSlack);
  BOOST_TEST(!trainer.state().stop_requested());
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_CHECK_THROW(Timer(TimerOptions().time_limit(-1.0)), ConfigError);
  BOOST_CHECK_THROW(Timer(TimerOptions().ema_decay(1.0)), ConfigError);
  BOOST_CHECK_THROW(Timer(TimerOptions().ema_decay(-0.1)), ConfigError);
  BOOST_CHECK_THROW(Timer(TimerOptions().step_freq(0)), ConfigError);
  Timer timer;
  BOOST_TEST((timer.role() == Role::Metrics));
  BOOST_TEST(timer.name() == "timer");
}

BOOST_AUTO_TEST_SUITE_END()
