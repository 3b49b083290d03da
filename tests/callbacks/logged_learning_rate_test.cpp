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

BOOST_AUTO_TEST_SUITE(logged_learning_rate)

BOOST_AUTO_TEST_CASE(loggers_write_the_rate_each_step_ran_with) {
  TempDir dir("logged_lr");
  Run run(TrainerOptions().max_epochs(2));
  // A different rate at every step: 0.1 / (t + 1).
  run.trainer.add(std::make_shared<LearningRateScheduler>(
      [](std::int64_t t, double base) { return base / static_cast<double>(t + 1); }));
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(dir.path / "metrics.csv").step_freq(1)));
  run.trainer.add(std::make_shared<SimpleLogger>(
      SimpleLoggerOptions().step_freq(1).precision(17).log_step_time(false)));
  auto tensorboard = std::make_shared<TensorBoardLogger>(
      TensorBoardLoggerOptions((dir.path / "tb").string()).step_freq(1));
  run.trainer.add(tensorboard);
  auto batches = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(batches);

  std::map<std::int64_t, double> used;  // step -> the rate the step ran with
  for (const auto& point : run.trainer.state().metrics.series("lr")) used[point.step] = point.value;
  BOOST_TEST_REQUIRE(used.size() == 6u);
  BOOST_TEST(used.at(2) == 0.05);

  // metrics.csv: columns kind, step, epoch, wall_time, loss, lr, ...
  std::ifstream csv(dir.path / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  BOOST_TEST_REQUIRE(line.rfind("kind,step,epoch,wall_time,step_loss,lr", 0) == 0u, line);
  std::size_t step_rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    BOOST_TEST_CONTEXT(line) {
      // An epoch row carries the rate of the epoch's last step.
      BOOST_TEST(std::stod(cells.at(5)) == used.at(std::stoll(cells.at(1))));
    }
    step_rows += cells.at(0) == "step";
  }
  BOOST_TEST(step_rows == 6u);

  std::size_t lines = 0;
  const std::regex format(R"(step (\d+) epoch \d+: step_loss=\S+ lr=(\S+))");
  for (const auto& message : log.messages("info")) {
    std::smatch match;
    if (!std::regex_match(message, match, format)) continue;
    ++lines;
    BOOST_TEST(std::stod(match[2]) == used.at(std::stoll(match[1])), message);
  }
  BOOST_TEST(lines == 6u);

  const auto scalars = scalars_of(read_events(tensorboard->file()), "train/lr");
  BOOST_TEST_REQUIRE(scalars.size() == 6u);
  for (const auto& [step, value] : scalars) {
    BOOST_TEST(value == static_cast<float>(used.at(step)), "step " << step);
  }
}

// A warm-up that sets each step's rate at BeforeOptimizerStep, after the loggers were added (so
// after their hooks of that event, had they any): the loggers write the rate the update used,
// which the trainer reads after every BeforeOptimizerStep subscriber. None of them needs a hook
// of that event for it.
BOOST_AUTO_TEST_CASE(a_rate_set_at_before_optimizer_step_is_the_one_written) {
  TempDir dir("logged_lr_warm_up");
  Run run(TrainerOptions().max_epochs(1));
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(dir.path / "metrics.csv").step_freq(1)));
  run.trainer.add(std::make_shared<SimpleLogger>(
      SimpleLoggerOptions().step_freq(1).precision(17).log_step_time(false)));
  run.trainer.add(std::make_shared<TensorBoardLogger>(
      TensorBoardLoggerOptions((dir.path / "tb").string()).step_freq(1)));
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
  std::size_t lines = 0;
  const std::regex format(R"(step (\d+) epoch \d+: step_loss=\S+ lr=(\S+))");
  for (const auto& message : log.messages("info")) {
    std::smatch match;
    if (!std::regex_match(message, match, format)) continue;
    ++lines;
    BOOST_TEST(std::stod(match[2]) == used.at(std::stoll(match[1])), message);
  }
  BOOST_TEST(lines == 4u);
  std::ifstream csv(dir.path / "metrics.csv");
  std::string line;
  std::getline(csv, line);  // kind,step,epoch,wall_time,step_loss,lr,...
  std::size_t rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    BOOST_TEST(std::stod(cells.at(5)) == used.at(std::stoll(cells.at(1))), line);
    ++rows;
  }
  BOOST_TEST(rows == 5u);  // 4 steps and the epoch
}

BOOST_AUTO_TEST_SUITE_END()
