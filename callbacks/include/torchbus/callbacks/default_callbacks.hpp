#pragma once

/// \file
/// add_default_callbacks: the built-ins most runs want, each with a switch.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/metric_names.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torchbus {

class Trainer;
class TerminateOnNaN;
class SimpleLogger;
class CsvLogger;
class TensorBoardLogger;
class ProgressBar;
class RunReport;
class Profiler;

/// Which built-ins `add_default_callbacks` adds, e.g.
/// `DefaultCallbacksOptions().run_dir("runs/a").tensorboard(false)`.
struct DefaultCallbacksOptions {
  /// Directory of the file outputs (metrics.csv, tensorboard/, report.html); empty: no files.
  TORCH_ARG(std::string, run_dir) = "";
  /// Steps between the loggers' step lines, rows and scalars (>= 1).
  TORCH_ARG(std::int64_t, log_every) = 50;
  /// TerminateOnNaN: stop at the first non-finite loss.
  TORCH_ARG(bool, terminate_on_nan) = true;
  /// SimpleLogger: a log line every `log_every` steps.
  TORCH_ARG(bool, simple_logger) = true;
  /// ProgressBar (a live bar on a terminal, periodic lines otherwise).
  TORCH_ARG(bool, progress_bar) = true;
  /// CsvLogger writing `run_dir`/metrics.csv (needs run_dir).
  TORCH_ARG(bool, csv) = true;
  /// TensorBoardLogger writing `run_dir`/tensorboard (needs run_dir).
  TORCH_ARG(bool, tensorboard) = true;
  /// RunReport writing `run_dir`/report.html (needs run_dir).
  TORCH_ARG(bool, report) = true;
  /// Title of the report.
  TORCH_ARG(std::string, title) = "torchbus run";
  /// Profiler; its table also goes into the report. Off by default (it observes every dispatch).
  TORCH_ARG(bool, profiler) = false;
  /// Continue the CSV file of an earlier run (set when resuming).
  TORCH_ARG(bool, append) = false;
  /// Metrics the progress bar shows next to the loss.
  TORCH_ARG(std::vector<std::string>,
            metrics_to_show) = std::vector<std::string>{std::string(metric_names::kValLoss)};

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// The callbacks `add_default_callbacks` added (null where switched off), to configure further.
struct DefaultCallbacks {
  std::shared_ptr<TerminateOnNaN> terminate_on_nan;       ///< Role::Monitor
  std::shared_ptr<SimpleLogger> simple_logger;            ///< Role::Logger, rank 0
  std::shared_ptr<CsvLogger> csv_logger;                  ///< Role::Logger, rank 0
  std::shared_ptr<TensorBoardLogger> tensorboard_logger;  ///< Role::Logger, rank 0
  std::shared_ptr<ProgressBar> progress_bar;              ///< Role::Logger, rank 0
  std::shared_ptr<RunReport> run_report;                  ///< Role::Report, rank 0
  std::shared_ptr<Profiler> profiler;                     ///< every rank
  std::vector<CallbackConnection> connections;            ///< disconnect one to turn it off
};

/// Adds the default built-ins to `trainer` as `options` asks. A Trainer has none until this is
/// called: the framework does not depend on the callbacks library.
DefaultCallbacks add_default_callbacks(Trainer& trainer,
                                       const DefaultCallbacksOptions& options = {});

}  // namespace torchbus
