// Ordering by name and role: after("name") / before("name") / after(Role) / before(Role) on
// subscriptions and callbacks, resolved per event by a stable topological order with priority,
// then role, then registration order, as tie-breaks.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <torchbus/torchbus.hpp>

#include <string>
#include <type_traits>
#include <vector>

using namespace torchbus;
using torchbus::testing::has;
using torchbus::testing::message_of;

namespace {

using Calls = std::vector<std::string>;

/// Appends its name at StepEnd and EpochEnd.
class Named : public Callback {
 public:
  Named(std::string name, Calls& calls, int priority = 0)
      : Callback(std::move(name), priority), calls_(calls) {}
  void on_step_end(State&) override { calls_.push_back(name()); }
  void on_epoch_end(State&) override { calls_.push_back(name()); }

 private:
  Calls& calls_;
};

/// A slot that appends `label`.
EventBus::Slot record(Calls& calls, std::string label) {
  return [&calls, label = std::move(label)](State&) { calls.push_back(label); };
}

// after(3) is a filter (filter.hpp), after("x") a placement: the overloads do not collide.
static_assert(std::is_same_v<decltype(after(3)), Filter>);
static_assert(std::is_same_v<decltype(before(std::int64_t{3})), Filter>);
static_assert(std::is_same_v<decltype(after("EarlyStopping")), Placement>);
static_assert(std::is_same_v<decltype(before(std::string("x"))), Placement>);
static_assert(std::is_same_v<decltype(after(Role::Metrics)), Placement>);

}  // namespace

BOOST_AUTO_TEST_SUITE(subscription_order)

BOOST_AUTO_TEST_CASE(after_and_before_override_priority_and_registration_order) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  // Registered in the reverse of the wanted order, with priorities that say the opposite.
  bus.on(Event::StepEnd, record(calls, "checkpoint"), named("checkpoint").with_priority(-10));
  bus.on(Event::StepEnd, record(calls, "logger"),
         after("metrics").before("checkpoint").named("logger").with_priority(-20));
  bus.on(Event::StepEnd, record(calls, "metrics"), Placement(50).named("metrics"));
  bus.on(Event::StepEnd, record(calls, "free"), 100);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"metrics", "logger", "checkpoint", "free"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unconstrained_subscribers_keep_priority_then_registration_order) {
  // Kahn's ready set is ordered by priority, then registration: a constraint moves only what it
  // must.
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  bus.on(Event::StepEnd, record(calls, "b@0"), named("b"));
  bus.on(Event::StepEnd, record(calls, "c@5"), 5);
  bus.on(Event::StepEnd, record(calls, "a@0-after-d"), after("d"));
  bus.on(Event::StepEnd, record(calls, "d@-5"), named("d").with_priority(-5));
  bus.on(Event::StepEnd, record(calls, "e@0"));
  bus.on(Event::StepEnd, record(calls, "f@-9-after-c"), after("c2").with_priority(-9));
  bus.on(Event::StepEnd, record(calls, "c2@1"), named("c2").with_priority(1));
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"d@-5", "b@0", "a@0-after-d", "e@0", "c2@1", "f@-9-after-c", "c@5"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(callbacks_and_named_subscriptions_share_one_namespace) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  auto early_stopping = std::make_shared<Named>("EarlyStopping", calls, 50);
  auto model_checkpoint = std::make_shared<Named>("ModelCheckpoint", calls, 10);
  model_checkpoint->after("EarlyStopping");
  bus.add(model_checkpoint);
  bus.add(early_stopping);
  bus.on(Event::StepEnd, record(calls, "my_logger"),
         after("EarlyStopping").before("ModelCheckpoint").named("my_logger"));
  auto late = std::make_shared<Named>("late", calls, -100);
  late->after("my_logger");  // my_logger is not on EpochEnd: no constraint there
  bus.add(late);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"EarlyStopping", "my_logger", "late", "ModelCheckpoint"}),
             boost::test_tools::per_element());
  calls.clear();
  publisher.emit(Event::EpochEnd, state);
  BOOST_TEST(calls == (Calls{"late", "EarlyStopping", "ModelCheckpoint"}),
             boost::test_tools::per_element());
  BOOST_CHECK_NO_THROW(bus.check_order());
  // One namespace: a subscription cannot take a callback's name, nor a callback a subscription's.
  BOOST_TEST(has(message_of<ConfigError>(
                     [&] { bus.on(Event::StepEnd, record(calls, "x"), named("EarlyStopping")); }),
                 "'EarlyStopping' is already connected"));
  BOOST_CHECK_THROW(bus.add(std::make_shared<Named>("my_logger", calls)), ConfigError);
}

BOOST_AUTO_TEST_CASE(describe_prints_the_resolved_order) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  Calls calls;
  bus.add(std::make_shared<Named>("EarlyStopping", calls, 50));
  bus.on(Event::StepEnd, record(calls, "x"), after("EarlyStopping").named("my_logger"));
  bus.on(Event::StepEnd, record(calls, "y"), -3);
  const auto text = bus.describe(Event::StepEnd);
  BOOST_TEST(text ==
                 "StepEnd: 3 subscribers, in the order they run:\n"
                 "  1. subscriber #2 (priority -3)\n"
                 "  2. EarlyStopping (priority 50)\n"
                 "  3. my_logger (priority 0, after EarlyStopping)\n",
             text);
  BOOST_TEST(bus.describe(Event::BatchEnd) == "BatchEnd: 0 subscribers\n");
  const auto custom = bus.register_event("swa_update");
  bus.on(custom, record(calls, "z"));
  BOOST_TEST(has(bus.describe(custom), "swa_update: 1 subscriber, in the order they run:"));
}

BOOST_AUTO_TEST_CASE(an_unknown_name_is_a_config_error_naming_who_asked) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  auto checkpoint = std::make_shared<Named>("ModelCheckpoint", calls);
  checkpoint->after("EarlyStoping");  // misspelt
  bus.add(checkpoint);
  bus.on(Event::StepEnd, record(calls, "logger"), named("logger"));
  const auto message = message_of<ConfigError>([&] { bus.check_order(); });
  BOOST_TEST(has(message, "callback 'ModelCheckpoint' asks to run after 'EarlyStoping'"));
  BOOST_TEST(has(message, "known names: ModelCheckpoint, logger"));
  // Emitting does not need the name: a constraint on an absent subscriber imposes nothing.
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"ModelCheckpoint", "logger"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_cycle_is_a_config_error_naming_its_members) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  bus.on(Event::StepEnd, record(calls, "outside"), named("outside"));
  bus.on(Event::StepEnd, record(calls, "a"), named("a").after("c"));
  bus.on(Event::StepEnd, record(calls, "b"), named("b").after("a").after("outside"));
  bus.on(Event::StepEnd, record(calls, "c"), named("c").after("b"));
  bus.on(Event::EpochEnd, record(calls, "fine"), after("a"));  // no cycle on EpochEnd
  const auto message = message_of<ConfigError>([&] { bus.check_order(); });
  BOOST_TEST(has(message, "subscribers of StepEnd cannot be ordered"));
  BOOST_TEST(has(message, "a -> b -> c -> a"));
  BOOST_TEST(!has(message, "outside"));
  BOOST_CHECK_THROW(publisher.emit(Event::StepEnd, state), ConfigError);
  BOOST_CHECK_THROW(bus.describe(Event::StepEnd), ConfigError);
  BOOST_TEST(calls.empty());
  // A guarded emission still runs everyone (in the last order), logging the error.
  BOOST_CHECK_NO_THROW(publisher.emit_guarded(Event::StepEnd, state));
  BOOST_TEST(calls.size() == 4u);
}

BOOST_AUTO_TEST_CASE(reordering_keeps_handles_valid_and_follows_connects_and_disconnects) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  ScopedConnection first = bus.on(Event::StepEnd, record(calls, "first"), named("first"));
  Connection second = bus.on(Event::StepEnd, record(calls, "second"), before("first"));
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"second", "first"}), boost::test_tools::per_element());
  // A new subscriber on the constrained event reorders it again before the next emission.
  Connection third = bus.on(Event::StepEnd, record(calls, "third"), Placement(-1).before("second"));
  calls.clear();
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"third", "second", "first"}), boost::test_tools::per_element());
  // The handles still disconnect the reconnected slots.
  second.disconnect();
  calls.clear();
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"third", "first"}), boost::test_tools::per_element());
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 2u);
  first.disconnect();
  third.disconnect();
  BOOST_TEST(bus.subscriber_count(Event::StepEnd) == 0u);
  calls.clear();
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls.empty());
}

BOOST_AUTO_TEST_CASE(a_subscriber_connected_during_an_emission_is_ordered_at_the_next_one) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  Connection late;
  bus.on(Event::StepEnd, record(calls, "anchor"), named("anchor"));
  bus.on(Event::StepEnd, [&](State& s) {
    calls.emplace_back("connector");
    if (!late.connected()) {
      late = bus.on(Event::StepEnd, record(calls, "late"), before("anchor"));
      publisher.emit(Event::StepEnd, s);  // nested: the channel is not reordered while emitted
    }
  });
  publisher.emit(Event::StepEnd, state);
  // The outer emission does not call the new slot (Signals2); the nested one calls it last.
  BOOST_TEST(calls == (Calls{"anchor", "connector", "anchor", "connector", "late"}),
             boost::test_tools::per_element());
  calls.clear();
  publisher.emit(Event::StepEnd, state);
  // Ready first: connector (registered before late), then late, then anchor, which waited for it.
  BOOST_TEST(calls == (Calls{"connector", "late", "anchor"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(callback_after_and_before_take_effect_when_added) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  auto a = std::make_shared<Named>("a", calls, 10);
  auto b = std::make_shared<Named>("b", calls, 0);
  auto c = std::make_shared<Named>("c", calls, 0);
  c->before("a").after("b");
  b->after("a");  // with c's constraints: a cycle a -> b -> c -> a
  bus.add(a);
  bus.add(b);
  bus.add(c);
  BOOST_TEST(has(message_of<ConfigError>([&] { bus.check_order(); }), "a -> b -> c -> a"));
  bus.remove("b");
  BOOST_TEST(has(message_of<ConfigError>([&] { bus.check_order(); }),
                 "callback 'c' asks to run after 'b'"));
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"c", "a"}), boost::test_tools::per_element());
  BOOST_TEST(a->placement().after_names().empty());
  BOOST_TEST(c->placement().before_names() == std::vector<std::string>{"a"},
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(after_a_role_runs_after_every_member_of_it_whatever_the_priorities) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  // The logger is registered first with the lowest priority; the two metric producers last with
  // the highest: only the role constraint puts the logger after both.
  bus.on(Event::StepEnd, record(calls, "logger"),
         with_role(Role::Logger).after(Role::Metrics).with_priority(-100));
  bus.on(Event::StepEnd, record(calls, "free"));
  bus.on(Event::StepEnd, record(calls, "accuracy"), with_role(Role::Metrics).with_priority(100));
  auto timer = std::make_shared<Named>("timer", calls, 200);
  timer->set_role(Role::Metrics);
  bus.add(timer);
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"free", "accuracy", "timer", "logger"}),
             boost::test_tools::per_element());
  BOOST_TEST((timer->role() == Role::Metrics));
}

BOOST_AUTO_TEST_CASE(before_a_role_and_a_role_nobody_has) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  auto checkpoint = std::make_shared<Named>("checkpoint", calls, -50);
  checkpoint->set_role(Role::Checkpoint);
  bus.add(checkpoint);
  // before(Role::Checkpoint) from a later, higher-priority subscription; after(Role::Report),
  // which no subscriber has, imposes nothing and is no error (a role is never an unknown name).
  bus.on(Event::StepEnd, record(calls, "flush"),
         before(Role::Checkpoint).after(Role::Report).with_priority(10));
  BOOST_CHECK_NO_THROW(bus.check_order());
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"flush", "checkpoint"}), boost::test_tools::per_element());
  // A member of a role is not ordered against itself: after(its own role) is no cycle.
  auto second = std::make_shared<Named>("second_checkpoint", calls);
  second->set_role(Role::Checkpoint).after(Role::Checkpoint);
  bus.add(second);
  calls.clear();
  publisher.emit(Event::StepEnd, state);
  BOOST_TEST(calls == (Calls{"flush", "checkpoint", "second_checkpoint"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(equal_priorities_run_in_role_order_then_registration_order) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  State state;
  Calls calls;
  // Registered backwards through the pipeline; no constraint, one priority.
  bus.on(Event::EpochEnd, record(calls, "report"), with_role(Role::Report));
  bus.on(Event::EpochEnd, record(calls, "checkpoint"), with_role(Role::Checkpoint));
  bus.on(Event::EpochEnd, record(calls, "logger"), with_role(Role::Logger));
  bus.on(Event::EpochEnd, record(calls, "monitor"), with_role(Role::Monitor));
  bus.on(Event::EpochEnd, record(calls, "scheduler"), with_role(Role::Scheduler));
  bus.on(Event::EpochEnd, record(calls, "mine"));
  bus.on(Event::EpochEnd, record(calls, "metrics"), with_role(Role::Metrics));
  bus.on(Event::EpochEnd, record(calls, "ema"), with_role(Role::WeightAveraging));
  bus.on(Event::EpochEnd, record(calls, "first"), -1);  // priority still comes first
  publisher.emit(Event::EpochEnd, state);
  BOOST_TEST(calls == (Calls{"first", "ema", "metrics", "mine", "scheduler", "monitor", "logger",
                             "checkpoint", "report"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(role_constraints_take_part_in_cycles_and_describe) {
  EventPublisher publisher;
  EventBus& bus = publisher.bus();
  Calls calls;
  auto logger = std::make_shared<Named>("logger", calls);
  logger->set_role(Role::Logger).after(Role::Metrics);
  bus.add(logger);
  bus.on(Event::StepEnd, record(calls, "x"),
         named("late_metric").with_role(Role::Metrics).after("logger"));
  BOOST_TEST(
      has(message_of<ConfigError>([&] { bus.check_order(); }), "logger -> late_metric -> logger"));
  bus.remove("late_metric");
  bus.on(Event::StepEnd, record(calls, "y"), named("accuracy").with_role(Role::Metrics));
  const auto text = bus.describe(Event::StepEnd);
  BOOST_TEST(text ==
                 "StepEnd: 2 subscribers, in the order they run:\n"
                 "  1. accuracy (Metrics, priority 0)\n"
                 "  2. logger (Logger, priority 0, after role Metrics)\n",
             text);
}

BOOST_AUTO_TEST_SUITE_END()
