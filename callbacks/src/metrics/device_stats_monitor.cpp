#include <sys/resource.h>
#include <unistd.h>
#include <torchbus/callbacks/device_stats_monitor.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <fstream>
#include <utility>

namespace torchbus {

void DeviceStatsMonitorOptions::validate() const {
  TORCHBUS_CHECK(!name().empty(), ConfigError, "DeviceStatsMonitor: name is empty");
  TORCHBUS_CHECK(every_n_steps() >= 1, ConfigError,
                 "DeviceStatsMonitor: every_n_steps must be >= 1, got ", every_n_steps());
}

HostMemory read_host_memory() {
  constexpr double kMiB = 1024.0 * 1024.0;
  HostMemory memory;
  // statm: total program size and resident set, in pages.
  std::ifstream statm("/proc/self/statm");
  std::int64_t size_pages = 0;
  std::int64_t resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    memory.rss_mib =
        static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE)) / kMiB;
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    memory.peak_rss_mib = static_cast<double>(usage.ru_maxrss) * 1024.0 / kMiB;  // KiB on Linux
  }
  return memory;
}

DeviceStatsMonitor::DeviceStatsMonitor(DeviceStatsMonitorOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Metrics);
  options_.validate();
}

void DeviceStatsMonitor::on_step_end(State& state) {
  if (state.update_skipped || state.step % options_.every_n_steps() != 0) return;
  const auto memory = read_host_memory();
  state.record_metric(options_.prefix() + "host_rss_mib", memory.rss_mib);
  state.record_metric(options_.prefix() + "host_peak_rss_mib", memory.peak_rss_mib);
}

}  // namespace torchbus
