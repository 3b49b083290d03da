// The learning rate the loggers write for a step is the one that step ran with (the `lr` metric),
// not the next step's, which a per-step scheduler sets at AfterOptimizerStep, before StepEnd.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/run_report.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// SimpleLogger, CsvLogger and TensorBoardLogger on `trainer`, every step, into `dir`.
std::shared_ptr<TensorBoardLogger> add_loggers(Trainer& trainer, const std::filesystem::path& dir) {
  trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(dir / "metrics.csv").step_freq(1)));
  trainer.add(std::make_shared<SimpleLogger>(
      SimpleLoggerOptions().step_freq(1).precision(17).log_step_time(false)));
  auto tensorboard = std::make_shared<TensorBoardLogger>(
      TensorBoardLoggerOptions((dir / "tb").string()).step_freq(1));
  trainer.add(tensorboard);
  return tensorboard;
}

/// Checks that the loggers of `add_loggers` wrote, for each of `steps` steps, the rate `used` has
/// for it: the CSV's step rows (and its epoch rows the rate of the epoch's last step), the log's
/// lines and TensorBoard's train/lr.
void check_written_rates(const std::filesystem::path& dir, const CapturedLog& log,
                         const TensorBoardLogger& tensorboard,
                         const std::map<std::int64_t, double>& used, std::size_t steps) {
  std::ifstream csv(dir / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  BOOST_TEST_REQUIRE(line.rfind("kind,step,epoch,wall_time,step_loss,lr", 0) == 0u, line);
  std::size_t step_rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    BOOST_TEST(std::stod(cells.at(5)) == used.at(std::stoll(cells.at(1))), line);
    step_rows += cells.at(0) == "step";
  }
  BOOST_TEST(step_rows == steps);

  std::size_t lines = 0;
  const std::regex format(R"(step (\d+) epoch \d+: step_loss=\S+ lr=(\S+))");
  for (const auto& message : log.messages("info")) {
    std::smatch match;
    if (!std::regex_match(message, match, format)) continue;
    ++lines;
    BOOST_TEST(std::stod(match[2]) == used.at(std::stoll(match[1])), message);
  }
  BOOST_TEST(lines == steps);

  const auto scalars = scalars_of(read_events(tensorboard.file()), "train/lr");
  BOOST_TEST_REQUIRE(scalars.size() == steps);
  for (const auto& [step, value] : scalars) {
    BOOST_TEST(value == static_cast<float>(used.at(step)), "step " << step);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(logged_learning_rate)

BOOST_AUTO_TEST_CASE(loggers_write_the_rate_each_step_ran_with) {
  TempDir dir("logged_lr");
  Run run(TrainerOptions().max_epochs(2));
  // A different rate at every step: 0.1 / (t + 1).
  run.trainer.add(std::make_shared<LearningRateScheduler>(
      [](std::int64_t t, double base) { return base / static_cast<double>(t + 1); }));
  const auto tensorboard = add_loggers(run.trainer, dir.path);
  auto batches = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(batches);

  std::map<std::int64_t, double> used;  // step -> the rate the step ran with
  for (const auto& point : run.trainer.state().metrics.series("lr")) used[point.step] = point.value;
  BOOST_TEST_REQUIRE(used.size() == 6u);
  BOOST_TEST(used.at(2) == 0.05);
  check_written_rates(dir.path, log, *tensorboard, used, 6);
}

// A warm-up that sets each step's rate at BeforeOptimizerStep, after the loggers were added (so
// after their hooks of that event, had they any): the loggers write the rate the update used,
// which the trainer reads after every BeforeOptimizerStep subscriber. None of them needs a hook
// of that event for it.
BOOST_AUTO_TEST_CASE(a_rate_set_at_before_optimizer_step_is_the_one_written) {
  TempDir dir("logged_lr_warm_up");
  Run run(TrainerOptions().max_epochs(1));
  const auto tensorboard = add_loggers(run.trainer, dir.path);
  run.trainer.add(
      std::make_shared<RunReport>(RunReportOptions((dir.path / "report.html").string())));
  BOOST_TEST(run.trainer.bus().subscriber_count(Event::BeforeOptimizerStep) == 0u);
  std::map<std::int64_t, double> used;  // step -> the rate its update used, read by hand
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    auto& options = state.optimizer->param_groups()[0].options();
    options.set_lr(0.01 * static_cast<double>(state.step + 1));
    used[state.step + 1] = options.get_lr();
  });
  auto batches = make_batches(4, 4);
  CapturedLog log;
  run.trainer.fit(batches);

  BOOST_TEST_REQUIRE(used.size() == 4u);
  check_written_rates(dir.path, log, *tensorboard, used, 4);
}

BOOST_AUTO_TEST_SUITE_END()
