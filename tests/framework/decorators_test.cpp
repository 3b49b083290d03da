#include <boost/test/unit_test.hpp>
#include <torchbus/torchbus.hpp>

#include <vector>

using namespace torchbus;

namespace {

std::vector<std::int64_t>& logged_steps() {
  static std::vector<std::int64_t> steps;
  return steps;
}

void log_every_second_step(State& state) {
  logged_steps().push_back(state.step);
}

int& verified_count() {
  static int count = 0;
  return count;
}

}  // namespace

// A free function registered at namespace scope, as NeMo's @on_step_end decorator.
TORCHBUS_SUBSCRIBE(torchbus::on_step_end(torchbus::every(2), log_every_second_step));
// A registered subscription to a custom event that each bus registers later.
TORCHBUS_SUBSCRIBE(torchbus::on("verified", [](torchbus::State&) { ++verified_count(); }));

BOOST_AUTO_TEST_SUITE(decorators)

BOOST_AUTO_TEST_CASE(registered_free_function_receives_its_events) {
  EventBus bus;
  State state;
  logged_steps().clear();
  const auto connections = bus.add_registered();
  BOOST_TEST(connections.size() == registered_subscriptions().size() - 1);  // one waits
  for (int i = 0; i < 5; ++i) {
    ++state.step;
    bus.emit(Event::StepEnd, state);
  }
  BOOST_TEST(logged_steps() == (std::vector<std::int64_t>{2, 4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(registered_subscription_waits_for_its_custom_event) {
  EventBus bus;
  State state;
  verified_count() = 0;
  BOOST_CHECK_NO_THROW(bus.add_registered());
  const auto verified = bus.register_event("verified");
  BOOST_TEST(bus.subscriber_count(verified) == 1u);
  bus.emit(verified, state);
  BOOST_TEST(verified_count() == 1);
}

BOOST_AUTO_TEST_CASE(helpers_turn_lambdas_into_subscriptions) {
  EventBus bus;
  State state;
  std::vector<std::string> calls;
  bus.add(on_epoch_end([&](State&) { calls.emplace_back("epoch_end"); }));
  bus.add(on_batch_start(once(2), [&](State&) { calls.emplace_back("second batch"); }));
  bus.add(on_step_end([&](State&) { calls.emplace_back("late"); }, 10));
  bus.add(on_step_end([&](State&) { calls.emplace_back("early"); }, -10));
  bus.register_event("checked");
  bus.add(on("checked", [&](State&) { calls.emplace_back("checked"); }));
  for (state.global_batch = 0; state.global_batch < 3; ++state.global_batch) {
    bus.emit(Event::BatchStart, state);
  }
  bus.emit(Event::StepEnd, state);
  bus.emit("checked", state);
  bus.emit(Event::EpochEnd, state);
  BOOST_TEST(
      calls == (std::vector<std::string>{"second batch", "early", "late", "checked", "epoch_end"}),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(subscription_to_an_unregistered_custom_event_is_an_error) {
  EventBus bus;
  BOOST_CHECK_THROW(bus.add(on("never_registered", [](State&) {})), ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
