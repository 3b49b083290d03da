// Error policies at dispatch: a subscriber under Disable that throws is logged, counted and, out of
// retries, disconnected while the emission and the run go on; Propagate ends the emission; the
// defaults by role; declarations override them; control exceptions always pass; a disabled
// subscriber stays added (name, registry, filter keys) (docs/events.md, "When a subscriber
// throws").

#include <boost/test/unit_test.hpp>
#include <support/all_roles.hpp>
#include <torchbus/torchbus.hpp>

#include "bus/plumbing.hpp"  // filter counts, private to torchbus_framework

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace torchbus;

namespace {

/// Emits `event` `times` times on fresh states.
void emit(EventPublisher& publisher, Event event, int times) {
  for (int i = 0; i < times; ++i) {
    State state;
    publisher.emit(event, state);
  }
}

/// A logger callback whose StepEnd throws and whose EpochEnd counts its calls.
class BrokenLogger : public Callback {
 public:
  explicit BrokenLogger(int& epoch_ends) : Callback("broken_logger"), epoch_ends_(epoch_ends) {
    set_role(Role::Logger);
  }
  void on_step_end(State&) override { throw std::runtime_error("disk full"); }
  void on_epoch_end(State&) override { ++epoch_ends_; }

 private:
  int& epoch_ends_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(error_policies)

BOOST_AUTO_TEST_CASE(a_logger_that_throws_is_disabled_and_the_others_go_on) {
  EventPublisher publisher;
  auto& bus = publisher.bus();
  int thrower_calls = 0;
  int other_calls = 0;
  bus.on(
      Event::StepEnd,
      [&](State&) {
        ++thrower_calls;
        throw std::runtime_error("tracker unreachable");
      },
      torchbus::with_role(Role::Logger).named("tracker"));
  bus.on(
      Event::StepEnd, [&](State&) { ++other_calls; }, 1);
  BOOST_CHECK_NO_THROW(emit(publisher, Event::StepEnd, 3));
  BOOST_TEST(thrower_calls == 1);
  BOOST_TEST(other_calls == 3);
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 1u);
  const auto& failures = bus.subscriber_failures();
  BOOST_TEST_REQUIRE(failures.size() == 1u);
  BOOST_TEST(failures[0].subscriber == "tracker");
  BOOST_TEST(failures[0].event == "StepEnd");
  BOOST_TEST(failures[0].first_error == "tracker unreachable");
  BOOST_TEST(failures[0].failures == 1);
  BOOST_TEST(failures[0].disabled);
}

BOOST_AUTO_TEST_CASE(the_defaults_by_role) {
  // Loggers and reports are disabled; every other role, and no role, propagates.
  for (const auto role : torchbus::testing::kAllRoles) {
    EventPublisher publisher;
    publisher.bus().on(
        Event::StepEnd, [](State&) { throw std::runtime_error("boom"); },
        torchbus::with_role(role));
    const bool disables = role == Role::Logger || role == Role::Report;
    BOOST_TEST(default_error_policy(role).propagates() == !disables, to_string(role));
    if (disables) {
      BOOST_CHECK_NO_THROW(emit(publisher, Event::StepEnd, 1));
      BOOST_TEST(publisher.bus().subscriber_failures().size() == 1u, to_string(role));
    } else {
      BOOST_CHECK_THROW(emit(publisher, Event::StepEnd, 1), std::runtime_error);
      BOOST_TEST(publisher.bus().subscriber_failures().empty(), to_string(role));
    }
    Callback callback;
    callback.set_role(role);
    BOOST_TEST((callback.error_policy() == default_error_policy(role)), to_string(role));
  }
}

BOOST_AUTO_TEST_CASE(a_declaration_overrides_the_roles_default) {
  EventPublisher publisher;
  auto& bus = publisher.bus();
  bus.on(
      Event::StepEnd, [](State&) { throw std::runtime_error("strict logger"); },
      torchbus::with_role(Role::Logger).with_error_policy(ErrorPolicy::propagate()));
  BOOST_CHECK_THROW(emit(publisher, Event::StepEnd, 1), std::runtime_error);

  EventPublisher other;
  other.bus().on(
      Event::StepEnd, [](State&) { throw std::runtime_error("optional plot"); },
      torchbus::with_error_policy(ErrorPolicy::disable()));
  BOOST_CHECK_NO_THROW(emit(other, Event::StepEnd, 2));
  BOOST_TEST(other.bus().subscriber_failures().at(0).disabled);
  BOOST_TEST(other.bus().subscriber_failures().at(0).subscriber == "subscriber #0");

  // On a callback, the declaration holds whatever the role set before or after it.
  Callback callback;
  callback.set_error_policy(ErrorPolicy::disable(2)).set_role(Role::Checkpoint);
  BOOST_TEST((callback.error_policy() == ErrorPolicy::disable(2)));
  BOOST_CHECK_THROW(ErrorPolicy::disable(-1), ConfigError);
}

BOOST_AUTO_TEST_CASE(retries_forgive_failures_in_a_row_and_a_call_that_returns_resets_them) {
  EventPublisher publisher;
  int calls = 0;
  // Throws on calls 1, 2, 4, 5, 6 and returns on call 3: with two retries it is disabled at call
  // 6, its third failure in a row.
  publisher.bus().on(
      Event::StepEnd,
      [&](State&) {
        if (++calls != 3) throw std::runtime_error("call " + std::to_string(calls));
      },
      torchbus::named("flaky").with_error_policy(ErrorPolicy::disable(2)));
  emit(publisher, Event::StepEnd, 5);
  const auto& failures = publisher.bus().subscriber_failures();
  BOOST_TEST_REQUIRE(failures.size() == 1u);
  BOOST_TEST(failures[0].failures == 4);
  BOOST_TEST(!failures[0].disabled);
  emit(publisher, Event::StepEnd, 3);
  BOOST_TEST(calls == 6);
  BOOST_TEST(failures[0].failures == 5);
  BOOST_TEST(failures[0].disabled);
  BOOST_TEST(failures[0].first_error == "call 1");
}

BOOST_AUTO_TEST_CASE(control_exceptions_pass_and_are_no_failures) {
  EventPublisher publisher;
  publisher.bus().on(
      Event::StepEnd, [](State&) { throw StopTraining(); }, torchbus::with_role(Role::Logger));
  BOOST_CHECK_THROW(emit(publisher, Event::StepEnd, 1), StopTraining);
  BOOST_CHECK_THROW(emit(publisher, Event::StepEnd, 1), StopTraining);
  BOOST_TEST(publisher.bus().subscriber_failures().empty());
}

BOOST_AUTO_TEST_CASE(a_failure_at_action_start_propagates_whatever_the_policy) {
  EventPublisher publisher;
  publisher.bus().on(
      Event::ActionStart | Event::StepEnd, [](State&) { throw std::runtime_error("no folder"); },
      torchbus::with_role(Role::Logger));
  BOOST_CHECK_THROW(emit(publisher, Event::ActionStart, 1), std::runtime_error);
  BOOST_TEST(publisher.bus().subscriber_failures().empty());
  BOOST_CHECK_NO_THROW(emit(publisher, Event::StepEnd, 1));
  BOOST_TEST(publisher.bus().subscriber_failures().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_disabled_callback_loses_every_hook_and_stays_added) {
  EventPublisher publisher;
  auto& bus = publisher.bus();
  int epoch_ends = 0;
  auto logger = std::make_shared<BrokenLogger>(epoch_ends);
  bus.add(logger);
  emit(publisher, Event::EpochEnd, 1);
  emit(publisher, Event::StepEnd, 2);
  emit(publisher, Event::EpochEnd, 1);
  BOOST_TEST(epoch_ends == 1);
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 0u);
  BOOST_TEST(bus.subscriber_count(Event::EpochEnd) == 0u);
  // Still in the registry (its state goes into checkpoints) and its name is still taken.
  BOOST_TEST(bus.find_callback("broken_logger") == logger.get());
  BOOST_CHECK_THROW(bus.add(std::make_shared<BrokenLogger>(epoch_ends)), ConfigError);
  // Removing it afterwards leaves the counts right.
  bus.remove("broken_logger");
  BOOST_TEST(bus.find_callback("broken_logger") == nullptr);
  BOOST_TEST(bus.subscriber_count(Event::EpochEnd) == 0u);
  bus.on(Event::EpochEnd, [&](State&) { ++epoch_ends; });
  BOOST_TEST(bus.subscriber_count(Event::EpochEnd) == 1u);
}

BOOST_AUTO_TEST_CASE(a_disabled_subscriber_is_not_reconnected_when_its_event_is_reordered) {
  EventPublisher publisher;
  auto& bus = publisher.bus();
  std::vector<std::string> log;
  bus.on(
      Event::StepEnd,
      [&](State&) {
        log.emplace_back("logger");
        throw std::runtime_error("boom");
      },
      torchbus::with_role(Role::Logger));
  emit(publisher, Event::StepEnd, 1);
  // A new constrained subscriber makes the event reorder its subscribers before the next emission.
  bus.on(
      Event::StepEnd, [&](State&) { log.emplace_back("after_loggers"); },
      torchbus::after(Role::Logger));
  emit(publisher, Event::StepEnd, 2);
  const std::vector<std::string> expected{"logger", "after_loggers", "after_loggers"};
  BOOST_TEST(log == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_disabled_filtered_subscriber_keeps_its_filter_key) {
  // EvalStart has no counter of its own in State: its filters count their calls (own_count).
  EventPublisher publisher;
  auto& bus = publisher.bus();
  bus.on(
      Event::EvalStart, every(1), [](State&) { throw std::runtime_error("boom"); },
      torchbus::with_role(Role::Logger));
  bus.on(Event::EvalStart, every(2), [](State&) {});
  emit(publisher, Event::EvalStart, 3);
  const auto counts = torchbus::detail::filter_counts(bus);
  BOOST_TEST_REQUIRE(counts.size() == 2u);
  BOOST_TEST(counts[0].first == "EvalStart#0");
  BOOST_TEST(counts[0].second == 1);  // counted until it was disabled
  BOOST_TEST(counts[1].first == "EvalStart#1");
  BOOST_TEST(counts[1].second == 3);
}

BOOST_AUTO_TEST_SUITE_END()
