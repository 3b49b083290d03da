#pragma once

/// \file
/// DeviceStatsMonitor: the process's memory as metrics every n steps (Lightning's
/// DeviceStatsMonitor), so that a leak or a peak shows in the loggers and the report.

#include <torch/arg.h>
#include <torchbus/callback.hpp>

#include <cstdint>
#include <string>

namespace torchbus {

/// What DeviceStatsMonitor records and how often, e.g.
/// `DeviceStatsMonitorOptions().every_n_steps(100)`.
struct DeviceStatsMonitorOptions {
  /// The callback's name, unique in a trainer.
  TORCH_ARG(std::string, name) = "device_stats_monitor";
  /// Record at the StepEnd of every n-th optimizer step (>= 1).
  TORCH_ARG(std::int64_t, every_n_steps) = 50;
  /// Prefix of the metrics: "<prefix>host_rss_mib", "<prefix>host_peak_rss_mib".
  TORCH_ARG(std::string, prefix) = "device/";

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// The host memory of this process, in MiB: resident now (/proc/self/statm) and the peak of the
/// run so far (getrusage's ru_maxrss).
struct HostMemory {
  double rss_mib = 0.0;       ///< resident set now
  double peak_rss_mib = 0.0;  ///< the most it has been since the process started
};

/// Reads this process's host memory (Linux); a field that cannot be read is 0.
HostMemory read_host_memory();

/// Records "<prefix>host_rss_mib" and "<prefix>host_peak_rss_mib" at the StepEnd of every n-th
/// step, on every rank (each its own process's). Reading them costs two small reads of the
/// kernel's counters and no device sync. Role::Metrics.
class DeviceStatsMonitor : public Callback {
 public:
  /// A DeviceStatsMonitor named by its options; throws ConfigError for invalid options.
  explicit DeviceStatsMonitor(DeviceStatsMonitorOptions options = {});

  /// The options it was built with.
  const DeviceStatsMonitorOptions& options() const noexcept { return options_; }

  /// Records the memory at every n-th step.
  void on_step_end(State& state) override;

 private:
  DeviceStatsMonitorOptions options_;
};

}  // namespace torchbus
