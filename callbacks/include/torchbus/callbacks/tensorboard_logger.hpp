#pragma once

/// \file
/// TensorBoardLogger: scalars, histograms, the learning rate, epoch times, metrics and the run's
/// options in TensorBoard event files, written on a background thread.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/tensor_names.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torchbus {

class EventFileWriter;
class ScopedConnection;
struct ScalarPoint;
struct SummaryValue;

/// Where and what a TensorBoardLogger writes, e.g.
/// `TensorBoardLoggerOptions("runs/exp1").step_freq(10).tensors_to_log({"step_loss", "output"})`.
struct TensorBoardLoggerOptions {
  /// Rows (option, value) of a table.
  using OptionRows = std::vector<std::pair<std::string, std::string>>;

  /// Writes event files into the directory `log_dir`.
  /* implicit */ TensorBoardLoggerOptions(
      std::string log_dir);  // NOLINT(google-explicit-constructor)

  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "tensorboard_logger";
  /// The run directory of the event files (created at ActionStart if missing).
  TORCH_ARG(std::string, log_dir);
  /// Write scalars at every StepEnd where `state.step % step_freq == 0` (>= 1).
  TORCH_ARG(std::int64_t, step_freq) = 50;
  /// Tensors to write as `train/<name>`: one-element tensors as scalars (every `step_freq` steps),
  /// others as histograms (every `histogram_freq` steps). May be empty. The default is the step's
  /// loss (State::step_loss()), other names are tensors of the store (find_step_tensor).
  TORCH_ARG(std::vector<std::string>,
            tensors_to_log) = std::vector<std::string>{std::string(tensor_names::kStepLoss)};
  /// Write histograms at every StepEnd where `state.step % histogram_freq == 0` (>= 1).
  TORCH_ARG(std::int64_t, histogram_freq) = 50;
  /// Equal-width buckets of a histogram between the tensor's min and max (>= 1).
  TORCH_ARG(int, histogram_buckets) = 30;
  /// Every n-th optimizer step, a histogram of each parameter (`parameters/<name>`, updated) and
  /// of its gradient as the optimizer applied it (`gradients/<name>`); 0: never (nothing is
  /// subscribed, no cost per step). A host copy of the model at those steps.
  TORCH_ARG(std::int64_t, parameter_histogram_freq) = 0;
  /// Also write training and validation values of one quantity under one tag in the sub-runs
  /// `log_dir/train` and `log_dir/val` (as PyTorch's `add_scalars`), so that TensorBoard draws
  /// them on one chart: `val_<x>` metrics as `<x>` in val, the step scalars of `tensors_to_log`
  /// and the `train_<x>` metrics as `<x>` in train. Off by default: it writes every step scalar
  /// twice (two more event files and writer threads).
  TORCH_ARG(bool, group_train_val) = false;
  /// Rows (option, value) of a Markdown table written once per action as the text summary
  /// `run_options` (TensorBoard's Text tab); empty: none. TensorBoardLogger::add_option adds rows.
  TORCH_ARG(OptionRows, run_options) = {};
  /// Write the learning rate of the optimizer's first parameter group as `train/lr`.
  TORCH_ARG(bool, log_lr) = true;
  /// Write `epoch/time_s` and `epoch/completed` at each EpochEnd.
  TORCH_ARG(bool, log_epoch) = true;
  /// Write the new points of the metric history as `metrics/<name>` at EvalEnd and EpochEnd.
  TORCH_ARG(bool, log_metrics) = true;
  /// The metrics written; empty: every metric except `train_loss` (per step: `train/step_loss`).
  TORCH_ARG(std::vector<std::string>, metrics_to_log) = {};
  /// Entries (an event, or a burst of step scalars) waiting for the writer thread at most (>= 1);
  /// the training thread waits when full.
  TORCH_ARG(std::int64_t, queue_capacity) = 1024;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Writes a TensorBoard event file per action into `log_dir` (open it with
/// `tensorboard --logdir DIR`): the run's options as text, `train/<tensor>` scalars and histograms
/// and `train/lr` at StepEnd, parameter and gradient histograms when asked, `epoch/time_s` and
/// `epoch/completed` at EpochEnd, `metrics/<name>` for every metric point recorded (at EvalEnd and
/// EpochEnd, each at its own step); training and validation values of one quantity also in the
/// sub-runs `train` and `val`. Reads tensors (a host sync) only at the steps it writes; encoding
/// and writing run on background threads, flushed at ActionEnd and on Exception. Rank 0 only by
/// default. Role::Logger, after Role::Metrics. See docs/builtin-callbacks-loggers.md.
class TensorBoardLogger : public Callback {
 public:
  /// A logger named by its options; throws ConfigError for invalid options.
  explicit TensorBoardLogger(TensorBoardLoggerOptions options);
  /// Closes an event file an action left open (errors are logged).
  ~TensorBoardLogger() override;
  TensorBoardLogger(const TensorBoardLogger&) = delete;
  TensorBoardLogger& operator=(const TensorBoardLogger&) = delete;

  /// The options it was built with.
  const TensorBoardLoggerOptions& options() const noexcept { return options_; }
  /// The event file of the current or the last action (empty before the first).
  const std::string& file() const noexcept { return file_; }

  /// Adds a row to the `run_options` table, or replaces the value of the row `key`; throws
  /// ConfigError for an empty key. Takes effect at the next action.
  TensorBoardLogger& add_option(std::string key, std::string value);

  /// With `parameter_histogram_freq`: subscribes the histograms to `trainer`'s AfterOptimizerStep.
  void on_added(Trainer& trainer) override;
  /// BatchEnd when every name of `tensors_to_log` is `step_loss` (the default), which StepEnd
  /// still has: no batch value to keep.
  EventList unused_hooks() const override;
  /// Creates `log_dir` and a new event file; throws ConfigError naming the directory when it
  /// cannot.
  void on_action_start(State& state) override;
  /// Starts the epoch's clock; the action's first also takes the point it starts (or resumes)
  /// from: the step, and the metric points already written.
  void on_epoch_start(State& state) override;
  /// In a step that will be written: keeps the batch's tensors of `tensors_to_log` for StepEnd.
  void on_batch_end(State& state) override;
  /// Writes the tensors and the learning rate when the step is due.
  void on_step_end(State& state) override;
  /// When the action starts with an evaluation: takes the point it starts from.
  void on_eval_start(State& state) override;
  /// Writes the metric points recorded since the last write.
  void on_eval_end(State& state) override;
  /// Writes the epoch's time and count, and the new metric points.
  void on_epoch_end(State& state) override;
  /// Writes what is queued and closes the file; throws an error of the writer thread.
  void on_action_end(State& state) override;
  /// Writes what is queued; an error of the writer thread is logged.
  void on_exception(State& state) override;
  /// Writes every step recorded so far, so that a run killed after the checkpoint keeps the steps
  /// the checkpoint covers (a resumed run writes only later ones).
  void on_save_checkpoint(const Checkpoint& checkpoint) override;

 private:
  using Clock = std::chrono::steady_clock;
  /// The runs written: `log_dir` itself, and the sub-runs `train` and `val` of group_train_val.
  enum Run : std::size_t { kMainRun, kTrainRun, kValRun, kRunCount };

  /// Scalars handed to the writer together, in one burst: about 64 steps of loss and lr...
  static constexpr std::size_t kHandOverValues = 128;
  /// ...or what was recorded in this many seconds, whichever comes first.
  static constexpr double kHandOverSeconds = 1.0;

  void begin(State& state);
  void add_tensor(std::vector<SummaryValue>& histogram_values, std::size_t index,
                  const at::Tensor* tensor, bool scalars, bool histograms, const State& state,
                  double wall_time);
  void add_lr(const State& state, double wall_time);
  void write_parameter_histograms(const State& state);
  void write_new_metrics(State& state);
  /// Hands the recorded steps over, then queues an event of `values` at `step` in `run`.
  void write(Run run, std::int64_t step, std::vector<SummaryValue> values);
  void submit(Run run, std::int64_t step, std::vector<SummaryValue> values, double wall_time);
  void hand_over();
  /// The writer of `run`; a sub-run's file is created when first written to.
  EventFileWriter& writer(Run run);
  /// A writer of `run` writing into the new `file`: the one kept from an earlier action (its
  /// thread reused), else a new one.
  std::unique_ptr<EventFileWriter> open_writer(Run run, const std::string& file);
  bool due(std::int64_t step) const noexcept;
  bool wanted_metric(const std::string& name) const;
  std::string who() const;

  TensorBoardLoggerOptions options_;
  // Per Run, during an action (the main one from ActionStart on).
  std::array<std::unique_ptr<EventFileWriter>, kRunCount> writers_;
  // Per Run, between actions: the closed writers, kept so that their threads start once.
  std::array<std::unique_ptr<EventFileWriter>, kRunCount> kept_writers_;
  std::string file_;
  std::vector<std::string> tags_;     // "train/<name>" per tensors_to_log entry
  std::vector<at::Tensor> captured_;  // per tensors_to_log entry: kept at BatchEnd
  std::vector<bool> warned_;          // per tensors_to_log entry: a problem was reported
  StepLearningRate lr_;               // the learning rate of the step written
  bool begun_ = false;                // the action's first EpochStart or EvalStart was seen
  std::int64_t resume_step_ = 0;      // the step the action started from (> 0: a resume)
  std::map<std::string, std::size_t> written_;  // metric -> points already written
  // Step scalars (tag: index into tags_; tags_.size(): the learning rate) not yet handed to the
  // writer.
  std::vector<ScalarPoint> pending_;
  Clock::time_point epoch_start_;
  std::unique_ptr<ScopedConnection> parameter_histograms_;  // AfterOptimizerStep, when asked
};

}  // namespace torchbus
