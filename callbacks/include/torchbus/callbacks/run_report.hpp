#pragma once

/// \file
/// RunReport: one self-contained HTML file per run with an SVG chart of every metric, the run's
/// status, its options and tables other callbacks contribute.

#include <torch/arg.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/metric_history.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torchbus {

class EventBus;

/// A titled table of strings shown as its own section of a report, e.g. a profiler's timings.
struct ReportTable {
  std::string title;                           ///< section heading; unique within a report
  std::vector<std::string> header;             ///< column names (at least one)
  std::vector<std::vector<std::string>> rows;  ///< each with as many cells as `header`

  /// Throws ConfigError naming the table and what is wrong (empty title or header, a row whose
  /// length differs from the header's).
  void validate() const;
};

/// Produces a table each time the report is written, e.g. from another callback's latest numbers.
using ReportTableProvider = std::function<ReportTable()>;

/// A line chart of one series against any x, shown as its own section of a report, e.g. the loss
/// of a learning-rate range test against log10(lr).
struct ReportChart {
  std::string title;                     ///< section heading and chart name; unique in a report
  std::string x_label;                   ///< caption of the x axis (not empty)
  std::vector<double> x;                 ///< x of each point, finite, in drawing order
  std::vector<double> y;                 ///< value of each point (non-finite ones are not drawn)
  std::optional<std::size_t> highlight;  ///< index of a point drawn as a ring (none: no ring)
  std::string caption;                   ///< a line of text above the chart (may be empty)

  /// Throws ConfigError naming the chart and what is wrong (empty title or x_label, x and y of
  /// different lengths, a non-finite x, a highlight past the last point).
  void validate() const;
};

/// Where and what a RunReport writes, e.g. `RunReportOptions("runs/a/report.html").title("a")`.
struct RunReportOptions {
  /// Writes the report to the HTML file at `path`.
  /* implicit */ RunReportOptions(std::string path);  // NOLINT(google-explicit-constructor)

  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "run_report";
  /// The HTML file (missing parent directories are created at ActionStart).
  TORCH_ARG(std::string, path);
  /// Heading and `<title>` of the report (not empty).
  TORCH_ARG(std::string, title) = "torchbus run";
  /// Points drawn per chart at most (0: every point; else >= 2); longer series are thinned by
  /// keeping the lowest and highest value of each of `max_points / 2` equal runs of points.
  TORCH_ARG(std::int64_t, max_points) = 2000;
  /// Rewrite the report (status "running") after every n epochs, so a killed run leaves one
  /// (0: only at ActionStart and ActionEnd).
  TORCH_ARG(std::int64_t, update_every_n_epochs) = 1;
  /// Sample the learning rate of parameter group 0 at every step, charted as `lr` unless a
  /// metric of that name is recorded (e.g. by LearningRateScheduler).
  TORCH_ARG(bool, record_lr) = true;
  /// Time every step (StepStart to StepEnd, seconds), charted as `step_time` unless a metric of
  /// that name is recorded (e.g. by Timer).
  TORCH_ARG(bool, record_step_time) = true;
  /// Metrics whose highest value is the best (besides names containing accuracy, precision,
  /// recall or f1).
  TORCH_ARG(std::vector<std::string>, maximize) = {};
  /// Metrics whose lowest value is the best (besides names containing loss or error).
  TORCH_ARG(std::vector<std::string>, minimize) = {};

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Writes one self-contained HTML file (inline CSS and SVG, no scripts, no external resources):
/// a header with title, status (running, finished, stopped with its reason, failed with the
/// error), steps, epochs and wall time; one SVG line chart per metric against the step with epoch
/// boundaries marked and min, max, last and best values; a table of the trainer's and the
/// application's options; a "Test" table of the last test's metrics (Trainer::test); and the tables
/// added with add_table or add_table_provider. Written at
/// ActionStart (which checks that the path is writable), every `update_every_n_epochs` epochs and
/// at ActionEnd (also after an exception), atomically. Rank 0 only by default. See
/// docs/builtin-callbacks-report.md. Role::Report, after Role::Checkpoint.
class RunReport : public Callback {
 public:
  /// A report named by its options; throws ConfigError for invalid options.
  explicit RunReport(RunReportOptions options);

  /// The options it was built with.
  const RunReportOptions& options() const noexcept { return options_; }

  /// Adds a row to the options table (after the trainer's options), or replaces the value of the
  /// row `key` added before; throws ConfigError for an empty key.
  RunReport& add_option(std::string key, std::string value);
  /// Adds a section with `table`, or replaces the table with the same title; throws ConfigError
  /// for an invalid table (see ReportTable::validate).
  RunReport& add_table(ReportTable table);
  /// Adds a section whose table `provider` returns each time the report is written; a provider
  /// that throws or returns an invalid table gets a note in its section and a warning in the log.
  RunReport& add_table_provider(ReportTableProvider provider);
  /// Adds a section with `chart` after the metrics' charts, or replaces the chart with the same
  /// title; throws ConfigError for an invalid chart (see ReportChart::validate).
  RunReport& add_chart(ReportChart chart);

  /// The report of `state` as it would be written now.
  std::string html(const State& state) const;

  /// Reads the trainer's options for the options table.
  void on_added(Trainer& trainer) override;
  /// StepStart without `record_step_time`; StepEnd too without `record_lr`.
  EventList unused_hooks() const override;
  /// Creates the directory and writes a first report; throws ConfigError naming the path when
  /// it cannot be written.
  void on_action_start(State& state) override;
  /// Notes that the action trains.
  void on_epoch_start(State& state) override;
  /// Starts timing the step.
  void on_step_start(State& state) override;
  /// Records the step time and the learning rate the step's update used.
  void on_step_end(State& state) override;
  /// Rewrites the report every `update_every_n_epochs` epochs (a failure is logged).
  void on_epoch_end(State& state) override;
  /// In a test, notes the metrics recorded so far.
  void on_eval_start(State& state) override;
  /// In a test, adds (or replaces) the "Test" section: every metric the test recorded.
  void on_eval_end(State& state) override;
  /// Writes the final report; throws Error naming the path when it cannot.
  void on_action_end(State& state) override;
  /// Writes the sampled series and the wall time.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  using Clock = std::chrono::steady_clock;
  using Row = std::pair<std::string, std::string>;

  /// Writes the report: durable (fsynced) at the end of an action, not while it runs.
  void write(const State& state, Durability durability) const;
  double wall_seconds() const;
  std::vector<ReportTable> collect_tables(std::vector<std::string>& problems) const;

  RunReportOptions options_;
  const EventBus* bus_ = nullptr;  // the trainer's, from on_added: its subscriber failures
  std::vector<Row> trainer_rows_;  // from the trainer's options, at on_added
  std::vector<Row> app_rows_;      // added with add_option
  std::vector<ReportTable> tables_;
  std::vector<ReportTableProvider> providers_;
  std::vector<ReportChart> charts_;
  MetricMarks test_marks_;              // the metrics' lengths when the current test began
  std::vector<MetricPoint> lr_;         // sampled learning rate (record_lr)
  std::vector<MetricPoint> step_time_;  // sampled step time (record_step_time)
  Clock::time_point step_start_{};
  Clock::time_point action_start_{};
  double elapsed_before_ = 0.0;  // seconds of this run's earlier actions
  std::optional<std::chrono::system_clock::time_point> started_;  // when the run began
  bool in_action_ = false;
  bool start_failed_ = false;     // this action's ActionStart could not write: no report at its end
  bool trains_ = false;           // the current (or last) action is a fit
  Action action_ = Action::None;  // the current (or last) action
  StepLearningRate step_lr_;      // reads the learning rate of a step (record_lr)
};

}  // namespace torchbus
