#pragma once

/// \file
/// Named series of (step, epoch, value): train loss, validation metrics, anything recorded.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchbus {

/// One recorded value of a metric.
struct MetricPoint {
  std::int64_t step = 0;   ///< optimizer steps completed when it was recorded
  std::int64_t epoch = 0;  ///< epoch index when it was recorded
  double value = 0.0;
};

/// Whether lower or higher values of a metric are better.
enum class Mode : std::uint8_t { Min, Max };

/// Metric name -> series of points. Values of CPU tensors are read at once (no sync on the CPU);
/// tensors on an accelerator are kept and read (a host sync) only when someone asks for the series,
/// or every `kMaxPending` points, so recording in the loop costs no sync.
class MetricHistory {
 public:
  /// Pending tensor values after which they are resolved in one go.
  static constexpr std::size_t kMaxPending = 1024;

  /// Appends a number to the series `name`.
  void record(std::string_view name, std::int64_t step, std::int64_t epoch, double value);

  /// Appends a one-element tensor to the series `name`; it is read when the series is.
  void record(std::string_view name, std::int64_t step, std::int64_t epoch, at::Tensor value);

  /// Whether the series `name` has at least one point.
  bool contains(std::string_view name) const noexcept;

  /// How many points the series `name` has (0 when there is none); reads no pending value.
  std::size_t length(std::string_view name) const noexcept;

  /// The series `name`; throws Error naming the metrics present when there is none.
  const std::vector<MetricPoint>& series(std::string_view name) const;

  /// The newest point of `name`.
  const MetricPoint& latest(std::string_view name) const;

  /// The best point of `name` (the first of equals).
  const MetricPoint& best(std::string_view name, Mode mode) const;

  /// Mean value of the points of `name` recorded in `epoch`; throws when there are none.
  double epoch_mean(std::string_view name, std::int64_t epoch) const;

  /// Names of all series, in the order they were first recorded.
  std::vector<std::string> names() const;

  /// Removes every series.
  void clear() noexcept;

  /// Replaces the series `name` (used when restoring a checkpoint).
  void set_series(std::string_view name, std::vector<MetricPoint> points);

  /// Removes the points [first, last) of the series `name` (as far as it has them); a series left
  /// without points is removed, as if never recorded.
  void erase(std::string_view name, std::size_t first, std::size_t last);

 private:
  struct Series {
    std::string name;
    std::vector<MetricPoint> points;
    std::vector<at::Tensor> pending;  // tensor values of the last `pending.size()` points
  };
  Series& series_for(std::string_view name);
  Series* find(std::string_view name) const noexcept;
  const Series& require(std::string_view name) const;
  static void resolve(Series& series);

  mutable std::vector<Series> series_;
};

/// The length of every series of a metric history at a moment (a test's EvalStart), to tell at a
/// later one (its EvalEnd) which metrics were recorded in between.
class MetricMarks {
 public:
  /// Notes the length of every series of `history` now.
  void mark(const MetricHistory& history);
  /// The metrics with points recorded since `mark`, in the history's order.
  std::vector<std::string> recorded_since(const MetricHistory& history) const;

 private:
  std::vector<std::pair<std::string, std::size_t>> lengths_;
};

}  // namespace torchbus
