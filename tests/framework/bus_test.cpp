#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <torchbus/torchbus.hpp>

#include "bus/plumbing.hpp"  // filter counts, private to torchbus_framework

#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

using namespace torchbus;
using torchbus::testing::contains;

namespace {
/// Message of the torchbus::Error thrown by `action`, or "" when none is thrown.
template <typename Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

/// Keeps every dispatch report, with the labels the bus gives.
class RecordingObserver : public DispatchObserver {
 public:
  explicit RecordingObserver(const EventBus& bus) : bus_(bus) {}
  std::vector<DispatchTiming> timings;

  void on_dispatch(const DispatchTiming& timing) noexcept override { timings.push_back(timing); }
  /// "<event>:<subscriber label>" of every report, in order.
  std::vector<std::string> calls() const {
    std::vector<std::string> out;
    for (const auto& timing : timings) {
      out.push_back(std::string(channel_name(bus_, timing.channel)) + ":" +
                    subscriber_label(bus_, timing.subscriber));
    }
    return out;
  }

 private:
  const EventBus& bus_;
};

/// Detects a callable `emit(Event, State&)` and `emit(std::string_view, State&)` on `T`.
template <typename T, typename = void>
struct CanEmitBuiltin : std::false_type {};
template <typename T>
struct CanEmitBuiltin<
    T, std::void_t<decltype(std::declval<T&>().emit(Event::StepEnd, std::declval<State&>()))>>
    : std::true_type {};
template <typename T, typename = void>
struct CanEmitByName : std::false_type {};
template <typename T>
struct CanEmitByName<T, std::void_t<decltype(std::declval<T&>().emit(std::string_view("StepEnd"),
                                                                     std::declval<State&>()))>>
    : std::true_type {};

// Subscribers get the EventBus: it cannot publish; only the EventPublisher (the Trainer's) can,
// and nothing publishes by name.
static_assert(!CanEmitBuiltin<EventBus>::value);
static_assert(!CanEmitByName<EventBus>::value);
static_assert(CanEmitBuiltin<EventPublisher>::value);
static_assert(!CanEmitByName<EventPublisher>::value);
static_assert(!std::is_default_constructible_v<EventBus>);
static_assert(std::is_convertible_v<CustomEventPublisher, CustomEvent>);
static_assert(!std::is_convertible_v<CustomEvent, CustomEventPublisher>);

// Event lists are built at compile time.
static_assert((Event::StepEnd | Event::EpochEnd).size() == 2);
static_assert((Event::StepEnd | Event::EpochEnd | Event::StepEnd).contains(Event::EpochEnd));
static_assert(!(Event::StepEnd | Event::EpochEnd).contains(Event::BatchEnd));
static_assert(EventList::all().size() == kEventCount);

class StepEndCallback : public Callback {
 public:
  StepEndCallback() : Callback("csv_logger") {}
  int calls = 0;
  void on_step_end(State&) override { ++calls; }
  void on_epoch_end(State&) override { ++calls; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(bus)

BOOST_AUTO_TEST_CASE(emission_order_follows_priority_then_registration) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> order;
  bus.on(
      Event::StepEnd, [&](State&) { order.emplace_back("p5-a"); }, 5);
  bus.on(Event::StepEnd, [&](State&) { order.emplace_back("p0-a"); });
  bus.on(
      Event::StepEnd, [&](State&) { order.emplace_back("p-3"); }, -3);
  bus.on(
      Event::StepEnd, [&](State&) { order.emplace_back("p5-b"); }, 5);
  bus.on(Event::StepEnd, [&](State&) { order.emplace_back("p0-b"); });
  publisher.emit(Event::StepEnd, state);
  const std::vector<std::string> expected{"p-3", "p0-a", "p0-b", "p5-a", "p5-b"};
  BOOST_TEST(order == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(emitting_without_subscribers_does_nothing) {
  // Every other event has a subscriber, BatchEnd had one that was disconnected, and an observer
  // is installed: emitting BatchEnd (or a custom event nobody subscribed to) reaches none of them.
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  RecordingObserver observer(bus);
  set_dispatch_observer(bus, &observer);
  std::vector<std::string> calls;
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    if (event == Event::BatchEnd) continue;
    bus.on(event, [&calls, event](State&) { calls.emplace_back(to_string(event)); });
  }
  bus.on(Event::BatchEnd, [&](State&) { calls.emplace_back("BatchEnd"); }).disconnect();
  const auto unused = bus.register_event("unused");
  bus.on(bus.register_event("used"), [&](State&) { calls.emplace_back("used"); });
  BOOST_TEST(bus.subscriber_count(Event::BatchEnd) == 0u);
  BOOST_TEST(bus.subscriber_count(unused) == 0u);
  BOOST_CHECK_NO_THROW(publisher.emit(Event::BatchEnd, state));
  BOOST_CHECK_NO_THROW(publisher.emit_guarded(Event::BatchEnd, state));
  BOOST_CHECK_NO_THROW(unused.emit(state));
  BOOST_TEST(calls.empty(), "called: " << calls.size() << " subscriber(s), first "
                                       << (calls.empty() ? "" : calls.front()));
  BOOST_TEST(observer.timings.empty());
  // The same emissions do reach subscribers once there are some.
  bus.on(Event::BatchEnd, [&](State&) { calls.emplace_back("BatchEnd"); });
  bus.on(unused, [&](State&) { calls.emplace_back("unused"); });
  publisher.emit(Event::BatchEnd, state);
  unused.emit(state);
  BOOST_TEST(calls == (std::vector<std::string>{"BatchEnd", "unused"}),
             boost::test_tools::per_element());
  BOOST_TEST(observer.timings.size() == 2u);
}

BOOST_AUTO_TEST_CASE(every_counts_from_state_counters_on_several_events) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::int64_t> steps, batches, epochs;
  bus.on(Event::StepEnd, every(3), [&](State& s) { steps.push_back(s.step); });
  bus.on(Event::BatchEnd, every(4), [&](State& s) { batches.push_back(s.global_batch); });
  bus.on(Event::EpochEnd, every(2), [&](State& s) { epochs.push_back(s.epoch); });
  for (state.epoch = 0; state.epoch < 4; ++state.epoch) {
    for (int i = 0; i < 3; ++i) {
      publisher.emit(Event::BatchEnd, state);
      ++state.global_batch;
      ++state.step;
      publisher.emit(Event::StepEnd, state);
    }
    publisher.emit(Event::EpochEnd, state);
  }
  BOOST_TEST(steps == (std::vector<std::int64_t>{3, 6, 9, 12}), boost::test_tools::per_element());
  // global_batch is 0-based: occurrences 4, 8, 12 are batch indices 3, 7, 11.
  BOOST_TEST(batches == (std::vector<std::int64_t>{3, 7, 11}), boost::test_tools::per_element());
  BOOST_TEST(epochs == (std::vector<std::int64_t>{1, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(every_resumes_identically_from_restored_counters) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::int64_t> steps;
  bus.on(Event::StepEnd, every(5), [&](State& s) { steps.push_back(s.step); });
  state.step = 7;  // as if restored from a checkpoint
  for (int i = 0; i < 6; ++i) {
    ++state.step;
    publisher.emit(Event::StepEnd, state);
  }
  BOOST_TEST(steps == (std::vector<std::int64_t>{10}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(once_and_when_filters) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::int64_t> once_steps, when_steps;
  int action_starts = 0;
  bus.on(Event::StepStart, once(2), [&](State& s) { once_steps.push_back(s.step); });
  bus.on(Event::StepEnd, when([](const State& s) { return s.step > 3; }),
         [&](State& s) { when_steps.push_back(s.step); });
  bus.on(Event::ActionStart, once(2), [&](State&) { ++action_starts; });
  for (int i = 0; i < 5; ++i) {
    publisher.emit(Event::StepStart, state);
    ++state.step;
    publisher.emit(Event::StepEnd, state);
  }
  for (int i = 0; i < 3; ++i) publisher.emit(Event::ActionStart, state);
  BOOST_TEST(once_steps == (std::vector<std::int64_t>{1}), boost::test_tools::per_element());
  BOOST_TEST(when_steps == (std::vector<std::int64_t>{4, 5}), boost::test_tools::per_element());
  BOOST_TEST(action_starts == 1);  // ActionStart has no counter: the filter counts its own calls
}

BOOST_AUTO_TEST_CASE(step_end_of_a_step_that_made_no_update_is_not_a_new_occurrence) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::int64_t> steps;
  std::vector<std::int64_t> batches;
  bus.on(Event::StepEnd, every(1), [&](State& s) { steps.push_back(s.step); });
  bus.on(Event::EvalBatchEnd, once(1), [&](State& s) { batches.push_back(s.eval_batch); });
  state.update_skipped = true;  // first window all cancelled: step stays 0
  publisher.emit(Event::StepEnd, state);
  state.update_skipped = false;
  ++state.step;
  publisher.emit(Event::StepEnd, state);
  state.update_skipped = true;  // next window all cancelled: step stays 1
  publisher.emit(Event::StepEnd, state);
  state.update_skipped = false;
  ++state.step;
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(steps == (std::vector<std::int64_t>{1, 2}), boost::test_tools::per_element());
  // Two evaluations of one batch each: the first batch of each passes once(1).
  publisher.emit(Event::EvalBatchEnd, state);
  publisher.emit(Event::EvalBatchEnd, state);
  BOOST_TEST(batches.size() == 2u);
}

BOOST_AUTO_TEST_CASE(bad_filters_are_config_errors) {
  BOOST_TEST(contains(error_message([] { every(0); }), "every(n) needs n >= 1"));
  BOOST_TEST(contains(error_message([] { once(-2); }), "got -2"));
  BOOST_CHECK_THROW(when(nullptr), ConfigError);
}

BOOST_AUTO_TEST_CASE(disconnect_through_handle_and_scope_exit) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  int plain = 0, scoped = 0;
  Connection connection = bus.on(Event::EpochStart, [&](State&) { ++plain; });
  {
    ScopedConnection guard = bus.on(Event::EpochStart, [&](State&) { ++scoped; });
    BOOST_TEST(bus.subscriber_count(Event::EpochStart) == 2u);
    publisher.emit(Event::EpochStart, state);
  }
  BOOST_TEST(bus.subscriber_count(Event::EpochStart) == 1u);
  publisher.emit(Event::EpochStart, state);
  connection.disconnect();
  connection.disconnect();  // idempotent: the count must not go below zero
  BOOST_TEST(!connection.connected());
  BOOST_TEST(bus.subscriber_count(Event::EpochStart) == 0u);
  publisher.emit(Event::EpochStart, state);
  BOOST_TEST(plain == 2);
  BOOST_TEST(scoped == 1);
}

BOOST_AUTO_TEST_CASE(moved_scoped_connection_disconnects_once) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  int calls = 0;
  ScopedConnection outer;
  {
    ScopedConnection inner = bus.on(Event::StepEnd, [&](State&) { ++calls; });
    outer = std::move(inner);
  }
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == 1);
  Connection released = outer.release();
  BOOST_TEST(released.connected());
}

BOOST_AUTO_TEST_CASE(connect_and_disconnect_during_emission) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> calls;
  Connection late;
  Connection victim;
  bus.on(Event::StepEnd, [&](State&) {
    calls.emplace_back("first");
    if (!late.connected())
      late = bus.on(Event::StepEnd, [&](State&) { calls.emplace_back("late"); });
    victim.disconnect();
  });
  victim = bus.on(Event::StepEnd, [&](State&) { calls.emplace_back("victim"); });
  publisher.emit(Event::StepEnd, state);
  // Signals2: a slot connected during an emission is not called by it; a disconnected slot that was
  // not yet called is skipped.
  BOOST_TEST(calls == (std::vector<std::string>{"first"}), boost::test_tools::per_element());
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (std::vector<std::string>{"first", "first", "late"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(custom_events_published_by_their_handle_subscribed_by_name_and_by_id) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  const CustomEventPublisher verified = bus.register_event("batch_verified");
  const CustomEvent looked_up = bus.custom_event("batch_verified");
  int by_handle = 0, by_id = 0, by_name = 0, filtered = 0;
  bus.on(verified, [&](State&) { ++by_handle; });
  bus.on(looked_up, [&](State&) { ++by_id; });
  bus.on("batch_verified", [&](State&) { ++by_name; });
  bus.on(looked_up, every(2), [&](State&) { ++filtered; });
  BOOST_TEST(looked_up.id == verified.event().id);
  BOOST_TEST(bus.name_of(verified) == "batch_verified");
  for (int i = 0; i < 3; ++i) verified.emit(state);
  BOOST_TEST(by_handle == 3);
  BOOST_TEST(by_id == 3);
  BOOST_TEST(by_name == 3);
  BOOST_TEST(filtered == 1);
  BOOST_TEST(bus.subscriber_count(verified) == 4u);
  BOOST_CHECK_THROW(CustomEventPublisher().emit(state), ConfigError);
}

BOOST_AUTO_TEST_CASE(bad_custom_events_are_config_errors) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  bus.register_event("alpha");
  BOOST_TEST(contains(error_message([&] { bus.register_event("alpha"); }), "already registered"));
  BOOST_TEST(contains(error_message([&] { bus.register_event("StepEnd"); }), "built-in event"));
  const auto unknown = error_message([&] { bus.custom_event("beta"); });
  BOOST_TEST(contains(unknown, "unknown custom event 'beta'"));
  BOOST_TEST(contains(unknown, "registered custom events: alpha"));
  BOOST_CHECK_THROW(bus.on("gamma", [](State&) {}), ConfigError);
}

BOOST_AUTO_TEST_CASE(slot_that_throws_propagates_and_stops_later_slots) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  int later = 0;
  bus.on(Event::BatchEnd, [](State&) { throw DataError("bad batch"); });
  bus.on(Event::BatchEnd, [&](State&) { ++later; });
  BOOST_CHECK_THROW(publisher.emit(Event::BatchEnd, state), DataError);
  BOOST_TEST(later == 0);
}

BOOST_AUTO_TEST_CASE(guarded_emission_runs_every_slot_and_logs_errors) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  int later = 0;
  bus.on(Event::Exception, [](State&) { throw std::runtime_error("broken handler"); });
  bus.on(Event::Exception, [&](State&) { ++later; });
  BOOST_CHECK_NO_THROW(publisher.emit_guarded(Event::Exception, state));
  BOOST_TEST(later == 1);
  // The guard is lifted afterwards: a normal emission throws again.
  BOOST_CHECK_THROW(publisher.emit(Event::Exception, state), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(stop_training_lets_the_other_slots_run_then_propagates) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  int later = 0;
  bus.on(Event::EpochEnd, [](State&) { throw StopTraining("patience exhausted"); });
  bus.on(Event::EpochEnd, [&](State&) { ++later; });
  try {
    publisher.emit(Event::EpochEnd, state);
    BOOST_FAIL("StopTraining was not rethrown");
  } catch (const StopTraining& stop) {
    BOOST_TEST(stop.reason() == "patience exhausted");
  }
  BOOST_TEST(later == 1);
}

BOOST_AUTO_TEST_CASE(subscribe_by_builtin_name) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> calls;
  bus.on("step_end", [&](State&) { calls.emplace_back("step_end"); });
  bus.on("StepEnd", [&](State&) { calls.emplace_back("StepEnd"); });
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (std::vector<std::string>{"step_end", "StepEnd"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(observer_sees_each_subscriber_with_its_label_once_per_emission) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  RecordingObserver observer(bus);
  const auto first_id = next_subscriber_id(bus);
  bus.on(
      Event::StepEnd, [](State&) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }, 5);
  bus.add(std::make_shared<StepEndCallback>());
  bus.on(Event::StepEnd, every(2), [](State&) {});
  const auto custom = bus.register_event("batch_verified");
  bus.on(custom, [](State&) {});
  BOOST_TEST(next_subscriber_id(bus) == first_id + 4);
  BOOST_TEST(dispatch_observer(bus) == nullptr);
  set_dispatch_observer(bus, &observer);
  BOOST_TEST(dispatch_observer(bus) == &observer);
  for (int i = 0; i < 2; ++i) {
    ++state.step;
    publisher.emit(Event::StepEnd, state);
  }
  publisher.emit(Event::EpochEnd, state);
  custom.emit(state);
  // The every(2) subscriber ran (and is reported) at step 2 only.
  const std::vector<std::string> expected{
      "StepEnd:csv_logger",
      "StepEnd:subscriber #0 (priority 5)",
      "StepEnd:csv_logger",
      "StepEnd:subscriber #2 (priority 0)",
      "StepEnd:subscriber #0 (priority 5)",
      "EpochEnd:csv_logger",
      "batch_verified:subscriber #3 (priority 0)",
  };
  BOOST_TEST(observer.calls() == expected, boost::test_tools::per_element());
  // Both hooks of the callback share its id; the sleeping subscriber took at least 2 ms.
  BOOST_TEST(observer.timings[0].subscriber == observer.timings[5].subscriber);
  BOOST_TEST(observer.timings[1].nanoseconds >= 2'000'000);
  for (const auto& timing : observer.timings) {
    BOOST_TEST(timing.nanoseconds >= 0);
    BOOST_TEST(timing.depth == 0u);
  }
  BOOST_TEST(channel_name(bus, index_of(Event::StepEnd)) == "StepEnd");
  BOOST_TEST(
      contains(error_message([&] { subscriber_label(bus, 99); }), "no subscriber has id 99"));
  BOOST_TEST(contains(error_message([&] { channel_name(bus, kEventCount + 5); }), "channel"));
}

BOOST_AUTO_TEST_CASE(a_throwing_slot_is_still_timed_and_its_error_propagates_as_before) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  RecordingObserver observer(bus);
  set_dispatch_observer(bus, &observer);
  int later = 0;
  bus.on(Event::BatchEnd, [](State&) { throw DataError("bad batch"); });
  bus.on(Event::BatchEnd, [&](State&) { ++later; });
  BOOST_CHECK_THROW(publisher.emit(Event::BatchEnd, state), DataError);
  BOOST_TEST(later == 0);
  BOOST_TEST(observer.calls() == std::vector<std::string>{"BatchEnd:subscriber #0 (priority 0)"},
             boost::test_tools::per_element());

  // StopTraining ends only its slot: the other runs, both are timed, then it is rethrown.
  observer.timings.clear();
  bus.on(Event::EpochEnd, [](State&) { throw StopTraining("patience exhausted"); });
  bus.on(Event::EpochEnd, [&](State&) { ++later; });
  BOOST_CHECK_THROW(publisher.emit(Event::EpochEnd, state), StopTraining);
  BOOST_TEST(later == 1);
  BOOST_TEST(observer.timings.size() == 2u);

  // Guarded: every slot runs and is timed, the error is logged.
  observer.timings.clear();
  bus.on(Event::Exception, [](State&) { throw std::runtime_error("broken handler"); });
  bus.on(Event::Exception, [&](State&) { ++later; });
  BOOST_CHECK_NO_THROW(publisher.emit_guarded(Event::Exception, state));
  BOOST_TEST(later == 2);
  BOOST_TEST(observer.timings.size() == 2u);
}

BOOST_AUTO_TEST_CASE(nested_emissions_are_reported_first_one_level_deeper) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  RecordingObserver observer(bus);
  const auto inner = bus.register_event("inner");
  bus.on(inner, [](State&) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  bus.on(Event::StepEnd, [&](State& s) { inner.emit(s); });
  set_dispatch_observer(bus, &observer);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST_REQUIRE(
      observer.calls() == (std::vector<std::string>{"inner:subscriber #0 (priority 0)",
                                                    "StepEnd:subscriber #1 (priority 0)"}),
      boost::test_tools::per_element());
  BOOST_TEST(observer.timings[0].depth == 1u);
  BOOST_TEST(observer.timings[1].depth == 0u);
  // The outer time includes the inner one.
  BOOST_TEST(observer.timings[1].nanoseconds >= observer.timings[0].nanoseconds);
}

BOOST_AUTO_TEST_CASE(removing_the_observer_stops_reports_and_one_observer_per_bus) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  RecordingObserver observer(bus);
  RecordingObserver other(bus);
  int calls = 0;
  Connection removed;
  bus.on(Event::StepEnd, [&](State&) {
    ++calls;
    removed.disconnect();  // disconnecting during an observed emission still works
  });
  removed = bus.on(Event::StepEnd, [&](State&) { ++calls; });
  set_dispatch_observer(bus, &observer);
  set_dispatch_observer(bus, &observer);  // the same one again: no change
  BOOST_TEST(contains(error_message([&] { set_dispatch_observer(bus, &other); }),
                      "already has a dispatch"));
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == 1);
  BOOST_TEST(observer.timings.size() == 1u);
  set_dispatch_observer(bus, nullptr);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == 2);
  BOOST_TEST(observer.timings.size() == 1u);
  set_dispatch_observer(bus, &other);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(other.timings.size() == 1u);
}

BOOST_AUTO_TEST_CASE(one_subscription_to_an_event_list_and_one_connection_for_all) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> calls;
  Connection both = bus.on(Event::StepEnd | Event::EpochEnd | Event::ActionEnd,
                           [&](State& s) { calls.push_back(std::to_string(s.step)); });
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::EpochEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::ActionEnd) == 1u);
  BOOST_TEST(bus.subscriber_count(Event::BatchEnd) == 0u);
  state.step = 1;
  publisher.emit(Event::StepEnd, state);
  publisher.emit(Event::BatchEnd, state);
  state.step = 2;
  publisher.emit(Event::EpochEnd, state);
  BOOST_TEST(calls == (std::vector<std::string>{"1", "2"}), boost::test_tools::per_element());
  both.disconnect();
  BOOST_TEST(!both.connected());
  for (const auto event : {Event::StepEnd, Event::EpochEnd, Event::ActionEnd}) {
    BOOST_TEST(bus.subscriber_count(event) == 0u, to_string(event));
    publisher.emit(event, state);
  }
  BOOST_TEST(calls.size() == 2u);
  BOOST_CHECK_THROW(bus.on(EventList(), [](State&) {}), ConfigError);
}

BOOST_AUTO_TEST_CASE(a_filter_on_an_event_list_counts_each_event_alone) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  std::vector<std::string> calls;
  // ActionStart and EvalEnd have no counter: each copy of the filter counts its own event.
  bus.on(Event::ActionStart | Event::EvalEnd, every(2),
         [&](State& s) { calls.push_back(std::to_string(s.eval_batch)); });
  for (int i = 1; i <= 4; ++i) {
    state.eval_batch = i;
    publisher.emit(Event::ActionStart, state);
    if (i % 2 == 1) {
      state.eval_batch = 100 + i;
      publisher.emit(Event::EvalEnd, state);
    }
  }
  // ActionStart occurrences 2 and 4 (eval_batch 2, 4); EvalEnd occurrence 2 (at i = 3).
  BOOST_TEST(calls == (std::vector<std::string>{"2", "103", "4"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(filter_counts_are_keyed_stably_and_restored) {
  // Two buses with the same subscriptions: the counts of one, restored into the other, make it
  // continue where the first stopped.
  struct Setup {
    EventPublisher publisher;
    CustomEventPublisher swa;
    std::vector<std::string> calls;
    Setup() {
      auto& bus = publisher.bus();
      swa = bus.register_event("swa_update");
      bus.on(Event::ActionStart, every(2), [this](State&) { calls.emplace_back("action#0"); });
      bus.on(Event::ActionStart, [this](State&) { calls.emplace_back("plain"); });
      bus.on(Event::ActionStart, once(3), [this](State&) { calls.emplace_back("action#1"); });
      bus.on(
          Event::EvalEnd | Event::ActionEnd, every(3),
          [this](State&) { calls.emplace_back("listed"); }, named("listed"));
      bus.on(
          swa, every(2), [this](State&) { calls.emplace_back("swa"); }, named("swa_logger"));
      bus.on(swa, every(5), [this](State&) { calls.emplace_back("swa#1"); });
    }
    void run(int times) {
      State state;
      for (int i = 0; i < times; ++i) {
        publisher.emit(Event::ActionStart, state);
        publisher.emit(Event::EvalEnd, state);
        swa.emit(state);
        if (i % 2 == 0) publisher.emit(Event::ActionEnd, state);
      }
    }
  };
  Setup whole;
  whole.run(7);
  Setup first;
  first.run(4);
  const auto counts = torchbus::detail::filter_counts(first.publisher.bus());
  using Counts = torchbus::detail::FilterCounts;
  const Counts expected{{"ActionStart#0", 4},    {"ActionStart#1", 4}, {"listed@EvalEnd", 4},
                        {"listed@ActionEnd", 2}, {"swa_logger", 4},    {"swa_update#1", 4}};
  BOOST_TEST_REQUIRE(counts.size() == expected.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    BOOST_TEST(counts[i].first == expected[i].first);
    BOOST_TEST(counts[i].second == expected[i].second, counts[i].first);
  }
  Setup second;
  torchbus::detail::restore_filter_counts(second.publisher.bus(), counts);
  BOOST_CHECK(torchbus::detail::filter_counts(second.publisher.bus()) == counts);
  second.run(3);  // as the last 3 rounds of `whole`
  auto resumed = first.calls;
  resumed.insert(resumed.end(), second.calls.begin(), second.calls.end());
  BOOST_TEST(resumed == whole.calls, boost::test_tools::per_element());
  // Without the restored counts the last rounds fire at other occurrences.
  Setup fresh;
  fresh.run(3);
  BOOST_TEST(fresh.calls != second.calls);
}

BOOST_AUTO_TEST_SUITE_END()
