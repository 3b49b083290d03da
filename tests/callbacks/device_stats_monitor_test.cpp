// DeviceStatsMonitor: the host memory every n steps, a growth seen as it happens.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/device_stats_monitor.hpp>

using namespace torchbus;
using namespace torchbus::testing;

BOOST_AUTO_TEST_SUITE(device_stats_monitor)

BOOST_AUTO_TEST_CASE(records_the_resident_and_peak_memory_every_n_steps) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  trainer.add(std::make_shared<DeviceStatsMonitor>(DeviceStatsMonitorOptions().every_n_steps(2)));
  // 256 MiB written at step 4, held to the end of the run: the resident set grows by about that.
  at::Tensor held;
  trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.step == 4) held = torch::ones({64, 1024, 1024});  // 64 Mi floats
      },
      -1);  // before the monitor reads
  auto batches = make_batches(4, 4);
  trainer.fit(batches);
  const auto& metrics = trainer.state().metrics;
  const auto& rss = metrics.series("device/host_rss_mib");
  const auto& peak = metrics.series("device/host_peak_rss_mib");
  BOOST_TEST_REQUIRE(rss.size() == 4u);  // steps 2, 4, 6, 8
  BOOST_TEST_REQUIRE(peak.size() == 4u);
  BOOST_TEST(rss[0].step == 2);
  BOOST_TEST(rss[3].step == 8);
  for (std::size_t i = 0; i < rss.size(); ++i) {
    BOOST_TEST(rss[i].value > 0.0);
    BOOST_TEST(peak[i].value >= rss[i].value - 1.0);  // the peak reads in KiB, the set in pages
  }
  BOOST_TEST(rss[1].value - rss[0].value > 200.0, rss[0].value << " -> " << rss[1].value);
  // read_host_memory agrees while the tensor is still held.
  BOOST_TEST(read_host_memory().rss_mib > rss[0].value + 200.0);
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { DeviceStatsMonitor(DeviceStatsMonitorOptions().every_n_steps(0)); }),
                 "DeviceStatsMonitor: every_n_steps must be >= 1, got 0"));
}

BOOST_AUTO_TEST_SUITE_END()
