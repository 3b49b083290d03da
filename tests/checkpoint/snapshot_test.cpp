// A checkpoint captured as a snapshot (Trainer::capture_checkpoint, which ModelCheckpoint's
// background writes serialize on their own thread) holds the run as it was when it was captured,
// however long training goes on before its bytes are made: the model, the optimizer's state, a
// built-in's state and a user callback's state that changes in place.

#include "resume_setup.hpp"

#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callbacks/ema.hpp>

#include <map>
#include <optional>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// A user callback whose state is a tensor it changes in place at every step: its state is not
/// a snapshot (the default), so a snapshot serializes it when it is captured.
class RunningSum : public Callback {
 public:
  RunningSum() : Callback("running_sum") {}
  at::Tensor sum = torch::zeros({4});
  void on_step_end(State&) override { sum.add_(1); }
  void save_state(torch::serialize::OutputArchive& archive) const override {
    archive.write("sum", sum);
  }
  void load_state(torch::serialize::InputArchive& archive) override { archive.read("sum", sum); }
};

/// A run of ResumeRun with an EMA (a built-in whose state is a snapshot) and a RunningSum.
struct SnapshotRun : ResumeRun {
  std::shared_ptr<EMA> ema = std::make_shared<EMA>(EMAOptions().decay(0.5));
  std::shared_ptr<RunningSum> running = std::make_shared<RunningSum>();
  explicit SnapshotRun(std::uint64_t init_seed = 5) : ResumeRun(init_seed) {
    trainer.add(ema);
    trainer.add(running);
  }
};

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& tensor : tensors) out.push_back(tensor.clone());
  return out;
}

void check_equal(const std::vector<at::Tensor>& expected, const std::vector<at::Tensor>& actual,
                 const char* what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE(expected.size() == actual.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      BOOST_TEST(torch::equal(expected[i], actual[i]), "tensor " << i);
    }
  }
}

/// Checks that the checkpoints `expected` and `actual` load to the same run.
void check_same_run(const fs::path& expected, const fs::path& actual) {
  SnapshotRun from_expected(77), from_actual(78);
  from_expected.trainer.load_checkpoint(expected);
  from_actual.trainer.load_checkpoint(actual);
  BOOST_TEST(from_expected.trainer.state().step == from_actual.trainer.state().step);
  check_equal(snapshot_parameters(*from_expected.model), snapshot_parameters(*from_actual.model),
              "the model");
  check_equal(adam_state(from_expected.optimizer), adam_state(from_actual.optimizer), "Adam");
  check_equal(from_expected.ema->average(), from_actual.ema->average(), "the EMA's average");
  BOOST_TEST(torch::equal(from_expected.running->sum, from_actual.running->sum));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(snapshot)

BOOST_AUTO_TEST_CASE(holds_the_run_as_it_was_at_capture_while_training_goes_on) {
  const auto folder = scratch("snapshot", "capture");
  const auto file = folder / "snapshot.tbckpt";
  SnapshotRun first;
  std::optional<CheckpointSnapshot> snapshot;
  std::vector<at::Tensor> weights_then, adam_then, ema_then;
  at::Tensor running_then;
  first.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step != 3) return;
    const auto live_before = adam_state(first.optimizer);
    snapshot.emplace(first.trainer.capture_checkpoint(file));
    // The optimizer goes on with its own tensors (the copies went into the snapshot).
    const auto live_after = adam_state(first.optimizer);
    for (std::size_t i = 0; i < live_before.size(); i += 3) {
      BOOST_TEST(live_before[i].is_same(live_after[i]));
      BOOST_TEST(live_before[i + 1].is_same(live_after[i + 1]));
    }
    weights_then = snapshot_parameters(*first.model);
    adam_then = clones(adam_state(first.optimizer));
    ema_then = clones(first.ema->average());
    running_then = first.running->sum.clone();
  });
  first.fit();  // 9 more steps change every one of them in place
  BOOST_REQUIRE(snapshot.has_value());
  BOOST_REQUIRE(!torch::equal(weights_then.front(), first.model->parameters().front()));
  BOOST_REQUIRE(!torch::equal(running_then, first.running->sum));
  BOOST_TEST(snapshot->path() == file);
  write_file_atomically(file, snapshot->bytes());

  SnapshotRun second(/*init_seed=*/77);
  second.trainer.load_checkpoint(file);
  BOOST_TEST(second.trainer.state().step == 3);
  check_equal(weights_then, snapshot_parameters(*second.model), "the model");
  check_equal(adam_then, adam_state(second.optimizer), "Adam's state");
  check_equal(ema_then, second.ema->average(), "the EMA's average");
  BOOST_TEST(torch::equal(running_then, second.running->sum));
}

BOOST_AUTO_TEST_CASE(serializes_once_and_loads_as_the_checkpoint_bytes_of_the_same_moment) {
  const auto folder = scratch("snapshot", "once");
  SnapshotRun run;
  std::optional<CheckpointSnapshot> snapshot;
  std::string bytes_then;
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step != 2) return;
    bytes_then = run.trainer.checkpoint_bytes(folder / "a.tbckpt");
    snapshot.emplace(run.trainer.capture_checkpoint(folder / "a.tbckpt"));
    s.request_stop("captured", StopKind::Interrupted);
  });
  run.fit();
  BOOST_REQUIRE(snapshot.has_value());
  write_file_atomically(folder / "then.tbckpt", bytes_then);
  write_file_atomically(folder / "snapshot.tbckpt", snapshot->bytes());
  BOOST_CHECK_EXCEPTION(snapshot->bytes(), ConfigError, [](const ConfigError& error) {
    return std::string(error.what()).find("already serialized") != std::string::npos;
  });
  // Both load to the same run (the user callback's section is serialized apart in the snapshot).
  check_same_run(folder / "then.tbckpt", folder / "snapshot.tbckpt");
}

BOOST_AUTO_TEST_CASE(a_capture_reuses_only_the_copies_of_snapshots_already_serialized) {
  const auto folder = scratch("snapshot", "reuse");
  SnapshotRun run;
  std::map<std::int64_t, CheckpointSnapshot> snapshots;
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step % 2 != 0) return;
    const auto name = "step-" + std::to_string(s.step);
    write_file_atomically(folder / (name + "-bytes.tbckpt"),
                          run.trainer.checkpoint_bytes(folder / (name + ".tbckpt")));
    snapshots.emplace(s.step, run.trainer.capture_checkpoint(folder / (name + ".tbckpt")));
    // Step 2's snapshot is serialized at once, so step 4's capture writes into its copies; step
    // 4's is still held when step 6 is captured, so step 6 must copy anew.
    if (s.step == 2) write_file_atomically(folder / "step-2.tbckpt", snapshots.at(2).bytes());
    if (s.step == 6) s.request_stop("captured", StopKind::Interrupted);
  });
  run.fit();
  BOOST_REQUIRE(snapshots.size() == 3u);
  write_file_atomically(folder / "step-4.tbckpt", snapshots.at(4).bytes());
  write_file_atomically(folder / "step-6.tbckpt", snapshots.at(6).bytes());
  for (const auto* name : {"step-2", "step-4", "step-6"}) {
    BOOST_TEST_CONTEXT(name) {
      check_same_run(folder / (std::string(name) + "-bytes.tbckpt"),
                     folder / (std::string(name) + ".tbckpt"));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
