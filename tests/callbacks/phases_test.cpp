// The built-ins' phases (docs/events.md, "Phases"): each runs during the sanity check and fast dev
// runs as its role's default says, or as it declares; and the writers write nothing in a fast dev
// run although none of them checks State::fast_dev_run: the bus keeps them out of it.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/all_predictions_same.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>
#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/early_stopping.hpp>
#include <torchbus/callbacks/ema.hpp>
#include <torchbus/callbacks/gradient_stats.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/callbacks/progress_bar.hpp>
#include <torchbus/callbacks/run_report.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/callbacks/swa.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>
#include <torchbus/callbacks/timer.hpp>

#include <filesystem>
#include <memory>
#include <string>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// "<name>: sanity <runs|skips>, fast dev <runs|skips>".
std::string phases_of(const Callback& callback) {
  const auto word = [&](RunStage stage) { return callback.runs_during(stage) ? "runs" : "skips"; };
  return callback.name() + ": sanity " + word(RunStage::SanityCheck) + ", fast dev " +
         word(RunStage::FastDevRun);
}

/// The names in `dir`, joined by spaces.
std::string listing(const std::filesystem::path& dir) {
  std::string names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names += (names.empty() ? "" : " ") + entry.path().filename().string();
  }
  return names;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(builtin_phases)

BOOST_AUTO_TEST_CASE(each_builtin_runs_in_the_phases_it_did_before_the_bus_enforced_them) {
  const auto dir = scratch("builtin_phases", "declared");
  BOOST_TEST(phases_of(EMA()) == "ema: sanity runs, fast dev runs");
  BOOST_TEST(phases_of(SWA(SWAOptions())) == "swa: sanity runs, fast dev runs");
  BOOST_TEST(phases_of(ClassificationMetrics()) ==
             "classification_metrics: sanity runs, fast dev runs");
  BOOST_TEST(phases_of(GradientStats()) == "gradient_stats: sanity runs, fast dev runs");
  BOOST_TEST(phases_of(Timer()) == "timer: sanity runs, fast dev runs");
  BOOST_TEST(phases_of(LearningRateScheduler(LinearWarmupOptions(2))) ==
             "learning_rate_scheduler: sanity skips, fast dev runs");
  BOOST_TEST(phases_of(EarlyStopping()) == "early_stopping: sanity skips, fast dev runs");
  BOOST_TEST(phases_of(TerminateOnNaN()) == "terminate_on_nan: sanity skips, fast dev runs");
  // Declared: it also watches the sanity check.
  BOOST_TEST(phases_of(AllPredictionsSame()) == "all_predictions_same: sanity runs, fast dev runs");
  BOOST_TEST(phases_of(CsvLogger((dir / "m.csv").string())) ==
             "csv_logger: sanity skips, fast dev skips");
  BOOST_TEST(phases_of(TensorBoardLogger((dir / "tb").string())) ==
             "tensorboard_logger: sanity skips, fast dev skips");
  // Declared: they write no file and show a fast dev run.
  BOOST_TEST(phases_of(SimpleLogger()) == "simple_logger: sanity skips, fast dev runs");
  BOOST_TEST(phases_of(ProgressBar()) == "progress_bar: sanity skips, fast dev runs");
  BOOST_TEST(phases_of(ModelCheckpoint(ModelCheckpointOptions(dir / "ckpt"))) ==
             "model_checkpoint: sanity skips, fast dev skips");
  BOOST_TEST(phases_of(RunReport((dir / "report.html").string())) ==
             "run_report: sanity skips, fast dev skips");
}

BOOST_AUTO_TEST_CASE(a_fast_dev_run_writes_nothing) {
  const auto dir = scratch("builtin_phases", "fast_dev_run");
  Run run(TrainerOptions().fast_dev_run(2));
  run.trainer.add(std::make_shared<CsvLogger>(dir / "metrics.csv"));
  run.trainer.add(std::make_shared<TensorBoardLogger>((dir / "tb").string()));
  run.trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(dir / "checkpoints")));
  run.trainer.add(std::make_shared<RunReport>((dir / "report.html").string()));
  auto train = make_batches(4, 4);
  auto validation = make_batches(3, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.trainer.state().step == 2);
  BOOST_TEST(listing(dir).empty(), "written: " << listing(dir));
}

BOOST_AUTO_TEST_SUITE_END()
