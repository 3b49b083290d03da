#include <boost/test/unit_test.hpp>
#include <support/recorder.hpp>
#include <torchbus/torchbus.hpp>

#include <memory>

using namespace torchbus;
using torchbus::testing::RecordingCallback;

namespace {

class StepCounter : public Callback {
 public:
  StepCounter() : Callback("step_counter") {}
  std::vector<std::string> seen;
  void on_step_end(State&) override { seen.emplace_back("StepEnd"); }
  void on_epoch_start(State&) override { seen.emplace_back("EpochStart"); }
};

/// Overrides one hook; a subclass overrides another: both must be detected through any static type.
class EpochHook : public Callback {
 public:
  using Callback::Callback;
  std::vector<std::string> seen;
  void on_epoch_end(State&) override { seen.emplace_back("EpochEnd"); }
};
class EpochAndBatchHook : public EpochHook {
 public:
  EpochAndBatchHook() : EpochHook("epoch_and_batch") {}
  void on_batch_end(State&) override { seen.emplace_back("BatchEnd"); }
};

class Unnamed : public Callback {
 public:
  void on_action_start(State&) override {}
};

void emit_every_event(EventBus& bus, State& state) {
  for (std::size_t i = 0; i < kEventCount; ++i) bus.emit(static_cast<Event>(i), state);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(callback)

BOOST_AUTO_TEST_CASE(receives_exactly_the_events_it_overrides) {
  EventBus bus;
  State state;
  auto counter = std::make_shared<StepCounter>();
  const auto connection = bus.add(counter);
  BOOST_TEST(connection.size() == 2u);
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    const bool overridden = event == Event::StepEnd || event == Event::EpochStart;
    BOOST_TEST(bus.subscriber_count(event) == (overridden ? 1u : 0u), to_string(event));
  }
  emit_every_event(bus, state);
  BOOST_TEST(counter->seen == (std::vector<std::string>{"EpochStart", "StepEnd"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(overrides_are_detected_through_a_base_pointer) {
  EventBus bus;
  State state;
  auto derived = std::make_shared<EpochAndBatchHook>();
  std::shared_ptr<Callback> as_base = derived;
  bus.add(as_base);
  BOOST_TEST(bus.subscriber_count(Event::EpochEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::BatchEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 0u);
  emit_every_event(bus, state);
  BOOST_TEST(derived->seen == (std::vector<std::string>{"BatchEnd", "EpochEnd"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(recording_callback_sees_every_event_in_emission_order) {
  EventBus bus;
  State state;
  auto recorder = std::make_shared<RecordingCallback>();
  bus.add(recorder);
  bus.emit(Event::ActionStart, state);
  bus.emit(Event::StepEnd, state);
  bus.emit(Event::ActionEnd, state);
  BOOST_TEST(torchbus::testing::joined(recorder->events) == "ActionStart StepEnd ActionEnd");
}

BOOST_AUTO_TEST_CASE(disconnecting_a_callback_removes_all_its_hooks) {
  EventBus bus;
  State state;
  auto counter = std::make_shared<StepCounter>();
  auto connection = bus.add(counter);
  connection.disconnect();
  emit_every_event(bus, state);
  BOOST_TEST(counter->seen.empty());
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 0u);
}

BOOST_AUTO_TEST_CASE(priority_orders_callbacks_and_lambdas_together) {
  EventBus bus;
  State state;
  std::vector<std::string> order;
  auto late = std::make_shared<StepCounter>();
  late->set_priority(10);
  bus.add(late);
  bus.on(Event::StepEnd, [&](State&) { order.emplace_back("lambda@0"); });
  bus.on(
      Event::StepEnd, [&](State&) { order.emplace_back("lambda@20"); }, 20);
  bus.on(
      Event::StepEnd, [&](State&) { order.emplace_back("after callback@10"); }, 10);
  bus.on(
      Event::StepEnd, [&](State&) { order.emplace_back(late->seen.empty() ? "" : "callback ran"); },
      10);
  bus.emit(Event::StepEnd, state);
  BOOST_TEST(order == (std::vector<std::string>{"lambda@0", "after callback@10", "callback ran",
                                                "lambda@20"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(rank_filter_runs_only_on_the_chosen_rank) {
  EventBus bus;
  State state;
  auto only_rank1 = std::make_shared<StepCounter>();
  only_rank1->run_on_rank(1);
  bus.add(only_rank1);
  state.rank = 0;
  bus.emit(Event::StepEnd, state);
  BOOST_TEST(only_rank1->seen.empty());
  state.rank = 1;
  bus.emit(Event::StepEnd, state);
  BOOST_TEST(only_rank1->seen.size() == 1u);
  BOOST_CHECK_THROW(only_rank1->run_on_rank(-1), ConfigError);
}

BOOST_AUTO_TEST_CASE(names_are_unique_and_default_to_the_type) {
  EventBus bus;
  BOOST_TEST(Unnamed().name().find("Unnamed") != std::string::npos);
  bus.add(std::make_shared<StepCounter>());
  BOOST_TEST(bus.find_callback("step_counter") != nullptr);
  try {
    bus.add(std::make_shared<StepCounter>());
    BOOST_FAIL("a duplicate callback name was accepted");
  } catch (const ConfigError& error) {
    BOOST_TEST(std::string(error.what()).find("'step_counter' is already added") !=
               std::string::npos);
  }
  BOOST_CHECK_THROW(bus.add(std::shared_ptr<Callback>()), ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
