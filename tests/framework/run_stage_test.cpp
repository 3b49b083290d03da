// Phases at dispatch: a subscriber that sits out the sanity check or a fast dev run is not called
// while State says the run is in it; the defaults by role; declarations override them; filters
// count the calls a phase skips; dispatch allocates nothing (docs/events.md, "Phases").

#include <boost/test/unit_test.hpp>
#include <support/all_roles.hpp>
#include <support/allocation_count.hpp>
#include <torchbus/torchbus.hpp>

#include "bus/plumbing.hpp"  // filter counts, private to torchbus_framework

#include <array>
#include <memory>
#include <string>
#include <vector>

using namespace torchbus;

namespace {

/// The three states a run can be in, as the trainer sets them.
State in_training() {
  return State();
}
State in_sanity_check() {
  State state;
  state.sanity_checking = true;
  return state;
}
State in_fast_dev_run() {
  State state;
  state.fast_dev_run = true;
  return state;
}

/// "<label>:<where>" for each call of `event` by one emission in each phase.
std::vector<std::string> calls_in_each_phase(EventPublisher& publisher, Event event,
                                             std::vector<std::string>& log) {
  log.clear();
  for (auto [where, state] :
       {std::pair{"training", in_training()}, std::pair{"sanity", in_sanity_check()},
        std::pair{"fast_dev", in_fast_dev_run()}}) {
    const auto before = log.size();
    publisher.emit(event, state);
    for (auto i = before; i < log.size(); ++i) log[i] += std::string(":") + where;
  }
  return log;
}

/// A class callback on EvalEnd and ActionEnd, logging its name.
class EvalEndRecorder : public Callback {
 public:
  EvalEndRecorder(std::string name, std::vector<std::string>& log)
      : Callback(std::move(name)), log_(log) {}
  void on_eval_end(State&) override { log_.push_back(name()); }
  void on_action_end(State&) override { log_.push_back(name()); }
  void on_exception(State&) override { log_.push_back(name()); }

 private:
  std::vector<std::string>& log_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(phases)

BOOST_AUTO_TEST_CASE(a_subscription_that_skips_the_sanity_check_is_not_called_during_it) {
  EventPublisher publisher;
  std::vector<std::string> log;
  publisher.bus().on(
      Event::EvalEnd, [&](State&) { log.emplace_back("skips"); },
      torchbus::skip_during(RunStage::SanityCheck));
  publisher.bus().on(Event::EvalEnd, [&](State&) { log.emplace_back("lambda"); });
  const std::vector<std::string> expected{"skips:training", "lambda:training", "lambda:sanity",
                                          "skips:fast_dev", "lambda:fast_dev"};
  BOOST_TEST(calls_in_each_phase(publisher, Event::EvalEnd, log) == expected,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_defaults_by_role) {
  // Schedulers and monitors sit out the sanity check; loggers, checkpoints and reports also fast
  // dev runs; the others (and lambdas without a role) run in every phase.
  const std::vector<std::string> expected{
      "WeightAveraging:training", "Metrics:training",    "Unassigned:training",
      "Scheduler:training",       "Monitor:training",    "Logger:training",
      "Checkpoint:training",      "Report:training",     "WeightAveraging:sanity",
      "Metrics:sanity",           "Unassigned:sanity",   "WeightAveraging:fast_dev",
      "Metrics:fast_dev",         "Unassigned:fast_dev", "Scheduler:fast_dev",
      "Monitor:fast_dev"};
  EventPublisher publisher;
  std::vector<std::string> log;
  for (const auto role : torchbus::testing::kAllRoles) {
    publisher.bus().on(
        Event::EvalEnd, [&log, role](State&) { log.emplace_back(to_string(role)); },
        torchbus::with_role(role));
  }
  BOOST_TEST(calls_in_each_phase(publisher, Event::EvalEnd, log) == expected,
             boost::test_tools::per_element());

  // The same defaults for class callbacks, read back from their placement.
  for (const auto role : torchbus::testing::kAllRoles) {
    Callback callback;
    callback.set_role(role);
    const bool sits_out_sanity = role == Role::Scheduler || role == Role::Monitor ||
                                 role == Role::Logger || role == Role::Checkpoint ||
                                 role == Role::Report;
    const bool sits_out_fast_dev =
        role == Role::Logger || role == Role::Checkpoint || role == Role::Report;
    BOOST_TEST(callback.runs_during(RunStage::SanityCheck) == !sits_out_sanity, to_string(role));
    BOOST_TEST(callback.runs_during(RunStage::FastDevRun) == !sits_out_fast_dev, to_string(role));
  }
}

BOOST_AUTO_TEST_CASE(a_declaration_overrides_the_roles_default_and_the_last_one_wins) {
  Placement placement = torchbus::with_role(Role::Logger).run_during(RunStage::FastDevRun);
  BOOST_TEST(placement.runs_during(RunStage::FastDevRun));
  BOOST_TEST(!placement.runs_during(RunStage::SanityCheck));
  placement.skip_during(RunStage::FastDevRun);
  BOOST_TEST(!placement.runs_during(RunStage::FastDevRun));
  placement.run_during(RunStage::SanityCheck).run_during(RunStage::FastDevRun);
  BOOST_TEST(placement.skipped_stages() == 0u);
  // A role given after the declaration keeps it.
  Placement declared_first = torchbus::skip_during(RunStage::FastDevRun).with_role(Role::Metrics);
  BOOST_TEST(!declared_first.runs_during(RunStage::FastDevRun));
  BOOST_TEST(declared_first.runs_during(RunStage::SanityCheck));
  BOOST_TEST(
      torchbus::with_role(Role::Monitor).run_during(RunStage::SanityCheck).skipped_stages() == 0u);

  EventPublisher publisher;
  std::vector<std::string> log;
  auto logger = std::make_shared<EvalEndRecorder>("logger", log);
  logger->set_role(Role::Logger);
  auto shows_fast_dev = std::make_shared<EvalEndRecorder>("shows_fast_dev", log);
  shows_fast_dev->set_role(Role::Logger).run_during(RunStage::FastDevRun);
  auto metrics_skipping_sanity = std::make_shared<EvalEndRecorder>("metrics_skipping_sanity", log);
  metrics_skipping_sanity->skip_during(RunStage::SanityCheck).set_role(Role::Metrics);
  publisher.bus().add(logger);
  publisher.bus().add(shows_fast_dev);
  publisher.bus().add(metrics_skipping_sanity);
  const std::vector<std::string> expected{
      "metrics_skipping_sanity:training", "logger:training", "shows_fast_dev:training",
      "metrics_skipping_sanity:fast_dev", "shows_fast_dev:fast_dev"};
  BOOST_TEST(calls_in_each_phase(publisher, Event::EvalEnd, log) == expected,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(action_end_closes_the_action_even_when_the_sanity_check_failed) {
  // An exception escaping the sanity check publishes Exception, EvalEnd and ActionEnd with
  // sanity_checking still set: the first two belong to the sanity check, ActionEnd to the action.
  EventPublisher publisher;
  std::vector<std::string> log;
  auto logger = std::make_shared<EvalEndRecorder>("logger", log);
  logger->set_role(Role::Logger);
  publisher.bus().add(logger);
  publisher.bus().on(
      Event::ActionEnd, [&](State&) { log.emplace_back("lambda"); },
      torchbus::skip_during(RunStage::SanityCheck));
  auto state = in_sanity_check();
  for (const auto event : {Event::Exception, Event::EvalEnd, Event::ActionEnd}) {
    publisher.emit_guarded(event, state);
  }
  BOOST_TEST(log == (std::vector<std::string>{"lambda", "logger"}),  // role order
             boost::test_tools::per_element());
  // A fast dev run has no such exception: its ActionEnd is in it.
  log.clear();
  auto fast = in_fast_dev_run();
  publisher.emit(Event::ActionEnd, fast);
  BOOST_TEST(log == std::vector<std::string>{"lambda"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_filter_counts_the_calls_its_phase_skips) {
  // As it counted the calls of a subscriber that returned early before phases were declared: a
  // run with a sanity check keeps the same counts in its checkpoints.
  EventPublisher publisher;
  std::vector<std::string> log;
  publisher.bus().on(
      Event::EvalEnd, torchbus::every(2), [&](State&) { log.emplace_back("every_2"); },
      torchbus::with_role(Role::Monitor).named("every_2"));
  auto sanity = in_sanity_check();
  auto training = in_training();
  publisher.emit(Event::EvalEnd, sanity);  // counted 1, skipped by its phase
  BOOST_TEST(torchbus::detail::filter_counts(publisher.bus()) ==
             (torchbus::detail::FilterCounts{{"every_2", 1}}));
  publisher.emit(Event::EvalEnd, training);  // counted 2: passes
  publisher.emit(Event::EvalEnd, training);  // counted 3
  publisher.emit(Event::EvalEnd, sanity);    // counted 4: passes, but skipped by its phase
  BOOST_TEST(log == std::vector<std::string>{"every_2"}, boost::test_tools::per_element());
  BOOST_TEST(torchbus::detail::filter_counts(publisher.bus()) ==
             (torchbus::detail::FilterCounts{{"every_2", 4}}));
}

BOOST_AUTO_TEST_CASE(dispatch_in_and_out_of_phases_allocates_nothing) {
  EventPublisher publisher;
  auto& bus = publisher.bus();
  int unassigned = 0, logger = 0, monitor = 0;
  bus.on(Event::EvalEnd, [&](State&) { ++unassigned; });
  bus.on(
      Event::EvalEnd, [&](State&) { ++logger; }, torchbus::with_role(Role::Logger));
  bus.on(
      Event::EvalEnd, torchbus::every(1), [&](State&) { ++monitor; },
      torchbus::with_role(Role::Monitor));
  std::vector<std::string> log;
  log.reserve(16);
  auto callback = std::make_shared<EvalEndRecorder>("checkpoint", log);
  callback->set_role(Role::Checkpoint);
  bus.add(callback);
  auto training = in_training();
  auto sanity = in_sanity_check();
  auto fast = in_fast_dev_run();
  publisher.emit(Event::EvalEnd, training);  // the first emission orders the roles
  const auto before = torchbus::testing::allocations();
  for (int i = 0; i < 4; ++i) {
    publisher.emit(Event::EvalEnd, sanity);
    publisher.emit(Event::EvalEnd, fast);
    publisher.emit(Event::EvalEnd, training);
  }
  BOOST_TEST(torchbus::testing::allocations() - before == 0u);
  BOOST_TEST(unassigned == 1 + 4 * 3);
  BOOST_TEST(logger == 1 + 4);
  BOOST_TEST(monitor == 1 + 4 * 2);
  BOOST_TEST(log.size() == 1u + 4u);  // the Checkpoint callback
}

BOOST_AUTO_TEST_SUITE_END()
