// ProgressBar: plain lines (through the torchbus logger) parsed back; the bar drawn on a stream.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/progress_bar.hpp>

#include <algorithm>
#include <regex>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;
namespace tt = boost::test_tools;

namespace {

/// One parsed plain progress line.
struct Line {
  std::int64_t epoch = 0, max_epochs = 0, done = 0, total = -1;
  bool final = false, has_rate = false, has_eta = false;
  std::optional<double> loss, val_loss;
};

Line parse(const std::string& text) {
  static const std::regex format(
      R"(epoch (\d+)/(\d+)(?: batch (\d+)(?:/(\d+) \((\d+)%\))?| done: (\d+) batches in \S+))"
      R"(( [0-9.]+ batch/s)?( ETA \S+)?( loss=(\S+))?( val_loss=(\S+))?)");
  std::smatch match;
  BOOST_TEST_REQUIRE(std::regex_match(text, match, format), "unexpected line: " << text);
  Line line;
  line.epoch = std::stoll(match[1]);
  line.max_epochs = std::stoll(match[2]);
  line.final = match[6].matched;
  line.done = std::stoll(line.final ? match[6] : match[3]);
  if (match[4].matched) line.total = std::stoll(match[4]);
  line.has_rate = match[7].matched;
  line.has_eta = match[8].matched;
  if (match[10].matched) line.loss = std::stod(match[10]);
  if (match[12].matched) line.val_loss = std::stod(match[12]);
  return line;
}

double value_at_step(const MetricHistory& history, const std::string& name, std::int64_t step) {
  for (const auto& point : history.series(name)) {
    if (point.step == step) return point.value;
  }
  BOOST_FAIL("no " << name << " at step " << step);
  return 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(progress_bar)

BOOST_AUTO_TEST_CASE(plain_lines_show_progress_rate_loss_and_metrics) {
  Run run(TrainerOptions().max_epochs(2));
  auto bar = std::make_shared<ProgressBar>(ProgressBarOptions()
                                               .mode(ProgressBarMode::Plain)
                                               .refresh_every_batches(2)
                                               .metrics_to_show({"val_loss"}));
  BOOST_TEST((bar->mode() == ProgressBarMode::Plain));
  run.trainer.add(bar);
  auto train = make_batches(5, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  CapturedLog log;
  run.trainer.fit(train, validation);

  const auto texts = log.messages("info", "epoch ");
  BOOST_TEST_REQUIRE(texts.size() == 6u);  // per epoch: batches 2 and 4, then the end
  std::vector<Line> lines;
  for (const auto& text : texts) lines.push_back(parse(text));
  const auto& history = run.trainer.state().metrics;

  // Epoch 1: the total is not known yet.
  BOOST_TEST(lines[0].epoch == 1);
  BOOST_TEST(lines[0].max_epochs == 2);
  BOOST_TEST(lines[0].done == 2);
  BOOST_TEST(lines[0].total == -1);
  BOOST_TEST(!lines[0].has_eta);
  BOOST_TEST(lines[0].has_rate);
  // At the 2nd batch's BatchEnd the latest step loss is step 1's.
  BOOST_TEST_REQUIRE(lines[0].loss.has_value());
  BOOST_TEST(*lines[0].loss == value_at_step(history, "train_loss", 1), tt::tolerance(1e-5));
  BOOST_TEST(!lines[0].val_loss.has_value());
  BOOST_TEST(lines[1].done == 4);
  BOOST_TEST(*lines[1].loss == value_at_step(history, "train_loss", 3), tt::tolerance(1e-5));
  BOOST_TEST(lines[2].final);
  BOOST_TEST(lines[2].done == 5);
  BOOST_TEST(*lines[2].loss == value_at_step(history, "train_loss", 5), tt::tolerance(1e-5));
  BOOST_TEST_REQUIRE(lines[2].val_loss.has_value());
  BOOST_TEST(*lines[2].val_loss == history.series("val_loss")[0].value, tt::tolerance(1e-5));

  // Epoch 2: the total is the length of epoch 1, so there is a percentage and an ETA.
  BOOST_TEST(lines[3].epoch == 2);
  BOOST_TEST(lines[3].done == 2);
  BOOST_TEST(lines[3].total == 5);
  BOOST_TEST(lines[3].has_eta);
  BOOST_TEST(has(texts[3], "batch 2/5 (40%)"));
  BOOST_TEST(*lines[3].loss == value_at_step(history, "train_loss", 6), tt::tolerance(1e-5));
  BOOST_TEST(*lines[3].val_loss == history.series("val_loss")[0].value, tt::tolerance(1e-5));
  BOOST_TEST(has(texts[4], "batch 4/5 (80%)"));
  BOOST_TEST(lines[5].final);
  BOOST_TEST(lines[5].done == 5);
  BOOST_TEST(*lines[5].val_loss == history.series("val_loss")[1].value, tt::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(a_given_total_is_capped_by_the_step_limit) {
  Run run(TrainerOptions().max_steps(3));
  run.trainer.add(std::make_shared<ProgressBar>(
      ProgressBarOptions().mode(ProgressBarMode::Plain).refresh_every_batches(1).total_batches(5)));
  auto train = make_batches(5, 4);
  CapturedLog log;
  run.trainer.fit(train);
  const auto texts = log.messages("info", "epoch ");
  BOOST_TEST_REQUIRE(texts.size() == 4u);
  BOOST_TEST(has(texts[0], "epoch 1/1 batch 1/3 (33%)"));
  BOOST_TEST(lacks(texts[0], "loss="));  // no step has ended yet
  BOOST_TEST(has(texts[2], "epoch 1/1 batch 3/3 (100%)"));
  BOOST_TEST(has(texts[2], "ETA 0.0s"));
  BOOST_TEST(has(texts[3], "epoch 1/1 done: 3 batches in "));
}

BOOST_AUTO_TEST_CASE(bar_mode_redraws_in_place_on_its_stream) {
  Run run(TrainerOptions().max_epochs(2));
  std::ostringstream screen;
  run.trainer.add(std::make_shared<ProgressBar>(ProgressBarOptions()
                                                    .mode(ProgressBarMode::Bar)
                                                    .stream(&screen)
                                                    .refresh_rate(1e9)
                                                    .bar_width(10)));
  auto train = make_batches(4, 4);
  CapturedLog log;
  run.trainer.fit(train);

  const std::string out = screen.str();
  BOOST_TEST(std::count(out.begin(), out.end(), '\n') == 2);  // one finished line per epoch
  BOOST_TEST(out.front() == '\r');
  BOOST_TEST(has(out, "\repoch 1/2 batch 1 "));  // total unknown in the first epoch
  BOOST_TEST(has(out, "\repoch 2/2 [##--------] 1/4  25%"));
  BOOST_TEST(has(out, "\repoch 2/2 [##########] 4/4 100%"));
  BOOST_TEST(has(out, "\repoch 2/2 done: 4 batches in "));
  BOOST_TEST(has(out, "\x1b[K"));
  BOOST_TEST(log.messages("info", "epoch ").empty());  // nothing through the logger
}

BOOST_AUTO_TEST_CASE(defaults) {
  ProgressBar bar(ProgressBarOptions().mode(ProgressBarMode::Plain));
  BOOST_TEST((bar.role() == Role::Logger));
  BOOST_TEST(bar.name() == "progress_bar");
  BOOST_TEST_REQUIRE(bar.rank().has_value());
  BOOST_TEST(*bar.rank() == 0);
  BOOST_TEST(bar.options().refresh_every_batches() == 50);
  BOOST_TEST(bar.options().refresh_rate() == 10.0);
  std::ostringstream stream;
  BOOST_TEST((ProgressBar(ProgressBarOptions().stream(&stream)).mode() == ProgressBarMode::Bar));
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_TEST(
      has(message_of<ConfigError>([] { ProgressBar bar(ProgressBarOptions().refresh_rate(0)); }),
          "refresh_rate must be a positive number"));
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { ProgressBar bar(ProgressBarOptions().refresh_every_batches(0)); }),
                 "refresh_every_batches must be >= 1, got 0"));
  BOOST_TEST(
      has(message_of<ConfigError>([] { ProgressBar bar(ProgressBarOptions().total_batches(0)); }),
          "total_batches must be >= 1"));
}

BOOST_AUTO_TEST_SUITE_END()
