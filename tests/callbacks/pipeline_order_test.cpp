// The built-ins place themselves by role and after/before, not by priority numbers: whatever
// priorities a user gives them and in whatever order they are added, metric producers run before
// monitors, schedulers and loggers; weight averaging swaps in before metric producers; checkpoints
// run after monitors, schedulers, weight averaging and loggers; the report after checkpoints; the
// end-of-fit weight swaps after the final save.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
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
#include <torchbus/dispatch_observer.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

using Names = std::vector<std::string>;

/// The labels of `event`'s subscribers in the order they run.
Names run_order(Trainer& trainer, Event event) {
  Names names;
  for (const auto id : dispatch_order(trainer.bus(), index_of(event))) {
    names.push_back(subscriber_label(trainer.bus(), id));
  }
  return names;
}

/// Checks that every name of `first` runs before every name of `then` at each event where both
/// run; returns at how many (event, pair) places both ran, so a check that saw nothing shows.
int require_before(Trainer& trainer, const Names& first, const Names& then) {
  int compared = 0;
  for (std::size_t e = 0; e < kEventCount; ++e) {
    const auto event = static_cast<Event>(e);
    const auto order = run_order(trainer, event);
    const auto position = [&](const std::string& name) {
      return std::find(order.begin(), order.end(), name) - order.begin();
    };
    const auto end = static_cast<std::ptrdiff_t>(order.size());
    for (const auto& a : first) {
      for (const auto& b : then) {
        if (position(a) == end || position(b) == end) continue;
        ++compared;
        BOOST_TEST(position(a) < position(b),
                   a << " must run before " << b << " at " << to_string(event));
      }
    }
  }
  return compared;
}

/// Adds the built-ins in the reverse of the pipeline; with `adversarial`, each gets a priority
/// that alone would run it in that reverse order.
void add_built_ins(Trainer& trainer, const std::filesystem::path& dir, bool adversarial) {
  int priority = -1000;
  const auto add = [&](auto callback) {
    if (adversarial) callback->set_priority(priority += 100);
    trainer.add(callback);
  };
  add(std::make_shared<RunReport>(RunReportOptions((dir / "report.html").string())));
  add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(dir / "checkpoints")));
  add(std::make_shared<ProgressBar>());
  add(std::make_shared<TensorBoardLogger>(TensorBoardLoggerOptions((dir / "tb").string())));
  add(std::make_shared<CsvLogger>(CsvLoggerOptions(dir / "metrics.csv")));
  add(std::make_shared<SimpleLogger>());
  add(std::make_shared<EarlyStopping>(EarlyStoppingOptions().restore_best_weights(true)));
  add(std::make_shared<SWA>());
  add(std::make_shared<LearningRateScheduler>(StepDecayOptions(1)));
  add(std::make_shared<TerminateOnNaN>());
  add(std::make_shared<Timer>());
  add(std::make_shared<GradientStats>());
  add(std::make_shared<ClassificationMetrics>());
  add(std::make_shared<EMA>());
}

void require_pipeline(Trainer& trainer) {
  const Names metrics{"timer", "gradient_stats", "classification_metrics"};
  const Names monitors{"terminate_on_nan", "early_stopping"};
  const Names loggers{"simple_logger", "csv_logger", "tensorboard_logger", "progress_bar"};
  const Names scheduler{"learning_rate_scheduler"};
  const Names checkpoint{"model_checkpoint"};
  const Names report{"run_report"};
  const Names end_swaps{"ema:apply_at_end", "swa:finish", "early_stopping:restore_best_weights"};
  BOOST_TEST(require_before(trainer, {"ema"}, metrics) > 0);
  BOOST_TEST(require_before(trainer, metrics, loggers) > 0);
  BOOST_TEST(require_before(trainer, metrics, monitors) > 0);
  BOOST_TEST(require_before(trainer, metrics, scheduler) > 0);
  BOOST_TEST(require_before(trainer, {"terminate_on_nan"}, scheduler) > 0);
  BOOST_TEST(require_before(trainer, scheduler, {"swa"}) > 0);
  BOOST_TEST(require_before(trainer, monitors, checkpoint) > 0);
  BOOST_TEST(require_before(trainer, scheduler, checkpoint) > 0);
  BOOST_TEST(require_before(trainer, {"ema", "swa"}, checkpoint) > 0);
  BOOST_TEST(require_before(trainer, loggers, checkpoint) > 0);
  BOOST_TEST(require_before(trainer, checkpoint, report) > 0);
  BOOST_TEST(require_before(trainer, checkpoint, end_swaps) == 3);
  BOOST_TEST(require_before(trainer, report, end_swaps) == 3);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_order)

BOOST_AUTO_TEST_CASE(built_ins_keep_their_declared_order_against_any_priorities) {
  const TempDir dir("pipeline_order");
  Run run;
  add_built_ins(run.trainer, dir.path, /*adversarial=*/true);
  BOOST_CHECK_NO_THROW(run.trainer.bus().check_order());
  require_pipeline(run.trainer);
}

BOOST_AUTO_TEST_CASE(built_ins_added_backwards_at_default_priority_run_as_a_pipeline) {
  const TempDir dir("pipeline_order");
  Run run;
  add_built_ins(run.trainer, dir.path, /*adversarial=*/false);
  require_pipeline(run.trainer);
  // A lambda that declares nothing runs after the metric producers and before the schedulers,
  // monitors, loggers and checkpoints, so a metric it records is seen by all of them.
  run.trainer.on(
      Event::EpochEnd, [](State&) {}, named("my_metric"));
  const auto order = run_order(run.trainer, Event::EpochEnd);
  const auto position = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  BOOST_TEST(position("timer") < position("my_metric"));
  BOOST_TEST(position("my_metric") < position("learning_rate_scheduler"));
  BOOST_TEST(position("my_metric") < position("early_stopping"));
  BOOST_TEST(position("my_metric") < position("csv_logger"));
  BOOST_TEST(position("my_metric") < position("model_checkpoint"));
  BOOST_TEST(position("model_checkpoint") < static_cast<std::ptrdiff_t>(order.size()));
}

BOOST_AUTO_TEST_SUITE_END()
