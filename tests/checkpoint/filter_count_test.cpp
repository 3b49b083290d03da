// Filters on events without a counter (ActionStart, EvalEnd, custom events) count their own calls;
// those counts go into checkpoints, so that a resumed run fires on the same occurrences as an
// uninterrupted one.

#include "resume_setup.hpp"

#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>

#include <filesystem>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

using Calls = std::vector<std::string>;

/// Subscribes every(2) to ActionStart, EvalEnd and the custom event "checked" (emitted at every
/// StepEnd), recording the step each one fired at into `calls`.
void subscribe(Trainer& trainer, Calls& calls) {
  auto& bus = trainer.bus();
  const auto checked = bus.register_event("checked");
  bus.on(
      Event::StepEnd, [checked](State& state) { checked.emit(state); }, named("emit_checked"));
  bus.on(checked, every(2),
         [&calls](State& state) { calls.push_back("checked@" + std::to_string(state.step)); });
  bus.on(Event::EvalEnd, every(2),
         [&calls](State& state) { calls.push_back("eval@" + std::to_string(state.step)); });
  bus.on(Event::ActionStart, every(2),
         [&calls](State& state) { calls.push_back("action@" + std::to_string(state.epoch)); });
}

/// ResumeRun (3 epochs of 4 steps) validating at the end of every epoch.
struct ValidatedRun : ResumeRun {
  void fit_with_validation() {
    IndexedRows rows;
    auto train = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
        rows.map(torch::data::transforms::Stack<>()), 8);
    auto validation = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        rows.map(torch::data::transforms::Stack<>()), 20);
    trainer.fit(*train, *validation);
  }
  double evaluate() {
    IndexedRows rows;
    auto data = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        rows.map(torch::data::transforms::Stack<>()), 20);
    return trainer.evaluate(*data);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(filter_counts)

BOOST_AUTO_TEST_CASE(eval_end_and_custom_event_filters_fire_alike_after_a_mid_epoch_resume) {
  const TempDir folder_holder("filter_counts");
  const auto& folder = folder_holder.path;
  Calls whole;
  {
    ValidatedRun run;
    subscribe(run.trainer, whole);
    run.fit_with_validation();
  }
  // EvalEnd at steps 4, 8, 12: every(2) fires at 8; "checked" at every step: fires at even steps.
  BOOST_TEST_REQUIRE(whole == (Calls{"checked@2", "checked@4", "checked@6", "checked@8", "eval@8",
                                     "checked@10", "checked@12"}),
                     boost::test_tools::per_element());

  // Interrupted after step 5 (the first step of epoch 2), after the custom event of that step.
  Calls resumed;
  {
    ValidatedRun first;
    subscribe(first.trainer, resumed);
    first.trainer.on(
        Event::StepEnd,
        [&](State& state) {
          if (state.step == 5) {
            first.trainer.save_checkpoint(folder / "c.tbckpt");
            throw std::runtime_error("stop here");
          }
        },
        after("emit_checked"));
    BOOST_CHECK_THROW(first.fit_with_validation(), std::runtime_error);
  }
  {
    ValidatedRun second;
    subscribe(second.trainer, resumed);
    second.trainer.resume_from(folder);
    second.fit_with_validation();
  }
  // ActionStart: the interrupted run's and the resumed run's first (the counter is restored to 1
  // after the interrupted fit's ActionStart, so the resumed fit's is the second).
  Calls expected = whole;
  expected.insert(expected.begin() + 2, "action@1");
  BOOST_TEST(resumed == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(action_start_filters_fire_alike_across_a_checkpoint_between_actions) {
  const TempDir folder_holder("filter_counts");
  const auto& folder = folder_holder.path;
  // Six evaluations: every(2) on ActionStart fires at the 2nd, 4th and 6th.
  const auto evaluations = [](ValidatedRun& run, Calls& calls, int count) {
    for (int i = 0; i < count; ++i) {
      calls.push_back("evaluate");
      run.evaluate();
    }
  };
  Calls whole;
  {
    ValidatedRun run;
    subscribe(run.trainer, whole);
    evaluations(run, whole, 6);
  }
  Calls resumed;
  {
    ValidatedRun first;
    subscribe(first.trainer, resumed);
    evaluations(first, resumed, 3);
    first.trainer.save_checkpoint(folder / "c.tbckpt");
  }
  {
    ValidatedRun second;
    subscribe(second.trainer, resumed);
    second.trainer.load_checkpoint(folder / "c.tbckpt");
    evaluations(second, resumed, 3);
  }
  const Calls every_second{"evaluate", "evaluate", "action@0", "eval@0"};
  BOOST_TEST_REQUIRE(whole.size() == 3 * every_second.size());
  for (std::size_t i = 0; i < whole.size(); ++i) {
    BOOST_TEST(whole[i] == every_second[i % every_second.size()], "call " << i);
  }
  BOOST_TEST(resumed == whole, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
