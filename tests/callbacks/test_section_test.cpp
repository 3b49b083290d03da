// A test (Trainer::test) in the loggers: a `test` row in the CSV file, a `test/` section in
// TensorBoard, a "Test" table in the report, each holding the test's metrics and nothing of the
// validations before it.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <torchbus/callbacks/callbacks.hpp>
#include <torchbus/torchbus.hpp>

#include <spdlog/fmt/fmt.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// Fits two epochs with validation, then tests, with `add` adding the loggers.
template <typename Add>
Trainer& fit_then_test(Trainer& trainer, Add add) {
  trainer.add(
      std::make_shared<ClassificationMetrics>(ClassificationMetricsOptions().per_class(false)));
  add(trainer);
  const auto train = make_batches(3, 8);
  trainer.fit(train, train);
  trainer.test(make_batches(2, 8, 4, 3, /*seed=*/5));
  return trainer;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(test_section)

BOOST_AUTO_TEST_CASE(every_logger_writes_the_tests_metrics_in_a_test_section) {
  TempDir dir("test_section");
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  fit_then_test(trainer, [&](Trainer& t) {
    t.add(std::make_shared<CsvLogger>(
        CsvLoggerOptions(dir.path / "metrics.csv").flush_secs(0).step_freq(1)));
    t.add(std::make_shared<TensorBoardLogger>(TensorBoardLoggerOptions(dir.path / "tb")));
    t.add(std::make_shared<RunReport>(RunReportOptions(dir.path / "report.html")));
  });
  const auto& metrics = trainer.state().metrics;
  const double test_loss = metrics.latest("test_loss").value;
  const double test_accuracy = metrics.latest("test_accuracy").value;

  // CSV: the last row is the test's, with its metrics in their own columns.
  const auto lines = read_lines(dir.path / "metrics.csv");
  BOOST_REQUIRE(lines.size() >= 3u);
  const auto& header = lines.front();
  BOOST_TEST(has(header, "test_loss"));
  BOOST_TEST(has(header, "test_accuracy"));
  BOOST_TEST(lines.back().rfind("test,", 0) == 0u);
  std::size_t test_rows = 0;
  for (const auto& line : lines) test_rows += line.rfind("test,", 0) == 0 ? 1 : 0;
  BOOST_TEST(test_rows == 1u);
  // Its cells: the test's values (printed exactly), empty under the validation's columns.
  std::vector<std::string> columns, cells;
  for (std::stringstream in(header); in.good();) {
    std::string cell;
    std::getline(in, cell, ',');
    columns.push_back(cell);
  }
  for (std::stringstream in(lines.back()); in.good();) {
    std::string cell;
    std::getline(in, cell, ',');
    cells.push_back(cell);
  }
  cells.resize(columns.size());
  const auto cell_of = [&](const std::string& name) {
    return cells[std::find(columns.begin(), columns.end(), name) - columns.begin()];
  };
  BOOST_TEST(std::stod(cell_of("test_loss")) == test_loss);
  BOOST_TEST(std::stod(cell_of("test_accuracy")) == test_accuracy);
  BOOST_TEST(cell_of("val_loss").empty());

  // TensorBoard: test/loss and test/accuracy, not under metrics/.
  const auto events = read_events(event_files(dir.path / "tb").back());
  const auto loss_points = scalars_of(events, "test/loss");
  BOOST_REQUIRE(loss_points.size() == 1u);
  BOOST_TEST(loss_points[0].second == static_cast<float>(test_loss));
  BOOST_TEST(scalars_of(events, "test/accuracy").size() == 1u);
  BOOST_TEST(scalars_of(events, "metrics/test_loss").empty());

  // The report: a Test table with the test's metrics.
  const auto html = read_text(dir.path / "report.html");
  BOOST_TEST(has(html, "Test"));
  BOOST_TEST(has(html, "test_accuracy"));
  BOOST_TEST(has(html, fmt::format("{:.6g}", test_loss)));
}

BOOST_AUTO_TEST_CASE(classification_metrics_take_the_test_prefix_it_is_given) {
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions().use_registered_subscriptions(false));
  trainer.add(std::make_shared<ClassificationMetrics>(
      ClassificationMetricsOptions().prefix("holdout_").test_prefix("final_").per_class(false)));
  const auto data = make_batches(2, 6);
  trainer.evaluate(data);
  trainer.test(data);
  const auto& metrics = trainer.state().metrics;
  BOOST_TEST(metrics.latest("final_accuracy").value == metrics.latest("holdout_accuracy").value);
  BOOST_TEST(!metrics.contains("test_accuracy"));
  BOOST_TEST(metrics.contains("test_loss"));
}

BOOST_AUTO_TEST_SUITE_END()
