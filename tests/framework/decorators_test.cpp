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

std::vector<std::string>& listed_events() {
  static std::vector<std::string> events;
  return events;
}

}  // namespace

// A free function registered at namespace scope, as NeMo's @on_step_end decorator.
TORCHBUS_SUBSCRIBE(torchbus::on_step_end(torchbus::every(2), log_every_second_step));
// A registered subscription to a custom event that each bus registers later.
TORCHBUS_SUBSCRIBE(torchbus::on("verified", [](torchbus::State&) { ++verified_count(); }));
// A registered subscription to a list of events, every other occurrence of each.
TORCHBUS_SUBSCRIBE(torchbus::on(torchbus::Event::EvalEnd | torchbus::Event::ActionEnd,
                                torchbus::every(2), [](torchbus::State& state) {
                                  listed_events().push_back(std::to_string(state.eval_batch));
                                }));

BOOST_AUTO_TEST_SUITE(decorators)

BOOST_AUTO_TEST_CASE(registered_free_function_receives_its_events) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  logged_steps().clear();
  const auto connections = bus.add_registered();
  BOOST_TEST(connections.size() == registered_subscriptions().size() - 1);  // one waits
  for (int i = 0; i < 5; ++i) {
    ++state.step;
    publisher.emit(Event::StepEnd, state);
  }
  BOOST_TEST(logged_steps() == (std::vector<std::int64_t>{2, 4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(registered_subscription_waits_for_its_custom_event) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  verified_count() = 0;
  BOOST_CHECK_NO_THROW(bus.add_registered());
  const auto verified = bus.register_event("verified");
  BOOST_TEST(bus.subscriber_count(verified) == 1u);
  verified.emit(state);
  BOOST_TEST(verified_count() == 1);
}

BOOST_AUTO_TEST_CASE(helpers_turn_lambdas_into_subscriptions) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> calls;
  bus.add(on_epoch_end([&](State&) { calls.emplace_back("epoch_end"); }));
  bus.add(on_batch_start(once(2), [&](State&) { calls.emplace_back("second batch"); }));
  bus.add(on_step_end([&](State&) { calls.emplace_back("late"); }, 10));
  bus.add(on_step_end([&](State&) { calls.emplace_back("early"); }, -10));
  const auto checked = bus.register_event("checked");
  bus.add(on("checked", [&](State&) { calls.emplace_back("checked"); }));
  for (state.global_batch = 0; state.global_batch < 3; ++state.global_batch) {
    publisher.emit(Event::BatchStart, state);
  }
  publisher.emit(Event::StepEnd, state);
  checked.emit(state);
  publisher.emit(Event::EpochEnd, state);
  BOOST_TEST(
      calls == (std::vector<std::string>{"second batch", "early", "late", "checked", "epoch_end"}),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(registered_subscription_to_an_event_list_counts_each_event_alone) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  listed_events().clear();
  bus.add_registered();
  BOOST_TEST(bus.subscriber_count(Event::EvalEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::ActionEnd) == 1u);
  // eval_batch tells the occurrences apart: EvalEnd 1..3 are 1..3, ActionEnd 1..3 are 11..13.
  for (int i = 1; i <= 3; ++i) {
    state.eval_batch = i;
    publisher.emit(Event::EvalEnd, state);
    state.eval_batch = 10 + i;
    publisher.emit(Event::ActionEnd, state);
  }
  BOOST_TEST(listed_events() == (std::vector<std::string>{"2", "12"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(helpers_take_event_lists_and_placements) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> calls;
  const auto both = bus.add(on(
      Event::StepEnd | Event::EpochEnd, [&](State&) { calls.emplace_back("listed"); },
      after("named")));
  bus.add(
      on_step_end([&](State&) { calls.emplace_back("named"); }, named("named").with_priority(5)));
  publisher.emit(Event::StepEnd, state);
  publisher.emit(Event::EpochEnd, state);
  BOOST_TEST(calls == (std::vector<std::string>{"named", "listed", "listed"}),
             boost::test_tools::per_element());
  auto copy = both;
  copy.disconnect();
  BOOST_TEST(!both.connected());
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::EpochEnd) == 0u);
}

BOOST_AUTO_TEST_CASE(subscription_to_an_unregistered_custom_event_is_an_error) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  BOOST_CHECK_THROW(bus.add(on("never_registered", [](State&) {})), ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
