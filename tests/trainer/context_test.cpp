// The trainer context: state.trainer() and state.action while fit() or evaluate() runs.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// At each event it subscribes to: "<event>:<action>:<whether state.trainer() is `trainer`>".
struct ContextWatch {
  std::vector<std::string> seen;

  explicit ContextWatch(Trainer& trainer) {
    for (const Event event :
         {Event::ActionStart, Event::EpochStart, Event::StepEnd, Event::EvalStart, Event::EvalEnd,
          Event::EpochEnd, Event::ActionEnd}) {
      trainer.on(event, [this, event, &trainer](State& s) {
        const char* action = s.action == Action::Fit        ? "fit"
                             : s.action == Action::Evaluate ? "evaluate"
                                                            : "none";
        seen.push_back(std::string(to_string(event)) + ":" + action + ":" +
                       (&s.trainer() == &trainer ? "this" : "other"));
      });
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_context)

BOOST_AUTO_TEST_CASE(fit_and_evaluate_set_the_context_of_their_own_trainer) {
  Run run(TrainerOptions().max_epochs(1));
  ContextWatch watch(run.trainer);
  auto train = make_batches(1, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  run.trainer.evaluate(validation);
  BOOST_TEST(watch.seen ==
                 (std::vector<std::string>{
                     "ActionStart:fit:this", "EpochStart:fit:this", "StepEnd:fit:this",
                     "EvalStart:fit:this", "EvalEnd:fit:this", "EpochEnd:fit:this",
                     "ActionEnd:fit:this", "ActionStart:evaluate:this", "EvalStart:evaluate:this",
                     "EvalEnd:evaluate:this", "ActionEnd:evaluate:this"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(outside_an_action_the_trainer_is_refused_with_a_clear_message) {
  Run run;
  BOOST_TEST((run.trainer.state().action == Action::None));
  BOOST_TEST(has(message_of<ConfigError>([&] { run.trainer.state().trainer(); }),
                 "outside fit() and evaluate()"));
  auto data = make_batches(1, 4);
  run.trainer.fit(data);
  BOOST_TEST((run.trainer.state().action == Action::None));
  BOOST_CHECK_THROW(run.trainer.state().trainer(), ConfigError);
  BOOST_CHECK_THROW(State().trainer(), ConfigError);
}

BOOST_AUTO_TEST_CASE(the_context_ends_when_an_action_fails) {
  Run run;
  run.trainer.on(Event::StepEnd, [](State&) { throw std::runtime_error("failed"); });
  Action at_action_end = Action::None;
  run.trainer.on(Event::ActionEnd, [&](State& s) { at_action_end = s.action; });
  auto data = make_batches(1, 4);
  BOOST_CHECK_THROW(run.trainer.fit(data), std::runtime_error);
  BOOST_TEST((at_action_end == Action::Fit));
  BOOST_TEST((run.trainer.state().action == Action::None));
  BOOST_CHECK_THROW(run.trainer.state().trainer(), ConfigError);
}

BOOST_AUTO_TEST_CASE(a_callback_asks_its_trainer_to_act_through_the_context) {
  Run run(TrainerOptions().max_epochs(1));
  std::vector<double> evaluated;
  auto validation = make_batches(1, 4, 4, 3, 99);
  // Forward passes through the running trainer, as SWA's batch-norm update does.
  run.trainer.on(Event::ActionEnd, [&](State& s) {
    if (s.action != Action::Fit) return;
    torch::NoGradGuard no_grad;
    const auto output = s.trainer().forward(validation[0].data);
    evaluated.push_back(s.trainer().compute_loss(output, validation[0].target).item<double>());
  });
  auto train = make_batches(2, 4);
  run.trainer.fit(train);
  BOOST_TEST_REQUIRE(evaluated.size() == 1u);
  torch::NoGradGuard no_grad;
  const double expected =
      cross_entropy(run.model->forward(validation[0].data), validation[0].target).item<double>();
  BOOST_TEST(evaluated[0] == expected);
}

BOOST_AUTO_TEST_SUITE_END()
