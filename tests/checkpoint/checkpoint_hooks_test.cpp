// Callback::on_save_checkpoint and on_load_checkpoint: when the trainer calls them and what they
// are told.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// Appends "<name>: <what>" to a log shared by several recorders, for each checkpoint hook
/// ("<hook> <file name> step=<s> epoch=<e> batch=<b>") and where its state goes in and out.
class HookRecorder : public Callback {
 public:
  using Log = std::shared_ptr<std::vector<std::string>>;
  explicit HookRecorder(std::string name, Log log = std::make_shared<std::vector<std::string>>())
      : Callback(std::move(name)), log(std::move(log)) {}
  Log log;

  void on_save_checkpoint(const Checkpoint& checkpoint) override {
    record(describe("on_save_checkpoint", checkpoint));
  }
  void on_load_checkpoint(const Checkpoint& checkpoint) override {
    record(describe("on_load_checkpoint", checkpoint));
  }
  void save_state(torch::serialize::OutputArchive& /*archive*/) const override {
    record("save_state");
  }
  void load_state(torch::serialize::InputArchive& /*archive*/) override { record("load_state"); }

 private:
  void record(const std::string& what) const { log->push_back(name() + ": " + what); }
  static std::string describe(const char* hook, const Checkpoint& checkpoint) {
    return std::string(hook) + " " + checkpoint.path.filename().string() +
           " step=" + std::to_string(checkpoint.step) +
           " epoch=" + std::to_string(checkpoint.epoch) +
           " batch=" + std::to_string(checkpoint.batch_in_epoch);
  }
};

/// A HookRecorder whose on_save_checkpoint (or save_state) throws from the `fail_from`-th call on.
class FailingHooks : public HookRecorder {
 public:
  FailingHooks(std::string name, bool in_save_state, int fail_from)
      : HookRecorder(std::move(name)), in_save_state_(in_save_state), fail_from_(fail_from) {}
  int calls = 0;
  void on_step_end(State&) override { log->push_back(name() + ": StepEnd"); }
  void on_save_checkpoint(const Checkpoint& checkpoint) override {
    HookRecorder::on_save_checkpoint(checkpoint);
    if (!in_save_state_ && ++calls >= fail_from_) throw std::runtime_error("disk full");
  }
  void save_state(torch::serialize::OutputArchive& archive) const override {
    HookRecorder::save_state(archive);
    if (in_save_state_ && ++const_cast<FailingHooks*>(this)->calls >= fail_from_) {
      throw std::runtime_error("disk full");
    }
  }

 private:
  bool in_save_state_;
  int fail_from_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_hooks)

// A checkpoint hook that throws follows the callback's error policy, as a failure during an event
// does: a logger (disable) is disabled and the checkpoint is written, a callback that propagates
// fails the checkpoint.
BOOST_AUTO_TEST_CASE(a_failing_checkpoint_hook_follows_the_callbacks_error_policy) {
  for (const bool in_save_state : {false, true}) {
    BOOST_TEST_CONTEXT((in_save_state ? "save_state" : "on_save_checkpoint")) {
      const TempDir dir("checkpoint_hooks");
      Run run(TrainerOptions().max_epochs(1));
      auto logger = std::make_shared<FailingHooks>("logger", in_save_state, 2);
      logger->set_role(Role::Logger);
      run.trainer.add(logger);
      run.trainer.on(Event::StepEnd, [&](State& s) {
        run.trainer.save_checkpoint(dir.path / ("step-" + std::to_string(s.step) + ".tbckpt"));
      });
      auto data = make_batches(3, 4);
      BOOST_CHECK_NO_THROW(run.trainer.fit(data));
      BOOST_TEST(run.trainer.state().step == 3);
      const auto& failures = run.trainer.bus().subscriber_failures();
      BOOST_TEST_REQUIRE(failures.size() == 1u);
      BOOST_TEST(failures[0].subscriber == "logger");
      BOOST_TEST(failures[0].event == (in_save_state ? "save_state" : "on_save_checkpoint"));
      BOOST_TEST(failures[0].first_error == "disk full");
      BOOST_TEST(failures[0].disabled);
      BOOST_TEST(run.trainer.bus().is_disabled(*logger));
      // Disabled at step 2's checkpoint: no event after it; it is still told of step 3's
      // checkpoint and its state still saved (the hook failing again, counted again).
      BOOST_TEST(failures[0].failures == 2);
      // (A logger's StepEnd runs after the checkpoint's: loggers come last.)
      const std::vector<std::string> expected{
          "logger: on_save_checkpoint step-1.tbckpt step=1 epoch=0 batch=1",
          "logger: save_state",
          "logger: StepEnd",
          "logger: on_save_checkpoint step-2.tbckpt step=2 epoch=0 batch=2",
          "logger: save_state",
          "logger: on_save_checkpoint step-3.tbckpt step=3 epoch=0 batch=3",
          "logger: save_state"};
      BOOST_TEST(*logger->log == expected, boost::test_tools::per_element());
      // Every checkpoint was written; those whose save_state failed hold no state of the logger.
      for (const auto step : {1, 2, 3}) {
        Run resumed;
        auto fresh = std::make_shared<HookRecorder>("logger");
        resumed.trainer.add(fresh);
        resumed.trainer.load_checkpoint(dir.path / ("step-" + std::to_string(step) + ".tbckpt"));
        const bool has_state = !in_save_state || step == 1;
        BOOST_TEST((fresh->log->front() == "logger: load_state") == has_state, "step " << step);
      }
    }
  }
  // The same hook under a propagating policy fails the checkpoint, and the run.
  Run run(TrainerOptions().max_epochs(1));
  auto monitor = std::make_shared<FailingHooks>("monitor", false, 1);
  run.trainer.add(monitor);
  run.trainer.on(Event::StepEnd, [&](State&) { run.trainer.checkpoint_bytes(); });
  auto data = make_batches(3, 4);
  BOOST_CHECK_THROW(run.trainer.fit(data), std::runtime_error);
  BOOST_TEST(run.trainer.bus().subscriber_failures().empty());
}

BOOST_AUTO_TEST_CASE(saving_calls_every_hook_before_any_state_is_written) {
  const TempDir dir("checkpoint_hooks");
  Run run(TrainerOptions().max_epochs(2));
  auto a = std::make_shared<HookRecorder>("a");
  run.trainer.add(a);
  run.trainer.add(std::make_shared<HookRecorder>("b", a->log));
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.epoch == 0 && s.step == 2) run.trainer.save_checkpoint(dir.path / "mid.tbckpt");
  });
  run.trainer.on(Event::EpochEnd, [&](State& s) {
    if (s.epoch == 0) run.trainer.save_checkpoint(dir.path / "end.tbckpt");
  });
  auto data = make_batches(3, 4);
  run.trainer.fit(data);
  // Mid-epoch: this epoch at its batch; at EpochEnd: the next epoch from its start.
  BOOST_TEST(
      *a->log == (std::vector<std::string>{
                     "a: on_save_checkpoint mid.tbckpt step=2 epoch=0 batch=2",
                     "b: on_save_checkpoint mid.tbckpt step=2 epoch=0 batch=2", "a: save_state",
                     "b: save_state", "a: on_save_checkpoint end.tbckpt step=3 epoch=1 batch=0",
                     "b: on_save_checkpoint end.tbckpt step=3 epoch=1 batch=0", "a: save_state",
                     "b: save_state"}),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(checkpoint_bytes_passes_the_destination_it_is_given) {
  Run run;
  auto recorder = std::make_shared<HookRecorder>("r");
  run.trainer.add(recorder);
  run.trainer.checkpoint_bytes("elsewhere/b.tbckpt");
  run.trainer.checkpoint_bytes();
  BOOST_TEST(*recorder->log ==
                 (std::vector<std::string>{
                     "r: on_save_checkpoint b.tbckpt step=0 epoch=0 batch=0", "r: save_state",
                     "r: on_save_checkpoint  step=0 epoch=0 batch=0", "r: save_state"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(loading_calls_every_hook_after_every_state_is_restored) {
  const TempDir dir("checkpoint_hooks");
  const auto file = dir.path / "c.tbckpt";
  {
    Run first(TrainerOptions().max_epochs(1));
    auto a = std::make_shared<HookRecorder>("a");
    first.trainer.add(a);
    first.trainer.add(std::make_shared<HookRecorder>("b", a->log));
    first.trainer.on(Event::StepEnd, [&](State& s) {
      if (s.step == 2) first.trainer.save_checkpoint(file);
    });
    auto data = make_batches(3, 4);
    first.trainer.fit(data);
  }
  Run second;
  auto a = std::make_shared<HookRecorder>("a");
  second.trainer.add(a);
  second.trainer.add(std::make_shared<HookRecorder>("b", a->log));
  second.trainer.load_checkpoint(file);
  BOOST_TEST(*a->log == (std::vector<std::string>{
                            "a: load_state", "b: load_state",
                            "a: on_load_checkpoint c.tbckpt step=2 epoch=0 batch=2",
                            "b: on_load_checkpoint c.tbckpt step=2 epoch=0 batch=2"}),
             boost::test_tools::per_element());
}

// Both hooks see the ranks and the accumulation of the run the checkpoint holds, the same record.
BOOST_AUTO_TEST_CASE(the_record_names_the_ranks_and_the_accumulation_it_was_written_with) {
  const TempDir dir("checkpoint_hooks");
  const auto file = dir.path / "k2.tbckpt";
  struct Seen : Callback {
    Seen() : Callback("seen") {}
    std::vector<Checkpoint> saved, loaded;
    void on_save_checkpoint(const Checkpoint& checkpoint) override { saved.push_back(checkpoint); }
    void on_load_checkpoint(const Checkpoint& checkpoint) override { loaded.push_back(checkpoint); }
  };
  auto data = make_batches(6, 4);
  Run first(TrainerOptions().max_epochs(1).accumulate_grad_batches(2));
  auto seen = std::make_shared<Seen>();
  first.trainer.add(seen);
  first.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step == 2) first.trainer.save_checkpoint(file);
  });
  first.trainer.fit(data);
  Run second(TrainerOptions().max_epochs(1).accumulate_grad_batches(2));
  second.trainer.add(seen);
  second.trainer.load_checkpoint(file);
  BOOST_TEST_REQUIRE(seen->saved.size() == 1u);
  BOOST_TEST_REQUIRE(seen->loaded.size() == 1u);
  for (const auto& record : {seen->saved.front(), seen->loaded.front()}) {
    BOOST_TEST(record.world_size == 1);
    BOOST_TEST(record.accumulate_grad_batches == 2);
    BOOST_TEST(record.step == 2);
    BOOST_TEST(record.batch_in_epoch == 4);
  }
  const auto position = read_checkpoint_position(file);
  BOOST_TEST(position.world_size == 1);
  BOOST_TEST(position.accumulate_grad_batches == 2);
}

BOOST_AUTO_TEST_CASE(a_resume_tells_the_file_it_chose) {
  const TempDir dir("checkpoint_hooks");
  auto data = make_batches(3, 4);
  {
    Run first(TrainerOptions().max_epochs(1));
    first.trainer.on(Event::StepEnd, [&](State& s) {
      first.trainer.save_checkpoint(dir.path / ("step-" + std::to_string(s.step) + ".tbckpt"));
    });
    first.trainer.fit(data);
  }
  Run second(TrainerOptions().max_epochs(1));
  auto recorder = std::make_shared<HookRecorder>("r");
  second.trainer.add(recorder);
  second.trainer.resume_from(dir.path);
  second.trainer.fit(data);
  // The checkpoint holds no state of "r" (the first run had no such callback): only the hook.
  BOOST_TEST(*recorder->log == (std::vector<std::string>{
                                   "r: on_load_checkpoint step-3.tbckpt step=3 epoch=0 batch=3"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_callback_of_another_rank_is_not_called) {
  Run run;
  auto elsewhere = std::make_shared<HookRecorder>("r");
  elsewhere->run_on_rank(1);
  run.trainer.add(elsewhere);
  run.trainer.checkpoint_bytes("x.tbckpt");
  // Its state is still saved, as every callback's.
  BOOST_TEST(*elsewhere->log == (std::vector<std::string>{"r: save_state"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
