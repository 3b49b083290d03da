// Checkpoints whose framing and CRC are valid but whose entries no run writes (a forged file, or
// one damaged before it was framed): out-of-range counts, tensors of the wrong shape, generator
// states the generators refuse, callbacks' lists of unequal lengths. Each load is a CheckpointError
// naming the file and the entry, and it changes nothing: the model keeps its weights and the
// trainer its position (found by mutating every entry of a checkpoint under ASan and UBSan,
// where these loads read out of bounds, overflowed counters or half-applied the checkpoint).

#include "resume_setup.hpp"

#include <boost/test/unit_test.hpp>
#include <support/checkpoint_entries.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/early_stopping.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/callbacks/run_report.hpp>
#include <torchbus/callbacks/timer.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

constexpr auto kInt64Max = std::numeric_limits<std::int64_t>::max();

/// ResumeRun with the callbacks whose state has counts, lists and rates: EarlyStopping and a
/// plateau scheduler (a MetricMonitor each), ModelCheckpoint, Timer and RunReport.
struct CallbackRun : ResumeRun {
  explicit CallbackRun(const fs::path& folder, std::uint64_t init_seed = 5) : ResumeRun(init_seed) {
    trainer.add(std::make_shared<EarlyStopping>(
        EarlyStoppingOptions().monitor("train_loss_epoch").check_on(Event::EpochEnd).patience(50)));
    trainer.add(std::make_shared<LearningRateScheduler>(
        ReduceOnPlateauOptions().monitor("train_loss_epoch").check_on(Event::EpochEnd)));
    trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder / "kept")));
    trainer.add(std::make_shared<Timer>());
    trainer.add(std::make_shared<RunReport>(RunReportOptions((folder / "report.html").string())));
  }

  /// The checkpoint section of the callback `name` in `file`, and `key` in it.
  static std::string entry(const fs::path& file, const std::string& name, const std::string& key) {
    return callback_section(file, name) + "/" + key;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(forged_entries)

BOOST_AUTO_TEST_CASE(entries_no_run_writes_are_refused_naming_them_and_change_nothing) {
  const auto folder = scratch("forged_entries", "refused");
  const auto good = folder / "good.tbckpt";
  {
    CallbackRun run(folder);
    run.trainer.on(Event::StepEnd, [&](State& s) {
      if (s.step == 6) run.trainer.save_checkpoint(good);  // in epoch 1, with its order drawn
    });
    run.fit();
  }
  const auto scheduler = CallbackRun::entry(good, "learning_rate_scheduler", "");
  const auto float_points = torch::tensor({0.5, 1.0, 2.0}, torch::kDouble).reshape({1, 3});
  // The Adam state of a parameter: its entries are named by LibTorch's serialization.
  const auto paths = checkpoint_entry_paths(good);
  const auto optimizer_entry = [&](const std::string& leaf) {
    for (const auto& path : paths) {
      if (path.rfind("optimizer/", 0) == 0 && path.size() > leaf.size() &&
          path.compare(path.size() - leaf.size(), leaf.size(), leaf) == 0) {
        return path;
      }
    }
    BOOST_FAIL("the checkpoint has no optimizer entry ending in " << leaf);
    return std::string();
  };
  struct Forgery {
    std::string what;
    std::string entry;
    std::optional<c10::IValue> value;
    std::string expected;  // in the message
  };
  const std::vector<Forgery> forgeries = {
      // The metric history: N x 3 points of integral steps and epochs.
      {"points of 2 columns", "metric_0", c10::IValue(torch::zeros({4, 2}, torch::kDouble)),
       "has a malformed 'metric_0' entry"},
      {"a point of a fractional step", "metric_0", c10::IValue(float_points),
       "point 0 has step 0.5 and epoch 1 (expected integers)"},
      {"no metric names for the series", "metric_names", c10::IValue(std::string()),
       "it names 0 metrics, and the checkpoint holds an entry 'metric_0' beyond them"},
      {"a metric name listed twice", "metric_names", c10::IValue(std::string("a\na")),
       "metric 'a' is listed twice"},
      // The position: counts from 0 to 2^62.
      {"a step of 2^63 - 1", "position", c10::IValue(std::vector<std::int64_t>{1, kInt64Max, 2, 6}),
       "has a malformed 'position'"},
      {"a negative epoch", "position", c10::IValue(std::vector<std::int64_t>{-1, 6, 2, 6}),
       "epoch -1, step 6"},
      {"accumulation 0 with the ranks recorded", "accumulate_grad_batches",
       c10::IValue(std::int64_t{0}), "accumulate_grad_batches 0"},
      {"the accumulation's epoch after the checkpoint's", "accumulate_grad_batches_epoch",
       c10::IValue(std::int64_t{5}),
       "'accumulate_grad_batches_epoch' entry: 5 (expected an epoch "
       "from 0 to the checkpoint's, 1)"},
      {"the accumulation's epoch as text", "accumulate_grad_batches_epoch",
       c10::IValue(std::string("1")), "malformed 'accumulate_grad_batches_epoch'"},
      // Generator states the generators do not take: refused before anything is applied.
      {"a float CPU generator state", "rng", c10::IValue(torch::zeros({5056})),
       "generators section"},
      {"a short CPU generator state", "rng", c10::IValue(torch::zeros({8}, torch::kUInt8)),
       "generators section"},
      {"a float epoch order state", "epoch_start_rng", c10::IValue(torch::zeros({4})),
       "cannot be loaded"},
      // Optimizer state LibTorch's load takes, which would fail at the first step (or count on
      // from a negative step): refused, and the optimizer keeps its state.
      // (No parameter is [7]: the entry found first may be any parameter's.)
      {"Adam's first moment of another shape", optimizer_entry("/exp_avg"),
       c10::IValue(torch::zeros({7})), "has a state tensor of [7] Float"},
      {"Adam's second moment in half precision", optimizer_entry("/exp_avg_sq"),
       c10::IValue(torch::zeros({3}, torch::kHalf)), "its optimizer state is not one"},
      {"Adam's step -1", optimizer_entry("/step"), c10::IValue(std::int64_t{-1}),
       "has step -1 (expected 0 to 2^62)"},
      // Callbacks: counts in range, lists of equal lengths, finite rates and times.
      {"EarlyStopping waiting 2^63 - 1 checks", CallbackRun::entry(good, "early_stopping", "wait"),
       c10::IValue(kInt64Max), "'wait' is 9223372036854775807; expected 0 to 4611686018427387904"},
      {"a plateau scheduler's step of -1", scheduler + "t", c10::IValue(std::int64_t{-1}),
       "'t' is -1"},
      {"more current learning rates than base ones", scheduler + "lrs",
       c10::IValue(std::vector<double>{0.01, 0.01}), "1 base learning rate but 2 current ones"},
      {"a NaN base learning rate", scheduler + "base_lrs",
       c10::IValue(std::vector<double>{std::nan("")}), "holds the learning rate nan"},
      {"ModelCheckpoint's steps shorter than its paths",
       CallbackRun::entry(good, "model_checkpoint", "kept_steps"),
       c10::IValue(std::vector<std::int64_t>{}), "keeps 1 path, 1 score and 0 steps"},
      {"a Timer's NaN elapsed time", CallbackRun::entry(good, "timer", "elapsed"),
       c10::IValue(std::nan("")), "'elapsed' is nan; expected 0 to 1e+12"},
      {"a Timer's elapsed time of 1e300 s", CallbackRun::entry(good, "timer", "elapsed"),
       c10::IValue(1e300), "'elapsed' is 1e+300; expected 0 to 1e+12"},
      {"a negative current learning rate", scheduler + "lrs",
       c10::IValue(std::vector<double>{-1.0}),
       "holds the learning rate -1 (expected finite and >= 0)"},
      {"a world size that is text", "world_size", c10::IValue(std::string("2")),
       "has a malformed 'world_size' entry"},
      {"a RunReport started in the year 292277026596",
       CallbackRun::entry(good, "run_report", "started"), c10::IValue(kInt64Max),
       "'started' is 9223372036854775807"},
      {"a count that is text", CallbackRun::entry(good, "timer", "steps_timed"),
       c10::IValue(std::string("3")), "'steps_timed' is a String; expected an integer"},
  };
  for (const auto& forgery : forgeries) {
    BOOST_TEST_CONTEXT(forgery.what << " (" << forgery.entry << ")") {
      const auto file = folder / "forged.tbckpt";
      rewrite_checkpoint_entry(good, forgery.entry, forgery.value, file);
      CallbackRun target(folder, 77);
      const auto before = snapshot_parameters(*target.model);
      try {
        target.trainer.load_checkpoint(file);
        BOOST_ERROR("loaded");
      } catch (const CheckpointError& error) {
        const std::string what = error.what();
        BOOST_TEST(what.find(file.string()) != std::string::npos, what);
        BOOST_TEST(what.find(forgery.expected) != std::string::npos, what);
      } catch (const std::exception& error) {
        BOOST_ERROR("not a CheckpointError: " << error.what());
      }
      const auto after = snapshot_parameters(*target.model);
      for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(torch::equal(after[i], before[i]));
      BOOST_TEST(target.trainer.state().step == 0);
      BOOST_TEST(target.optimizer.state().empty());  // as fresh as before
    }
  }
  // The same rewrite of an entry with its own value loads: the forgeries alone were refused.
  const auto copy = folder / "copy.tbckpt";
  rewrite_checkpoint_entry(good, "position", c10::IValue(std::vector<std::int64_t>{1, 6, 4, 12}),
                           copy);
  CallbackRun target(folder, 77);
  BOOST_CHECK_NO_THROW(target.trainer.load_checkpoint(copy));
  BOOST_TEST(target.trainer.state().step == 6);
}

BOOST_AUTO_TEST_SUITE_END()
