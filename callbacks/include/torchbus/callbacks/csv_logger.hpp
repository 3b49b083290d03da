#pragma once

/// \file
/// CsvLogger: one CSV row per logged step and one per epoch, written in bursts.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/tensor_names.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace torchbus {

namespace detail {
class CsvFileWriter;
}  // namespace detail

/// Where and what a CsvLogger writes, e.g. `CsvLoggerOptions("runs/a/metrics.csv").step_freq(10)`.
struct CsvLoggerOptions {
  /// Writes to the CSV file at `path`: a std::filesystem::path, or anything that converts to one
  /// (a std::string, a string literal), as ModelCheckpointOptions' directory.
  template <typename Path,
            typename = std::enable_if_t<std::is_constructible_v<std::filesystem::path, Path>>>
  /* implicit */ CsvLoggerOptions(const Path& path)  // NOLINT(google-explicit-constructor)
      : path_(path) {}

  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "csv_logger";
  /// The CSV file (missing parent directories are created at ActionStart).
  TORCH_ARG(std::filesystem::path, path);
  /// Write a step row at every StepEnd where `state.step % step_freq == 0` (>= 1).
  TORCH_ARG(std::int64_t, step_freq) = 50;
  /// One-element tensors written as columns of step rows (may be empty): the default is the step's
  /// loss (State::step_loss()), other names are tensors of the store (find_step_tensor).
  TORCH_ARG(std::vector<std::string>,
            tensors_to_log) = std::vector<std::string>{std::string(tensor_names::kStepLoss)};
  /// Metrics written in epoch rows; empty: every metric recorded during the epoch except
  /// `train_loss` (already in step rows as `step_loss`).
  TORCH_ARG(std::vector<std::string>, epoch_metrics) = {};
  /// Continue an existing file (keeping its columns) instead of replacing it.
  TORCH_ARG(bool, append) = false;
  /// Rows are buffered and handed over once this many seconds have passed since the last time or
  /// 128 rows are waiting, checked at every StepEnd and EpochEnd, and at EvalStart: a background
  /// task formats them and hands them to the operating system. 0: every row is written before the
  /// hook returns, as are the rows at ActionEnd and when a checkpoint is taken (>= 0).
  TORCH_ARG(double, flush_secs) = 1.0;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Writes a CSV file with a `kind` column: `step` rows (every `step_freq` steps: the step's
/// tensors and learning rate) and `epoch` rows (at each EpochEnd: the latest value of every metric
/// recorded during the epoch), and a `test` row at the end of each test (every metric it recorded:
/// test_loss, test_accuracy, ...). Columns: `kind,step,epoch,wall_time`, the tensors, `lr`, then
/// the metrics in the order they first appear. Rows are recorded as numbers; every `flush_secs` (or
/// 128 rows) a background task formats and writes them, and at the end and before a checkpoint is
/// written they are written before the hook returns, so a killed run loses no row its checkpoint
/// covers. See docs/builtin-callbacks-loggers.md for the layout, appending and resuming.
/// Role::Logger, after Role::Metrics.
class CsvLogger : public Callback {
 public:
  /// A logger named by its options; throws ConfigError for invalid options.
  explicit CsvLogger(CsvLoggerOptions options);
  /// Closes the file if an action left it open.
  ~CsvLogger() override;
  CsvLogger(const CsvLogger&) = delete;
  CsvLogger& operator=(const CsvLogger&) = delete;

  /// The options it was built with.
  const CsvLoggerOptions& options() const noexcept { return options_; }
  /// The current columns of the file, header order.
  const std::vector<std::string>& columns() const noexcept { return columns_; }

  /// Opens the file (replacing it, or continuing it in append mode and after the first action);
  /// throws ConfigError when it cannot be written.
  void on_action_start(State& state) override;
  /// At the first epoch of an action: drops the rows a resumed run will write again, and the
  /// metric columns only they filled.
  void on_epoch_start(State& state) override;
  /// Writes a step row when `state.step` is a multiple of `step_freq`; flushes the rows when
  /// `flush_secs` have passed since the last flush or 128 rows are waiting.
  void on_step_end(State& state) override;
  /// Flushes the rows, so that they do not wait while the evaluation runs; in a test, notes the
  /// metrics recorded so far.
  void on_eval_start(State& state) override;
  /// In a test (Trainer::test): writes the test row, every metric the test recorded.
  void on_eval_end(State& state) override;
  /// Writes the epoch row.
  void on_epoch_end(State& state) override;
  /// Closes the file.
  void on_action_end(State& state) override;
  /// Flushes the buffered rows, so that every row up to the checkpoint is in the file before the
  /// checkpoint exists.
  void on_save_checkpoint(const Checkpoint& checkpoint) override;

 private:
  void open(bool replace);
  void reopen_for_appending();
  void reconcile(const State& state);
  void write_step_row(State& state);
  void begin_row(const char* kind, const State& state);
  /// How rows are handed to the file: written by a background task, or in the file on return.
  enum class Flush { kInBackground, kWritten };
  void flush_if_due();
  void flush_rows(Flush flush);
  std::size_t column_index(const std::string& name);
  /// Finds the columns of the tensors and of lr, and sets the width of rows recorded from now on.
  void index_columns();
  /// Whether `name` is a column of this run's own step rows: a tensor of tensors_to_log, or lr.
  bool is_own_column(const std::string& name) const;
  void add_columns(const std::vector<std::string>& names);
  void set_cell(std::size_t column, double value);
  void set_lr(const State& state);

  CsvLoggerOptions options_;
  /// What goes to the file.
  struct Output {
    std::unique_ptr<detail::CsvFileWriter> file;  // the rows recorded, and the file they go to
    bool header_pending = false;  // the header goes before the first rows handed over
    std::chrono::steady_clock::time_point flushed_at;  // rows were last handed over
  };
  Output out_;
  std::vector<std::string> columns_;      // header
  std::vector<std::size_t> tensor_cols_;  // column of each tensors_to_log entry
  std::size_t lr_col_ = 0;
  std::vector<bool> warned_;    // per tensor name: a problem was reported
  StepLearningRate lr_;         // the learning rate of the step a row is written for
  bool opened_before_ = false;  // an earlier action of this logger opened the file
  bool reconciled_ = true;      // existing rows were checked against the resume point
  MetricMarks test_marks_;      // the metrics' lengths when the current test began
};

}  // namespace torchbus
