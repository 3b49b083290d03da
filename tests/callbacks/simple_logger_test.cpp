// SimpleLogger: its log lines, captured from the torchbus logger, match what the run recorded.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/simple_logger.hpp>

#include <algorithm>
#include <regex>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// The lines SimpleLogger wrote (they start with "step ").
std::vector<std::string> step_lines(const CapturedLog& log) {
  auto lines = log.messages("info");
  lines.erase(std::remove_if(lines.begin(), lines.end(),
                             [](const std::string& line) { return line.rfind("step ", 0) != 0; }),
              lines.end());
  return lines;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simple_logger)

BOOST_AUTO_TEST_CASE(logs_every_step_freq_steps_the_values_the_run_recorded) {
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(std::make_shared<SimpleLogger>(SimpleLoggerOptions().step_freq(2).precision(17)));
  auto batches = make_batches(5, 4);
  CapturedLog log;
  run.trainer.fit(batches);

  const auto lines = step_lines(log);
  const auto& losses = run.trainer.state().metrics.series("train_loss");
  BOOST_TEST_REQUIRE(losses.size() == 10u);
  BOOST_TEST_REQUIRE(lines.size() == 5u);  // steps 2, 4, 6, 8, 10
  const std::regex format(R"(step (\d+) epoch (\d+): step_loss=(\S+) lr=(\S+) step_time=(\S+)ms)");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch match;
    BOOST_TEST_REQUIRE(std::regex_match(lines[i], match, format), lines[i]);
    const auto step = std::stoll(match[1]);
    BOOST_TEST(step == static_cast<long long>(2 * (i + 1)));
    BOOST_TEST(std::stoll(match[2]) == (step <= 5 ? 0 : 1));
    // 17 significant digits: the logged loss is exactly the recorded one.
    BOOST_TEST(std::stod(match[3]) == losses[step - 1].value);
    BOOST_TEST(losses[step - 1].step == step);
    BOOST_TEST(std::stod(match[4]) == 0.1);
    BOOST_TEST(std::stod(match[5]) > 0.0);
  }
}

BOOST_AUTO_TEST_CASE(default_precision_is_six_significant_digits) {
  Run run;
  run.trainer.add(std::make_shared<SimpleLogger>(
      SimpleLoggerOptions().step_freq(1).log_lr(false).log_step_time(false)));
  auto batches = make_batches(2, 4);
  CapturedLog log;
  run.trainer.fit(batches);
  const auto lines = step_lines(log);
  BOOST_TEST_REQUIRE(lines.size() == 2u);
  const auto& losses = run.trainer.state().metrics.series("train_loss");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    BOOST_TEST(lines[i] ==
               fmt::format("step {} epoch 0: step_loss={:.6g}", i + 1, losses[i].value));
  }
}

BOOST_AUTO_TEST_CASE(tensors_that_are_not_scalars_are_logged_as_shape_and_statistics) {
  Run run;
  run.trainer.set_train_step([](Trainer& trainer, Batch& batch) {
    trainer.state().tensors.set("grid", torch::arange(6, torch::kFloat).reshape({2, 3}),
                                Scope::Step);
    trainer.state().tensors.set("count", torch::tensor(7, torch::kLong), Scope::Step);
    return trainer.compute_loss(trainer.forward(batch.data), batch.target);
  });
  run.trainer.add(std::make_shared<SimpleLogger>(SimpleLoggerOptions()
                                                     .step_freq(1)
                                                     .tensors_to_log({"grid", "count"})
                                                     .log_lr(false)
                                                     .log_step_time(false)));
  auto batches = make_batches(1, 4);
  CapturedLog log;
  run.trainer.fit(batches);
  const auto lines = step_lines(log);
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  // std of 0..5 (unbiased) is sqrt(3.5) = 1.87083.
  BOOST_TEST(lines[0] == "step 1 epoch 0: grid=[2, 3] mean=2.5 std=1.87083 min=0 max=5 count=7");
}

BOOST_AUTO_TEST_CASE(a_missing_tensor_is_warned_about_once_and_the_rest_is_logged) {
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(std::make_shared<SimpleLogger>(
      SimpleLoggerOptions().step_freq(1).tensors_to_log({"step_loss", "accuracy"})));
  auto batches = make_batches(3, 4);
  CapturedLog log;
  BOOST_CHECK_NO_THROW(run.trainer.fit(batches));

  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(has(warnings[0], "no tensor named 'accuracy' at step 1"));
  BOOST_TEST(has(warnings[0], "present: step_loss"));
  const auto lines = step_lines(log);
  BOOST_TEST_REQUIRE(lines.size() == 6u);
  for (const auto& line : lines) {
    BOOST_TEST(has(line, " step_loss="));
    BOOST_TEST(lacks(line, "accuracy"));
  }
}

BOOST_AUTO_TEST_CASE(counts_from_the_step_counter_so_a_resumed_run_logs_the_same_steps) {
  TempDir dir("simple_logger");
  Run run(TrainerOptions().max_epochs(2));
  auto batches = make_batches(5, 4);
  // A resume from a checkpoint at step 3 of epoch 0 restores the counters before the loggers run.
  resume_after_a_run(run.trainer, TrainerOptions().max_steps(3), batches,
                     dir.path / "step-3.tbckpt");
  run.trainer.add(std::make_shared<SimpleLogger>(SimpleLoggerOptions().step_freq(2)));
  CapturedLog log;
  run.trainer.fit(batches);
  std::vector<long long> steps;
  for (const auto& line : step_lines(log)) steps.push_back(std::stoll(line.substr(5)));
  // Epoch 0's last 2 batches (steps 4, 5), then epoch 1's 5 (steps 6 to 10).
  BOOST_TEST(steps == (std::vector<long long>{4, 6, 8, 10}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_TEST(
      has(message_of<ConfigError>([] { SimpleLogger logger(SimpleLoggerOptions().step_freq(0)); }),
          "step_freq must be >= 1, got 0"));
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { SimpleLogger logger(SimpleLoggerOptions().tensors_to_log({})); }),
                 "tensors_to_log is empty, so there is nothing to log"));
  BOOST_TEST(
      has(message_of<ConfigError>([] { SimpleLogger logger(SimpleLoggerOptions().precision(0)); }),
          "precision must be in [1, 17]"));
}

BOOST_AUTO_TEST_CASE(default_role_and_name) {
  SimpleLogger logger;
  BOOST_TEST((logger.role() == Role::Logger));
  BOOST_TEST(logger.name() == "simple_logger");
  BOOST_TEST(logger.options().step_freq() == 50);
  BOOST_TEST(logger.options().tensors_to_log() == std::vector<std::string>{"step_loss"},
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
