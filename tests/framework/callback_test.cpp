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

/// Overrides two hooks and, as its option says, does not need one of them.
class OptionalBatchHook : public Callback {
 public:
  explicit OptionalBatchHook(bool batches) : Callback("optional_batch_hook"), batches_(batches) {}
  std::vector<std::string> seen;
  EventList unused_hooks() const override { return batches_ ? EventList() : Event::BatchEnd; }
  void on_batch_end(State&) override { seen.emplace_back("BatchEnd"); }
  void on_step_end(State&) override { seen.emplace_back("StepEnd"); }

 private:
  bool batches_;
};

class UnnamedCallback : public Callback {
 public:
  void on_action_start(State&) override {}
};

void emit_every_event(EventPublisher& publisher, State& state) {
  for (std::size_t i = 0; i < kEventCount; ++i) publisher.emit(static_cast<Event>(i), state);
}

// The hooks a class overrides are found at compile time, through intermediate classes.
static_assert(overridden_hooks<Callback>().empty());
static_assert(overridden_hooks<StepCounter>() == (Event::StepEnd | Event::EpochStart));
static_assert(overridden_hooks<EpochHook>() == EventList(Event::EpochEnd));
static_assert(overridden_hooks<EpochAndBatchHook>() == (Event::EpochEnd | Event::BatchEnd));

}  // namespace

BOOST_AUTO_TEST_SUITE(callback)

BOOST_AUTO_TEST_CASE(receives_exactly_the_events_it_overrides) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  auto counter = std::make_shared<StepCounter>();
  const auto connection = bus.add(counter);
  BOOST_TEST(connection.size() == 2u);
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    const bool overridden = event == Event::StepEnd || event == Event::EpochStart;
    BOOST_TEST(bus.subscriber_count(event) == (overridden ? 1u : 0u), to_string(event));
  }
  emit_every_event(publisher, state);
  BOOST_TEST(counter->seen == (std::vector<std::string>{"EpochStart", "StepEnd"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_exact_type_connects_only_its_overrides_even_inherited_ones) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  auto derived = std::make_shared<EpochAndBatchHook>();
  const auto connection = bus.add(derived);
  BOOST_TEST(connection.size() == 2u);
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    const bool overridden = event == Event::EpochEnd || event == Event::BatchEnd;
    BOOST_TEST(bus.subscriber_count(event) == (overridden ? 1u : 0u), to_string(event));
  }
  emit_every_event(publisher, state);
  BOOST_TEST(derived->seen == (std::vector<std::string>{"BatchEnd", "EpochEnd"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(through_a_base_pointer_every_hook_is_connected_and_still_correct) {
  // The static type (Callback, or EpochHook) does not know the object's overrides: every hook is
  // connected, and the ones it does not override run Callback's empty hook.
  for (const bool as_callback : {true, false}) {
    EventPublisher publisher;
    EventBus& bus = publisher.bus();
    State state;
    auto derived = std::make_shared<EpochAndBatchHook>();
    const auto connection = as_callback ? bus.add(std::shared_ptr<Callback>(derived))
                                        : bus.add(std::shared_ptr<EpochHook>(derived));
    BOOST_TEST(connection.size() == kEventCount);
    BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 1u);
    emit_every_event(publisher, state);
    BOOST_TEST(derived->seen == (std::vector<std::string>{"BatchEnd", "EpochEnd"}),
               boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(unused_hooks_are_not_connected_through_any_static_type) {
  for (const bool batches : {true, false}) {
    for (const bool as_callback : {false, true}) {
      EventPublisher publisher;
      EventBus& bus = publisher.bus();
      State state;
      auto callback = std::make_shared<OptionalBatchHook>(batches);
      const auto connection =
          as_callback ? bus.add(std::shared_ptr<Callback>(callback)) : bus.add(callback);
      BOOST_TEST(connection.size() == (as_callback ? kEventCount : 2u) - (batches ? 0u : 1u));
      BOOST_TEST(bus.subscriber_count(Event::BatchEnd) == (batches ? 1u : 0u));
      BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 1u);
      emit_every_event(publisher, state);
      const auto expected = batches ? std::vector<std::string>{"BatchEnd", "StepEnd"}
                                    : std::vector<std::string>{"StepEnd"};
      BOOST_TEST(callback->seen == expected, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_recording_callback_added_as_its_type_or_as_callback_sees_the_same_events) {
  std::vector<std::string> seen[2];
  for (const bool as_callback : {false, true}) {
    EventPublisher publisher;
    State state;
    auto recorder = std::make_shared<RecordingCallback>();
    if (as_callback) {
      publisher.bus().add(std::shared_ptr<Callback>(recorder));
    } else {
      publisher.bus().add(recorder);
    }
    emit_every_event(publisher, state);
    seen[as_callback] = recorder->events;
  }
  BOOST_TEST(seen[0].size() == kEventCount);
  BOOST_TEST(seen[0] == seen[1], boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(recording_callback_sees_every_event_in_emission_order) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  auto recorder = std::make_shared<RecordingCallback>();
  bus.add(recorder);
  publisher.emit(Event::ActionStart, state);
  publisher.emit(Event::StepEnd, state);
  publisher.emit(Event::ActionEnd, state);
  BOOST_TEST(torchbus::testing::joined(recorder->events) == "ActionStart StepEnd ActionEnd");
}

BOOST_AUTO_TEST_CASE(disconnecting_a_callback_removes_its_hooks_and_its_registry_entry) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  auto counter = std::make_shared<StepCounter>();
  auto connection = bus.add(counter);
  BOOST_TEST(connection.connected());
  connection.disconnect();
  BOOST_TEST(!connection.connected());
  emit_every_event(publisher, state);
  BOOST_TEST(counter->seen.empty());
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 0u);
  BOOST_TEST(bus.callbacks().empty());
  BOOST_TEST(bus.find_callback("step_counter") == nullptr);
  // It can be added again, and runs again.
  bus.add(counter);
  emit_every_event(publisher, state);
  BOOST_TEST(counter->seen == (std::vector<std::string>{"EpochStart", "StepEnd"}),
             boost::test_tools::per_element());
  BOOST_TEST(bus.callbacks().size() == 1u);
}

BOOST_AUTO_TEST_CASE(remove_by_name_disconnects_and_unregisters) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  auto counter = std::make_shared<StepCounter>();
  auto epochs = std::make_shared<EpochHook>("epochs");
  bus.add(counter);
  bus.add(epochs);
  bus.remove("step_counter");
  emit_every_event(publisher, state);
  BOOST_TEST(counter->seen.empty());
  BOOST_TEST(epochs->seen.size() == 1u);
  BOOST_TEST(bus.callbacks().size() == 1u);
  BOOST_TEST(bus.callbacks().front() == epochs);
  try {
    bus.remove("step_counter");
    BOOST_FAIL("removing an absent callback was accepted");
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("'step_counter'") != std::string::npos);
    BOOST_TEST(message.find("callbacks present: epochs") != std::string::npos, message);
  }
}

BOOST_AUTO_TEST_CASE(a_callback_removing_itself_from_its_hook_finishes_the_call) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  struct SelfRemoving : Callback {
    SelfRemoving(EventBus& bus, int& calls) : Callback("self_removing"), bus(bus), calls(calls) {}
    EventBus& bus;
    int& calls;
    void on_step_end(State&) override {
      bus.remove("self_removing");  // the registry drops its shared_ptr; the running hook keeps one
      calls += name() == "self_removing" ? 1 : 100;
    }
  };
  int calls = 0;
  bus.add(std::make_shared<SelfRemoving>(bus, calls));  // the bus holds the only shared_ptr
  publisher.emit(Event::StepEnd, state);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == 1);
  BOOST_TEST(bus.callbacks().empty());
}

BOOST_AUTO_TEST_CASE(priority_orders_callbacks_and_lambdas_together) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
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
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(order == (std::vector<std::string>{"lambda@0", "after callback@10", "callback ran",
                                                "lambda@20"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(rank_filter_runs_only_on_the_chosen_rank) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  auto only_rank1 = std::make_shared<StepCounter>();
  only_rank1->run_on_rank(1);
  bus.add(only_rank1);
  state.rank = 0;
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(only_rank1->seen.empty());
  state.rank = 1;
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(only_rank1->seen.size() == 1u);
  BOOST_CHECK_THROW(only_rank1->run_on_rank(-1), ConfigError);
}

BOOST_AUTO_TEST_CASE(names_are_unique_and_default_to_the_type) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  BOOST_TEST(UnnamedCallback().name().find("UnnamedCallback") != std::string::npos);
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
