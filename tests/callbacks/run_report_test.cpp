// RunReport: the HTML file read back is well-formed XML with one chart per metric whose polyline
// has one point per value; status, options and extra tables; escaping, non-finite values,
// thinning; bad input. The SVG chart writer and escaping on their own.

#include <unistd.h>
#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/fsync_count.hpp>
#include <support/scratch.hpp>
#include <support/xml_check.hpp>
#include <torchbus/callbacks/run_report.hpp>

#include "report/svg_chart.hpp"  // private to torchbus::callbacks

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// A report file, checked to be well-formed and parsed.
struct Report {
  std::string text;
  XmlElement root;

  explicit Report(const std::string& html) : text(html) {
    const auto problem = xml_problem(text);
    BOOST_TEST_REQUIRE(problem.empty(), problem);
    root = parse_xml(text);
  }
  static Report read(const fs::path& path) {
    BOOST_TEST_REQUIRE(fs::is_regular_file(path), path.string() << " was not written");
    return Report(read_text(path));
  }

  std::vector<const XmlElement*> charts() const { return root.find_all("svg", "chart"); }
  /// Whether a chart of `metric` is there.
  bool has_chart(const std::string& metric) const {
    return !root.find_all([&](const XmlElement& element) {
                  const auto* name = element.attribute("data-metric");
                  return element.has_class("chart") && name != nullptr && *name == metric;
                })
                .empty();
  }
  /// The one chart of `metric`.
  const XmlElement& chart(const std::string& metric) const {
    const auto found = root.find_all([&](const XmlElement& element) {
      const auto* name = element.attribute("data-metric");
      return element.has_class("chart") && name != nullptr && *name == metric;
    });
    BOOST_TEST_REQUIRE(found.size() == 1u, "charts of '" << metric << "': " << found.size());
    return *found[0];
  }
  /// The text of the element with id `id`.
  std::string text_of_id(const std::string& id) const {
    const auto found = root.find_all([&](const XmlElement& element) {
      const auto* value = element.attribute("id");
      return value != nullptr && *value == id;
    });
    BOOST_TEST_REQUIRE(found.size() == 1u);
    return found[0]->all_text();
  }
  std::string status() const { return text_of_id("status"); }
  /// The body rows of the tables with class `css_class`, cells as text.
  std::vector<std::vector<std::string>> rows(const std::string& css_class) const {
    std::vector<std::vector<std::string>> out;
    for (const auto* table : root.find_all("table", css_class)) {
      for (const auto* body : table->find_all("tbody")) {
        for (const auto& row : body->children) {
          std::vector<std::string> cells;
          for (const auto& cell : row.children) cells.push_back(cell.all_text());
          out.push_back(cells);
        }
      }
    }
    return out;
  }
  /// summary row `key` -> its value.
  std::string summary(const std::string& key) const {
    for (const auto* table : root.find_all("table", "summary")) {
      for (const auto* row : table->find_all("tr")) {
        if (row->children.size() == 2 && row->children[0].all_text() == key) {
          return row->children[1].all_text();
        }
      }
    }
    BOOST_FAIL("no summary row " << key);
    return "";
  }
};

/// The (x, y) pairs of a chart's polyline (none when it has no polyline); each must be finite.
std::vector<std::pair<double, double>> coordinates(const XmlElement& chart) {
  const auto lines = chart.find_all("polyline", "series");
  BOOST_TEST_REQUIRE(lines.size() <= 1u);
  std::vector<std::pair<double, double>> out;
  if (lines.empty()) return out;
  std::istringstream in(*lines[0]->attribute("points"));
  for (std::string pair; in >> pair;) {
    const auto comma = pair.find(',');
    BOOST_TEST_REQUIRE(comma != std::string::npos, "bad pair " << pair);
    BOOST_TEST_REQUIRE(pair.find(',', comma + 1) == std::string::npos, "bad pair " << pair);
    const double x = std::stod(pair.substr(0, comma)), y = std::stod(pair.substr(comma + 1));
    BOOST_TEST_REQUIRE((std::isfinite(x) && std::isfinite(y)), "bad pair " << pair);
    out.emplace_back(x, y);
  }
  return out;
}

/// Every geometry attribute in `element` is a finite number (no nan or inf reached the SVG).
void check_geometry(const XmlElement& element) {
  for (const auto* node : element.find_all([](const XmlElement&) { return true; })) {
    for (const auto& [key, value] : node->attributes) {
      if (key == "x" || key == "y" || key == "x1" || key == "x2" || key == "y1" || key == "y2" ||
          key == "cx" || key == "cy" || key == "width" || key == "height") {
        std::size_t used = 0;
        const double number = std::stod(value, &used);
        BOOST_TEST((used == value.size() && std::isfinite(number)),
                   "<" << node->name << " " << key << "=\"" << value << "\">");
      }
    }
  }
  for (const auto* chart : element.find_all("svg", "chart")) coordinates(*chart);
}

/// The report of one RunReport on a Run, trained on 6 batches per epoch with validation.
struct ReportRun {
  TempDir dir{"report"};
  fs::path path = dir.path / "out" / "report.html";  // the directory is created
  Run run;
  std::shared_ptr<RunReport> report;
  std::vector<Batch> train = make_batches(6, 4);
  std::vector<Batch> validation = make_batches(2, 4, 4, 3, 11);

  explicit ReportRun(TrainerOptions options = TrainerOptions().max_epochs(2),
                     const std::function<RunReportOptions(RunReportOptions)>& configure = nullptr)
      : run(options) {
    RunReportOptions report_options(path.string());
    if (configure) report_options = configure(report_options);
    report = std::make_shared<RunReport>(report_options);
  }
  void fit() {
    run.trainer.add(report);
    run.trainer.fit(train, validation);
  }
  const MetricHistory& metrics() { return run.trainer.state().metrics; }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(run_report)

BOOST_AUTO_TEST_CASE(one_chart_per_metric_with_one_point_per_value) {
  ReportRun r(TrainerOptions().max_epochs(2).seed(5),
              [](RunReportOptions options) { return options.title("tiny <run> & co"); });
  r.run.trainer.on(Event::EpochEnd, [](State& state) {
    state.record_metric("epoch_score", 1.0 / (state.epoch + 1));
  });
  r.report->add_option("model", "mlp & \"friends\"").add_option("batch_size", "4");
  r.fit();

  const auto report = Report::read(r.path);
  check_geometry(report.root);
  // The state's metrics: one chart each, one coordinate pair per value.
  const auto names = r.metrics().names();
  BOOST_TEST(names == (std::vector<std::string>{"train_loss", "train_loss_epoch", "val_loss",
                                                "epoch_score"}),
             boost::test_tools::per_element());
  std::vector<std::string> charted;
  for (const auto* chart : report.charts()) {
    if (chart->attribute("data-source") == nullptr)
      charted.push_back(*chart->attribute("data-metric"));
  }
  BOOST_TEST(charted == names, boost::test_tools::per_element());
  for (const auto& name : names) {
    const auto& chart = report.chart(name);
    const auto size = r.metrics().series(name).size();
    BOOST_TEST(coordinates(chart).size() == size, name);
    BOOST_TEST(*chart.attribute("data-values") == std::to_string(size));
    BOOST_TEST(*chart.attribute("data-skipped") == "0");
    // One epoch boundary, labelled with the epoch that begins there.
    BOOST_TEST(chart.find_all("line", "marker").size() == 1u);
    const auto labels = chart.find_all("text", "marker-label");
    BOOST_TEST_REQUIRE(labels.size() == 1u);
    BOOST_TEST(labels[0]->all_text() == "epoch 1");
  }
  BOOST_TEST(r.metrics().series("train_loss").size() == 12u);
  // What RunReport sampled itself: one learning rate and one step time per step.
  for (const char* own : {"lr", "step_time"}) {
    const auto& chart = report.chart(own);
    BOOST_TEST(*chart.attribute("data-source") == "run_report");
    BOOST_TEST(coordinates(chart).size() == 12u);
  }
  // Lower is better for losses: the ring is on the smallest value.
  BOOST_TEST(report.chart("val_loss").find_all("circle", "highlight").size() == 1u);
  BOOST_TEST(report.chart("lr").find_all("circle", "highlight").empty());

  // Header.
  BOOST_TEST(report.root.find_all("title")[0]->all_text() == "tiny <run> & co");
  BOOST_TEST(report.status() == "finished");
  BOOST_TEST(report.summary("action") == "fit");
  BOOST_TEST(report.summary("steps") == "12");
  BOOST_TEST(report.summary("epochs completed") == "2 of 2");
  BOOST_TEST(report.summary("parameters") == "67");  // 4*8+8 + 8*3+3
  // Options: the trainer's, then the application's.
  const auto rows = report.rows("options");
  const auto has_row = [&](std::vector<std::string> row) {
    return std::find(rows.begin(), rows.end(), row) != rows.end();
  };
  BOOST_TEST(has_row({"max_epochs", "2", "trainer"}));
  BOOST_TEST(has_row({"max_steps", "-1 (no limit)", "trainer"}));
  BOOST_TEST(has_row({"seed", "5", "trainer"}));
  BOOST_TEST(has_row({"set_grads_to_none", "true", "trainer"}));
  BOOST_TEST(has_row({"model", "mlp & \"friends\"", "application"}));
  BOOST_TEST(has_row({"batch_size", "4", "application"}));
  BOOST_TEST(rows.back() == (std::vector<std::string>{"batch_size", "4", "application"}),
             boost::test_tools::per_element());

  // Self-contained: no script, nothing loaded from elsewhere.
  BOOST_TEST(report.root.find_all("script").empty());
  BOOST_TEST(report.root.find_all("link").empty());
  const auto external = report.root.find_all([](const XmlElement& element) {
    const auto* href = element.attribute("href");
    return element.attribute("src") != nullptr || (href != nullptr && href->rfind('#', 0) != 0);
  });
  BOOST_TEST(external.empty());
  // Written atomically: nothing but the report is left in its directory.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(r.path.parent_path())) {
    files.push_back(entry.path().filename().string());
  }
  BOOST_TEST(files == std::vector<std::string>{"report.html"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(is_rank_zero_only_after_model_checkpoint) {
  RunReport report(RunReportOptions("report.html"));
  BOOST_TEST((report.role() == Role::Report));
  BOOST_TEST((report.rank() == std::optional<int>(0)));
  BOOST_TEST(report.name() == "run_report");
}

BOOST_AUTO_TEST_CASE(is_written_at_the_start_and_after_every_epoch) {
  ReportRun r;
  std::vector<std::string> statuses;
  std::vector<std::size_t> points;
  std::vector<std::uint64_t> fsyncs_so_far;
  const auto fsyncs_before = fsyncs();
  r.run.trainer.on(Event::EpochStart, [&](State&) {
    const auto report = Report::read(r.path);
    statuses.push_back(report.status());
    points.push_back(report.charts().size() == 0 ? 0
                                                 : coordinates(report.chart("train_loss")).size());
    fsyncs_so_far.push_back(fsyncs() - fsyncs_before);
  });
  r.fit();
  BOOST_TEST(statuses == (std::vector<std::string>{"running", "running"}),
             boost::test_tools::per_element());
  BOOST_TEST(points == (std::vector<std::size_t>{0, 6}), boost::test_tools::per_element());
  BOOST_TEST(Report::read(r.path).status() == "finished");
  // Rewritten while training without an fsync on the loop; the final report is durable (the file
  // and its directory).
  BOOST_TEST(fsyncs_so_far == (std::vector<std::uint64_t>{0, 0}), boost::test_tools::per_element());
  BOOST_TEST(fsyncs() - fsyncs_before == 2u);
}

BOOST_AUTO_TEST_CASE(an_evaluation_after_fit_extends_the_report) {
  ReportRun r;
  r.fit();
  r.run.trainer.evaluate(r.validation);
  const auto report = Report::read(r.path);
  BOOST_TEST(report.summary("action") == "evaluate");
  BOOST_TEST(report.status() == "finished");
  BOOST_TEST(coordinates(report.chart("val_loss")).size() == 3u);
  BOOST_TEST(coordinates(report.chart("lr")).size() == 12u);
}

BOOST_AUTO_TEST_CASE(no_report_when_an_earlier_action_start_fails) {
  ReportRun r;
  r.run.trainer.on(Event::ActionStart, [](State&) { throw ConfigError("bad setup"); });
  BOOST_CHECK_THROW(r.fit(), ConfigError);
  BOOST_TEST(!fs::exists(r.path));
}

BOOST_AUTO_TEST_CASE(options_added_since_are_shown_when_set) {
  ReportRun r(
      TrainerOptions().max_epochs(2).min_epochs(1).min_steps(3).detect_anomaly(true).deterministic(
          Determinism::WarnOnly));
  r.fit();
  const auto rows = Report::read(r.path).rows("options");
  const auto has_row = [&](std::vector<std::string> row) {
    return std::find(rows.begin(), rows.end(), row) != rows.end();
  };
  BOOST_TEST(has_row({"min_epochs", "1", "trainer"}));
  BOOST_TEST(has_row({"min_steps", "3", "trainer"}));
  BOOST_TEST(has_row({"detect_anomaly", "true", "trainer"}));
  BOOST_TEST(has_row({"deterministic", "warn_only", "trainer"}));
  ReportRun plain;
  plain.fit();
  for (const auto& row : Report::read(plain.path).rows("options")) {
    BOOST_TEST(row.front() != "min_epochs");
    BOOST_TEST(row.front() != "deterministic");
  }
}

BOOST_AUTO_TEST_CASE(reports_a_failure_with_its_message) {
  ReportRun r(TrainerOptions().max_epochs(1));
  r.run.trainer.set_train_step([](Trainer& trainer, Batch& batch) {
    if (trainer.state().step == 2) throw std::runtime_error("diverged: loss <inf> & \"beyond\"");
    return trainer.compute_loss(trainer.forward(batch.data), batch.target);
  });
  BOOST_CHECK_THROW(r.fit(), std::runtime_error);
  const auto report = Report::read(r.path);
  BOOST_TEST(report.status() == "failed");
  const auto errors = report.root.find_all("pre", "error");
  BOOST_TEST_REQUIRE(errors.size() == 1u);
  BOOST_TEST(has(errors[0]->all_text(), "diverged: loss <inf> & \"beyond\""));
  BOOST_TEST(coordinates(report.chart("train_loss")).size() == 2u);
}

BOOST_AUTO_TEST_CASE(reports_a_stop_with_its_reason) {
  ReportRun r;
  r.run.trainer.on(Event::StepEnd, [](State& state) {
    if (state.step == 3) state.request_stop("enough <for> now");
  });
  r.fit();
  const auto report = Report::read(r.path);
  BOOST_TEST(report.status() == "stopped");
  const auto reasons = report.root.find_all("span", "reason");
  BOOST_TEST_REQUIRE(reasons.size() == 1u);
  BOOST_TEST(reasons[0]->all_text() == "enough <for> now");
  BOOST_TEST(report.summary("steps") == "3");
}

BOOST_AUTO_TEST_CASE(lists_the_subscribers_an_error_policy_disabled) {
  ReportRun r;
  r.run.trainer.on(
      Event::StepEnd,
      [](State& state) {
        if (state.step == 2) throw std::runtime_error("tracker <unreachable>");
      },
      with_role(Role::Logger).named("tracker"));
  r.fit();
  const auto report = Report::read(r.path);
  BOOST_TEST(report.status() == "finished");
  const std::vector<std::vector<std::string>> expected{
      {"tracker", "StepEnd", "1", "disabled", "tracker <unreachable>"}};
  BOOST_TEST(report.rows("failures") == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(has_no_failures_section_when_nothing_failed) {
  ReportRun r;
  r.fit();
  BOOST_TEST(Report::read(r.path).root.find_all("table", "failures").empty());
}

BOOST_AUTO_TEST_CASE(escapes_metric_names) {
  ReportRun r;
  r.run.trainer.on(Event::StepEnd, [](State& state) {
    state.record_metric("a<b&c", 1.0);
    state.record_metric("q\"uote'>", 2.0);
  });
  r.fit();
  const auto report = Report::read(r.path);
  BOOST_TEST(coordinates(report.chart("a<b&c")).size() == 12u);
  BOOST_TEST(coordinates(report.chart("q\"uote'>")).size() == 12u);
  BOOST_TEST(has(report.text, "data-metric=\"a&lt;b&amp;c\""));
  BOOST_TEST(lacks(report.text, "a<b&c"));
  const auto captions = report.root.find_all("figcaption");
  const auto named = std::count_if(captions.begin(), captions.end(), [](const XmlElement* caption) {
    return contains(caption->all_text(), "a<b&c");
  });
  BOOST_TEST(named == 1);
}

BOOST_AUTO_TEST_CASE(non_finite_values_are_left_out_and_counted) {
  ReportRun r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  r.run.trainer.on(Event::StepEnd, [&](State& state) {
    const double values[] = {1.0, nan, inf, 2.0, -inf, 3.0};
    state.record_metric("wobbly", values[(state.step - 1) % 6]);
    state.record_metric("all_nan", nan);
  });
  r.fit();
  const auto report = Report::read(r.path);
  check_geometry(report.root);
  const auto& wobbly = report.chart("wobbly");
  BOOST_TEST(coordinates(wobbly).size() == 6u);  // 3 finite values in each of 2 epochs
  BOOST_TEST(*wobbly.attribute("data-values") == "12");
  BOOST_TEST(*wobbly.attribute("data-skipped") == "6");
  const auto notes = wobbly.find_all("text", "note");
  BOOST_TEST_REQUIRE(notes.size() == 1u);
  BOOST_TEST(notes[0]->all_text() == "6 non-finite values (nan/inf) not drawn");
  const auto& all_nan = report.chart("all_nan");
  BOOST_TEST(coordinates(all_nan).empty());
  BOOST_TEST(all_nan.find_all("text", "note")[0]->all_text() ==
             "no finite values: nothing to draw");
}

BOOST_AUTO_TEST_CASE(long_series_are_thinned_to_max_points) {
  ReportRun r(TrainerOptions().max_epochs(4),
              [](RunReportOptions options) { return options.max_points(10); });
  r.run.trainer.on(Event::StepEnd, [](State& state) {
    state.record_metric("ramp", static_cast<double>(state.step));
  });
  r.fit();
  const auto report = Report::read(r.path);
  // 24 points in 5 runs of 5 (the last of 4): the lowest and highest of each run are its ends.
  const auto& ramp = report.chart("ramp");
  const auto points = coordinates(ramp);
  BOOST_TEST(*ramp.attribute("data-values") == "24");
  BOOST_TEST(*ramp.attribute("data-drawn") == "10");
  BOOST_TEST_REQUIRE(points.size() == 10u);
  for (std::size_t i = 1; i < points.size(); ++i) BOOST_TEST(points[i].first > points[i - 1].first);
  for (std::size_t i = 1; i < points.size(); ++i)
    BOOST_TEST(points[i].second < points[i - 1].second);
  // The first and last values are drawn: x of step 1 and step 24 on the shared axis.
  BOOST_TEST(points.front().first == coordinates(report.chart("train_loss")).front().first);
  BOOST_TEST(coordinates(report.chart("train_loss")).size() <= 10u);
  // Short series are not thinned.
  BOOST_TEST(coordinates(report.chart("val_loss")).size() == 4u);
}

BOOST_AUTO_TEST_CASE(a_recorded_lr_replaces_the_sampled_one) {
  ReportRun r;
  r.run.trainer.on(Event::StepEnd, [](State& state) {
    if (state.step % 3 == 0) state.record_metric("lr", 0.5);
  });
  r.fit();
  const auto report = Report::read(r.path);
  const auto& lr = report.chart("lr");
  BOOST_TEST((lr.attribute("data-source") == nullptr));
  BOOST_TEST(coordinates(lr).size() == 4u);
  BOOST_TEST(*report.chart("step_time").attribute("data-source") == "run_report");
}

// Without the sampled series RunReport has no per-step hook: a step costs it nothing.
BOOST_AUTO_TEST_CASE(without_sampled_series_it_hooks_no_step_event) {
  for (const bool lr : {false, true}) {
    ReportRun r(TrainerOptions().max_epochs(2),
                [lr](RunReportOptions o) { return o.record_step_time(false).record_lr(lr); });
    r.fit();
    BOOST_TEST(r.run.trainer.bus().subscriber_count(Event::StepStart) == 0u);
    BOOST_TEST(r.run.trainer.bus().subscriber_count(Event::StepEnd) == (lr ? 1u : 0u));
    const auto report = Report::read(r.path);
    BOOST_TEST(report.has_chart("lr") == lr);
    BOOST_TEST(!report.has_chart("step_time"));
    BOOST_TEST(report.status() == "finished");
  }
}

BOOST_AUTO_TEST_CASE(sampled_series_go_through_checkpoints) {
  ReportRun r;
  r.fit();
  RunReport restored(RunReportOptions(r.path.string()));
  round_trip(*r.report, restored);
  const Report report(restored.html(r.run.trainer.state()));
  BOOST_TEST(coordinates(report.chart("lr")).size() == 12u);
  BOOST_TEST(coordinates(report.chart("step_time")).size() == 12u);
  BOOST_TEST(report.status() == "finished");
}

BOOST_AUTO_TEST_CASE(extra_tables_and_providers) {
  ReportRun r(TrainerOptions().max_epochs(1));
  r.report->add_table({"Profile", {"subscriber", "ms"}, {{"old", "1"}}});
  r.report->add_table({"Profile", {"subscriber", "ms"}, {{"a<b", "1.5"}, {"c&d", "2"}}});
  int calls = 0;
  r.report->add_table_provider([&calls] {
    ++calls;
    return ReportTable{"Live", {"calls"}, {{std::to_string(calls)}}};
  });
  r.report->add_table_provider([]() -> ReportTable { throw std::runtime_error("no data <yet>"); });
  CapturedLog log;
  r.fit();
  const auto report = Report::read(r.path);
  std::vector<std::string> titles;
  for (const auto* section : report.root.find_all("section", "extra")) {
    titles.push_back(section->find_all("h2")[0]->all_text());
  }
  BOOST_TEST(titles == (std::vector<std::string>{"Profile", "Live"}),
             boost::test_tools::per_element());
  // The provider ran at ActionStart, EpochEnd and ActionEnd.
  BOOST_TEST((report.rows("extra") ==
              std::vector<std::vector<std::string>>{{"a<b", "1.5"}, {"c&d", "2"}, {"3"}}));
  const auto warnings = report.root.find_all("p", "warn");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(has(warnings[0]->all_text(), "table provider 1 failed: no data <yet>"));
  BOOST_TEST(log.messages("warning", "RunReport 'run_report': table provider 1 failed").size() ==
             3u);
}

BOOST_AUTO_TEST_CASE(added_charts_have_their_own_sections) {
  ReportRun r(TrainerOptions().max_epochs(1));
  r.report->add_chart({"Range test", "log10(lr)", {-3, -2}, {1, 2}, std::nullopt, "old"});
  const double nan = std::nan("");
  r.report->add_chart(
      {"Range test", "log10(lr)", {-3, -2.5, -2, -1.5}, {2.0, 1.5, nan, 0.5}, 1, "lr <0.01>"});
  r.fit();
  const auto report = Report::read(r.path);
  const auto sections = report.root.find_all("section", "added-chart");
  BOOST_TEST_REQUIRE(sections.size() == 1u);
  BOOST_TEST(sections[0]->find_all("h2")[0]->all_text() == "Range test");
  BOOST_TEST(sections[0]->find_all("figcaption")[0]->all_text() == "lr <0.01>");
  const auto& chart = report.chart("Range test");
  BOOST_TEST(*chart.attribute("data-source") == "add_chart");
  BOOST_TEST(*chart.attribute("data-skipped") == "1");
  const auto points = coordinates(chart);
  BOOST_TEST_REQUIRE(points.size() == 3u);  // the NaN is left out
  // x runs left to right with the given values; the ring sits on point 1.
  BOOST_TEST(points[0].first < points[1].first);
  BOOST_TEST(points[1].first < points[2].first);
  const auto rings = chart.find_all("circle", "highlight");
  BOOST_TEST_REQUIRE(rings.size() == 1u);
  BOOST_TEST(std::stod(*rings[0]->attribute("cx")) == points[1].first,
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST(std::stod(*rings[0]->attribute("cy")) == points[1].second,
             boost::test_tools::tolerance(1e-6));
  check_geometry(report.root);

  RunReport other(RunReportOptions("unused.html"));
  const auto error = [&](const ReportChart& invalid) {
    return message_of<ConfigError>([&] { other.add_chart(invalid); });
  };
  BOOST_TEST(has(error({"", "x", {}, {}, {}, ""}), "the title is empty"));
  BOOST_TEST(has(error({"T", "", {}, {}, {}, ""}), "the x_label is empty"));
  BOOST_TEST(has(error({"T", "x", {1}, {}, {}, ""}), "1 x values but 0 y values"));
  BOOST_TEST(has(error({"T", "x", {nan}, {1}, {}, ""}), "x of point 0 is nan"));
  BOOST_TEST(
      has(error({"T", "x", {1}, {1}, 1, ""}), "highlight 1 is past the last of its 1 points"));
}

BOOST_AUTO_TEST_CASE(invalid_options_are_config_errors) {
  const auto error = [](const RunReportOptions& options) {
    return message_of<ConfigError>([&] { RunReport report(options); });
  };
  BOOST_TEST(has(error(RunReportOptions("")), "path is empty"));
  BOOST_TEST(has(error(RunReportOptions("runs/")), "path 'runs/' names a directory"));
  BOOST_TEST(has(error(RunReportOptions("r.html").title("")), "title is empty"));
  BOOST_TEST(has(error(RunReportOptions("r.html").max_points(1)), "max_points must be 0"));
  BOOST_TEST(has(error(RunReportOptions("r.html").update_every_n_epochs(-1)),
                 "update_every_n_epochs must be >= 0"));
  BOOST_TEST(has(error(RunReportOptions("r.html").maximize({"acc"}).minimize({"acc"})),
                 "metric 'acc' is in both maximize and minimize"));
  BOOST_TEST(has(error(RunReportOptions("r.html").minimize({""})), "minimize contains an empty"));

  RunReport report(RunReportOptions("r.html"));
  BOOST_TEST(has(message_of<ConfigError>([&] { report.add_option("", "x"); }), "needs a key"));
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   report.add_table({"Profile", {"a", "b"}, {{"1", "2"}, {"3"}}});
                 }),
                 "ReportTable 'Profile': row 1 has 1 cells, the header has 2 columns"));
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   report.add_table({"", {"a"}, {}});
                 }),
                 "title is empty"));
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   report.add_table({"T", {}, {}});
                 }),
                 "ReportTable 'T': the header is empty"));
  BOOST_TEST(
      has(message_of<ConfigError>([&] { report.add_table_provider(nullptr); }), "empty function"));
}

BOOST_AUTO_TEST_CASE(an_unwritable_path_fails_at_action_start) {
  TempDir dir("report");
  {  // A file where the directory should be.
    std::ofstream(dir.path / "blocker") << "x";
    const auto path = dir.path / "blocker" / "report.html";
    Run run;
    run.trainer.add(std::make_shared<RunReport>(RunReportOptions(path.string())));
    auto train = make_batches(2, 4);
    const auto message = message_of<ConfigError>([&] { run.trainer.fit(train); });
    BOOST_TEST(has(message, "RunReport 'run_report': cannot create the directory"));
    BOOST_TEST(has(message, path.string()));
    BOOST_TEST(run.trainer.state().step == 0);  // nothing was trained
  }
  {  // The path is a directory.
    Run run;
    run.trainer.add(std::make_shared<RunReport>(RunReportOptions(dir.path.string())));
    auto train = make_batches(2, 4);
    const auto message = message_of<ConfigError>([&] { run.trainer.fit(train); });
    BOOST_TEST(has(message, "'" + dir.path.string() + "' is a directory"));
  }
  if (::geteuid() != 0) {  // a read-only directory (root writes anyway)
    const auto locked = dir.path / "locked";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    const auto path = locked / "report.html";
    Run run;
    run.trainer.add(std::make_shared<RunReport>(RunReportOptions(path.string())));
    auto train = make_batches(2, 4);
    const auto message = message_of<ConfigError>([&] { run.trainer.fit(train); });
    BOOST_TEST(has(message, "cannot write the report '" + path.string() + "'"));
    fs::permissions(locked, fs::perms::owner_all);
  }
}

// ---- the chart writer and escaping --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(downsampling_keeps_the_lowest_and_highest_of_each_run) {
  std::vector<ChartPoint> ramp;
  for (int i = 0; i < 24; ++i) ramp.push_back({static_cast<double>(i), static_cast<double>(i)});
  BOOST_TEST(downsample_min_max(ramp, 10) ==
                 (std::vector<std::size_t>{0, 4, 5, 9, 10, 14, 15, 19, 20, 23}),
             boost::test_tools::per_element());
  const std::vector<ChartPoint> zigzag{{0, 0}, {1, 5}, {2, -3}, {3, 2}, {4, 9}, {5, 1}};
  BOOST_TEST(downsample_min_max(zigzag, 4) == (std::vector<std::size_t>{1, 2, 4, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(downsample_min_max(zigzag, 0).size() == 6u);  // 0: every point
  BOOST_TEST(downsample_min_max(zigzag, 6).size() == 6u);  // fits already
  const std::vector<ChartPoint> flat{{0, 1}, {1, 1}, {2, 1}, {3, 1}};
  BOOST_TEST(downsample_min_max(flat, 2) == std::vector<std::size_t>{0},
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(charts_of_awkward_series_are_well_formed) {
  const double max = std::numeric_limits<double>::max();
  const std::vector<std::vector<ChartPoint>> cases{
      {},                                    // nothing
      {{3, 0.5}},                            // one point
      {{0, 2}, {1, 2}, {2, 2}},              // constant
      {{0, -max}, {1, max}, {2, 0}},         // a range that overflows a double
      {{0, max}, {1, max}},                  // constant at the largest double
      {{0, 1e-300}, {1, 2e-300}},            // tiny
      {{0, 1e20}, {1, 1e20 + 16384}},        // a tiny range far from zero
      {{0, std::nan("")}, {1, -1}, {5, 1}},  // starts with nan
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    LineChart chart;
    chart.name = "case " + std::to_string(i);
    chart.points = cases[i];
    chart.markers = {{1, "epoch 1"}, {100, "outside"}};
    chart.highlight = 0;
    const Report svg(render_line_chart(chart));
    BOOST_TEST_CONTEXT("case " << i) {
      check_geometry(svg.root);
      std::size_t finite = 0;
      for (const auto& point : cases[i]) finite += std::isfinite(point.y) ? 1 : 0;
      BOOST_TEST(coordinates(svg.root).size() == finite);
      BOOST_TEST(svg.root.find_all("text").size() >= 2u);  // tick labels
      BOOST_TEST(svg.root.find_all("line", "marker").size() <= 1u);
    }
  }
}

BOOST_AUTO_TEST_CASE(markers_are_labelled_sparsely) {
  LineChart chart;
  chart.name = "loss";
  for (int i = 0; i <= 300; ++i) chart.points.push_back({static_cast<double>(i), 1.0 / (i + 1)});
  for (int e = 1; e < 100; ++e) chart.markers.push_back({3.0 * e, "epoch " + std::to_string(e)});
  const Report svg(render_line_chart(chart));
  BOOST_TEST(svg.root.find_all("line", "marker").size() == 99u);
  BOOST_TEST(svg.root.find_all("text", "marker-label").size() <= 12u);
  BOOST_TEST(svg.root.find_all("circle").empty());  // too many points for dots
}

BOOST_AUTO_TEST_CASE(tick_labels_are_plain_round_numbers) {
  const auto labels = [](const std::vector<ChartPoint>& points, const char* axis) {
    LineChart chart;
    chart.name = "m";
    chart.points = points;
    const Report svg(render_line_chart(chart));
    std::vector<std::string> out;
    for (const auto* group : svg.root.find_all("g", axis)) {
      for (const auto* text : group->find_all("text")) {
        if (!text->has_class("axis-label")) out.push_back(text->all_text());
      }
    }
    return out;
  };
  std::vector<ChartPoint> points;
  for (int i = 1; i <= 200; ++i) points.push_back({static_cast<double>(i), 0.9 + i * 0.0025});
  BOOST_TEST(labels(points, "x-axis") == (std::vector<std::string>{"0", "50", "100", "150", "200"}),
             boost::test_tools::per_element());
  BOOST_TEST(labels(points, "y-axis") == (std::vector<std::string>{"0.8", "1", "1.2", "1.4"}),
             boost::test_tools::per_element());
  BOOST_TEST(labels({{0, 2e12}, {1, 3e12}}, "y-axis") ==
                 (std::vector<std::string>{"2e+12", "2.5e+12", "3e+12"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(escaping) {
  BOOST_TEST(escape_xml("a<b&c\"d'e>") == "a&lt;b&amp;c&quot;d&#39;e&gt;");
  BOOST_TEST(escape_xml("tab\tline\n") == "tab\tline\n");
  BOOST_TEST(escape_xml("bell\x07") == "bell\xEF\xBF\xBD");
  BOOST_TEST(escape_xml("caf\xC3\xA9 \xE2\x82\xAC") == "caf\xC3\xA9 \xE2\x82\xAC");  // é €
  BOOST_TEST(escape_xml("bad \xFF byte") == "bad \xEF\xBF\xBD byte");
  BOOST_TEST(escape_xml("cut \xC3") == "cut \xEF\xBF\xBD");
  BOOST_TEST(escape_xml("\xEF\xBF\xBF") == "\xEF\xBF\xBD");  // U+FFFF is not XML
  BOOST_TEST(format_number(std::nan("")) == "nan");
  BOOST_TEST(format_number(-std::numeric_limits<double>::infinity()) == "-inf");
  BOOST_TEST(format_number(0.1234567) == "0.123457");
}

BOOST_AUTO_TEST_CASE(the_xml_checker_rejects_malformed_markup) {
  BOOST_TEST(xml_problem("<!DOCTYPE html>\n<a x=\"1\"><b/>t &amp; &#60;<!-- c --></a>\n").empty());
  for (const char* bad :
       {"<a><b></a></b>", "<a x=1/>", "<a x=\"1\" x=\"2\"/>", "<a>1 < 2</a>", "<a>1 > 2</a>",
        "<a>&nbsp;</a>", "<a>R&D</a>", "<a/><b/>", "<a>", "<a x=\"<\"/>", "text"}) {
    BOOST_TEST(!xml_problem(bad).empty(), bad);
  }
}

BOOST_AUTO_TEST_SUITE_END()
