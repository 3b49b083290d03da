#pragma once

/// \file
/// MetricMonitor: watches one metric of the history for new points and tracks its best value;
/// shared by EarlyStopping and reduce-on-plateau.

#include <torchbus/event.hpp>
#include <torchbus/metric_history.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace torchbus {

struct State;

/// How an improvement's margin `min_delta` is measured, as PyTorch's ReduceLROnPlateau
/// `threshold_mode`: Abs, beyond `best -/+ min_delta` ('abs'); Rel, beyond `best * (1 -/+
/// min_delta)` ('rel'), -/+ for Min/Max.
enum class ThresholdMode : std::uint8_t { Abs, Rel };

/// The newest point of a monitored metric, compared with the best so far: `poll` returns a point
/// only when the metric has one not seen at the previous poll, and `update` counts the checks
/// without an improvement (`wait`).
class MetricMonitor {
 public:
  /// Watches `monitor`; lower (Min) or higher (Max) is better by more than `min_delta`, measured
  /// by `threshold_mode`.
  MetricMonitor(std::string monitor, Mode mode, double min_delta,
                ThresholdMode threshold_mode = ThresholdMode::Abs);

  /// Name of the watched metric.
  const std::string& monitor() const noexcept { return monitor_; }
  /// Best value seen so far (+inf for Min, -inf for Max before the first update).
  double best() const noexcept { return best_; }
  /// Updates since the last improvement (or the last reset_wait).
  std::int64_t wait() const noexcept { return wait_; }

  /// The newest point of the metric if it is new since the previous poll, else nullptr (a host
  /// read if recorded as a tensor). Throws ConfigError when the metric was not recorded, naming
  /// `who` (e.g. "EarlyStopping: monitored metric"), the `check_on` event, the metrics present
  /// and `reader`, the callback that reads it (e.g. "EarlyStopping").
  const MetricPoint* poll(const State& state, Event check_on, std::string_view who,
                          std::string_view reader);
  /// Whether `value` beats the best value by more than min_delta (by the threshold mode).
  bool improved(double value) const noexcept;
  /// Takes `value` as the new best and resets wait if it improved; otherwise adds one to wait.
  /// With a `baseline`, an improvement that does not also beat it (by min_delta) adds one to wait
  /// too (Keras' EarlyStopping baseline). Returns whether it improved.
  bool update(double value, std::optional<double> baseline = std::nullopt) noexcept;
  /// Sets wait to 0.
  void reset_wait() noexcept { wait_ = 0; }

  /// Writes best, wait and the last point polled under keys starting with `prefix`.
  void save_state(torch::serialize::OutputArchive& archive, const std::string& prefix = "") const;
  /// Restores what `save_state` wrote with the same `prefix`.
  void load_state(torch::serialize::InputArchive& archive, const std::string& prefix = "");

 private:
  /// Whether `value` beats `reference` by more than min_delta (by the threshold mode).
  bool beats(double value, double reference) const noexcept;

  std::string monitor_;
  Mode mode_;
  double min_delta_;
  ThresholdMode threshold_mode_;
  double best_;
  std::int64_t wait_ = 0;
  std::int64_t last_count_ = -1;  // points of the metric at the previous poll
  std::int64_t last_step_ = -1;   // step of the newest point already polled
  std::int64_t last_epoch_ = -1;  // epoch of the newest point already polled
};

}  // namespace torchbus
