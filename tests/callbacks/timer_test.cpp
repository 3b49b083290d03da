// Timer on a scripted clock: step times, moving average, throughput, epoch time, time limit.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/timer.hpp>

#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

bool close(double a, double b) {
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
    BOOST_TEST(close(step_time[i], steps[i]));
    BOOST_TEST(close(step_time_ema[i], ema[i]));
    BOOST_TEST(close(throughput[i], 8.0 / ema[i]));
  }
  BOOST_TEST(close(run.values("epoch_time").at(0), 2.1));
  BOOST_TEST(close(timer->elapsed(), 2.1));
  BOOST_TEST(timer->steps_timed() == 3);
  BOOST_TEST(close(timer->samples_per_second(), 8.0 / ema[2]));
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

BOOST_AUTO_TEST_CASE(no_throughput_without_the_samples_tensor) {
  ClockedRun run(TrainerOptions(), [](std::int64_t) { return 1.0; });
  run.trainer.set_train_step(
      [](Trainer& t, Batch& batch) { return t.compute_loss(t.forward(batch.data), batch.target); });
  run.trainer.add(std::make_shared<Timer>(TimerOptions().clock(run.clock())));
  auto data = make_batches(2, 4);
  run.trainer.fit(data);
  BOOST_TEST(run.trainer.state().metrics.contains("step_time"));
  BOOST_TEST(!run.trainer.state().metrics.contains("samples_per_sec"));
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
  BOOST_TEST(close(before->elapsed(), 1.5));

  // The resumed run has 1.5 s behind it: with a limit of 2 s it stops after one more step.
  ClockedRun second(TrainerOptions(), [](std::int64_t) { return 0.5; });
  auto after = std::make_shared<Timer>(TimerOptions().time_limit(2.0).clock(second.clock()));
  round_trip(*before, *after);
  BOOST_TEST(close(after->elapsed(), 1.5));
  BOOST_TEST(close(after->step_time_ema(), before->step_time_ema()));
  BOOST_TEST(after->steps_timed() == 3);
  second.trainer.add(after);
  second.trainer.fit(data);
  BOOST_TEST(second.trainer.state().step == 1);
  BOOST_TEST(second.trainer.state().stop_requested());
  BOOST_TEST(close(after->elapsed(), 2.0));
}

BOOST_AUTO_TEST_CASE(real_clock_measures_something) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  auto timer = std::make_shared<Timer>();
  trainer.add(timer);
  auto data = make_batches(3, 4);
  trainer.fit(data);
  BOOST_TEST(timer->step_time_ema() > 0.0);
  BOOST_TEST(timer->elapsed() >= timer->step_time_ema());
  BOOST_TEST(!trainer.state().stop_requested());
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_CHECK_THROW(Timer(TimerOptions().time_limit(-1.0)), ConfigError);
  BOOST_CHECK_THROW(Timer(TimerOptions().ema_decay(1.0)), ConfigError);
  BOOST_CHECK_THROW(Timer(TimerOptions().ema_decay(-0.1)), ConfigError);
  BOOST_CHECK_THROW(Timer(TimerOptions().step_freq(0)), ConfigError);
  Timer timer;
  BOOST_TEST(timer.priority() == -100);
  BOOST_TEST(timer.name() == "timer");
}

BOOST_AUTO_TEST_SUITE_END()
