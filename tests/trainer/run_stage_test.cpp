// Phases in a fit: which subscribers of each role run at which events during the sanity check, a
// fast dev run and a sanity check that fails (docs/events.md, "Phases").

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/event_sequence.hpp>

#include <map>
#include <memory>
#include <string>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A class callback of one role (named after it) recording the events it sees.
class RoleRecorder : public Callback {
 public:
  explicit RoleRecorder(Role role) : Callback(std::string(to_string(role))) { set_role(role); }
  std::string events;

  void on_action_start(State&) override { record("ActionStart"); }
  void on_epoch_start(State&) override { record("EpochStart"); }
  void on_step_end(State&) override { record("StepEnd"); }
  void on_eval_start(State&) override { record("EvalStart"); }
  void on_eval_end(State&) override { record("EvalEnd"); }
  void on_epoch_end(State&) override { record("EpochEnd"); }
  void on_exception(State&) override { record("Exception"); }
  void on_action_end(State&) override { record("ActionEnd"); }

 private:
  void record(const char* event) { events += (events.empty() ? "" : " ") + std::string(event); }
};

/// A run with a recorder of every role.
struct RolesRun : Run {
  std::map<Role, std::shared_ptr<RoleRecorder>> recorders;

  explicit RolesRun(TrainerOptions options) : Run(std::move(options)) {
    for (const auto role : {Role::WeightAveraging, Role::Metrics, Role::Unassigned, Role::Scheduler,
                            Role::Monitor, Role::Logger, Role::Checkpoint, Role::Report}) {
      recorders[role] = std::make_shared<RoleRecorder>(role);
      trainer.add(recorders[role]);
    }
  }
  /// The events the recorder of `role` saw.
  const std::string& seen_by(Role role) { return recorders.at(role)->events; }
};

const Role kEveryStage[] = {Role::WeightAveraging, Role::Metrics, Role::Unassigned};
const Role kNoSanityCheck[] = {Role::Scheduler, Role::Monitor};
const Role kNoSanityCheckNorFastDevRun[] = {Role::Logger, Role::Checkpoint, Role::Report};

}  // namespace

BOOST_AUTO_TEST_SUITE(phases_in_a_fit)

BOOST_AUTO_TEST_CASE(the_sanity_check_reaches_weight_averaging_metrics_and_unassigned_only) {
  RolesRun run(TrainerOptions().num_sanity_val_steps(2));
  auto train = make_batches(2, 4);
  auto validation = make_batches(3, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  const std::string training = "EpochStart StepEnd StepEnd EvalStart EvalEnd EpochEnd";
  for (const auto role : kEveryStage) {
    BOOST_TEST(run.seen_by(role) == join({"ActionStart EvalStart EvalEnd", training, "ActionEnd"}),
               to_string(role));
  }
  for (const auto role : kNoSanityCheck) {
    BOOST_TEST(run.seen_by(role) == join({"ActionStart", training, "ActionEnd"}), to_string(role));
  }
  for (const auto role : kNoSanityCheckNorFastDevRun) {
    BOOST_TEST(run.seen_by(role) == join({"ActionStart", training, "ActionEnd"}), to_string(role));
  }
}

BOOST_AUTO_TEST_CASE(a_fast_dev_run_reaches_every_role_but_loggers_checkpoints_and_reports) {
  RolesRun run(TrainerOptions().fast_dev_run(1).num_sanity_val_steps(2));  // overridden: none
  auto train = make_batches(4, 4);
  auto validation = make_batches(3, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  const std::string whole_run =
      "ActionStart EpochStart StepEnd EvalStart EvalEnd EpochEnd ActionEnd";
  for (const auto role : kEveryStage) BOOST_TEST(run.seen_by(role) == whole_run, to_string(role));
  for (const auto role : kNoSanityCheck) {
    BOOST_TEST(run.seen_by(role) == whole_run, to_string(role));
  }
  for (const auto role : kNoSanityCheckNorFastDevRun) {
    BOOST_TEST(run.seen_by(role).empty(), to_string(role) << " saw " << run.seen_by(role));
  }
}

BOOST_AUTO_TEST_CASE(a_failed_sanity_check_still_closes_the_action_for_every_role) {
  // Exception and the sanity check's EvalEnd are published with sanity_checking set; ActionEnd
  // closes the action, which every subscriber saw start.
  RolesRun run(TrainerOptions().num_sanity_val_steps(2));
  auto train = make_batches(2, 4);
  auto validation = make_batches(3, 4, /*features=*/5);  // the model takes 4
  message_of<DataError>([&] { run.trainer.fit(train, validation); });
  for (const auto role : kEveryStage) {
    BOOST_TEST(run.seen_by(role) == "ActionStart EvalStart Exception EvalEnd ActionEnd",
               to_string(role));
  }
  for (const auto role : kNoSanityCheck) {
    BOOST_TEST(run.seen_by(role) == "ActionStart ActionEnd", to_string(role));
  }
  for (const auto role : kNoSanityCheckNorFastDevRun) {
    BOOST_TEST(run.seen_by(role) == "ActionStart ActionEnd", to_string(role));
  }
}

BOOST_AUTO_TEST_SUITE_END()
