#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/default_callbacks.hpp>
#include <torchbus/callbacks/profiler.hpp>
#include <torchbus/callbacks/progress_bar.hpp>
#include <torchbus/callbacks/run_report.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>
#include <torchbus/error.hpp>
#include <torchbus/trainer.hpp>

#include <cstdio>
#include <filesystem>

namespace torchbus {
namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6f", seconds);
  return text;
}

/// The profiler's rows as a report section.
ReportTable profile_table(const Profiler& profiler) {
  ReportTable table{"Profile", {"kind", "name", "event", "calls", "seconds", "mean seconds"}, {}};
  for (const auto& row : profiler.rows()) {
    table.rows.push_back({row.kind, row.name, row.event, std::to_string(row.calls),
                          seconds_text(row.total_seconds), seconds_text(row.mean_seconds())});
  }
  return table;
}

}  // namespace

void DefaultCallbacksOptions::validate() const {
  TORCHBUS_CHECK(log_every() >= 1, ConfigError,
                 "DefaultCallbacksOptions::log_every must be >= 1, got ", log_every());
}

DefaultCallbacks add_default_callbacks(Trainer& trainer, const DefaultCallbacksOptions& options) {
  options.validate();
  DefaultCallbacks added;
  const auto add = [&](auto callback) {
    added.connections.push_back(trainer.add(callback));
    return callback;
  };
  const std::filesystem::path dir(options.run_dir());
  const bool files = !options.run_dir().empty();
  if (options.terminate_on_nan()) added.terminate_on_nan = add(std::make_shared<TerminateOnNaN>());
  if (options.simple_logger()) {
    added.simple_logger =
        add(std::make_shared<SimpleLogger>(SimpleLoggerOptions().step_freq(options.log_every())));
  }
  if (files && options.csv()) {
    added.csv_logger = add(std::make_shared<CsvLogger>(CsvLoggerOptions(dir / "metrics.csv")
                                                           .step_freq(options.log_every())
                                                           .append(options.append())));
  }
  if (files && options.tensorboard()) {
    added.tensorboard_logger = add(std::make_shared<TensorBoardLogger>(
        TensorBoardLoggerOptions((dir / "tensorboard").string()).step_freq(options.log_every())));
  }
  if (options.progress_bar()) {
    added.progress_bar = add(std::make_shared<ProgressBar>(
        ProgressBarOptions().metrics_to_show(options.metrics_to_show())));
  }
  // The profiler makes its rows at the start of ActionEnd, so the report's ActionEnd shows them.
  if (options.profiler()) added.profiler = add(std::make_shared<Profiler>());
  if (files && options.report()) {
    added.run_report = add(std::make_shared<RunReport>(
        RunReportOptions((dir / "report.html").string()).title(options.title())));
    if (added.profiler) {
      added.run_report->add_table_provider(
          [profiler = added.profiler] { return profile_table(*profiler); });
    }
  }
  return added;
}

}  // namespace torchbus
