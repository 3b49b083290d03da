#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/metric_monitor.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include <limits>

namespace torchbus {

MetricMonitor::MetricMonitor(std::string monitor, Mode mode, double min_delta,
                             ThresholdMode threshold_mode)
    : monitor_(std::move(monitor)),
      mode_(mode),
      min_delta_(min_delta),
      threshold_mode_(threshold_mode),
      best_(mode == Mode::Min ? std::numeric_limits<double>::infinity()
                              : -std::numeric_limits<double>::infinity()) {}

const MetricPoint* MetricMonitor::poll(const State& state, Event check_on, std::string_view who,
                                       std::string_view reader) {
  TORCHBUS_CHECK(state.metrics.contains(monitor_), ConfigError, who, " '", monitor_,
                 "' was not recorded by ", to_string(check_on), " (epoch ", state.epoch, ", step ",
                 state.step, "); metrics present: ", detail::join_or_none(state.metrics.names()),
                 ". Expected one of them, or a metric recorded before '", reader,
                 "' runs (by a subscriber of Role::Metrics, or one placed before(\"", reader,
                 "\"))");
  const auto& series = state.metrics.series(monitor_);  // a host read if recorded as a tensor
  const auto count = static_cast<std::int64_t>(series.size());
  const auto& point = series.back();
  if (count == last_count_ && point.step == last_step_ && point.epoch == last_epoch_) {
    return nullptr;
  }
  last_count_ = count;
  last_step_ = point.step;
  last_epoch_ = point.epoch;
  return &point;
}

// PyTorch's ReduceLROnPlateau._is_better, literally: 'rel' scales the best value (of either sign).
bool MetricMonitor::beats(double value, double reference) const noexcept {
  if (threshold_mode_ == ThresholdMode::Rel) {
    return mode_ == Mode::Min ? value < reference * (1.0 - min_delta_)
                              : value > reference * (min_delta_ + 1.0);
  }
  return mode_ == Mode::Min ? value < reference - min_delta_ : value > reference + min_delta_;
}

bool MetricMonitor::improved(double value) const noexcept {
  return beats(value, best_);
}

bool MetricMonitor::update(double value, std::optional<double> baseline) noexcept {
  if (improved(value)) {
    best_ = value;
    // Keras (callbacks/early_stopping.py:116-121): only an improvement past the baseline too
    // restarts the count.
    wait_ = !baseline || beats(value, *baseline) ? 0 : wait_ + 1;
    return true;
  }
  ++wait_;
  return false;
}

void MetricMonitor::save_state(torch::serialize::OutputArchive& archive,
                               const std::string& prefix) const {
  archive.write(prefix + "best", c10::IValue(best_));
  archive.write(prefix + "wait", c10::IValue(wait_));
  archive.write(prefix + "last_count", c10::IValue(last_count_));
  archive.write(prefix + "last_step", c10::IValue(last_step_));
  archive.write(prefix + "last_epoch", c10::IValue(last_epoch_));
}

void MetricMonitor::load_state(torch::serialize::InputArchive& archive, const std::string& prefix) {
  const auto read = [&archive, &prefix](const char* key) {
    return read_value(archive, prefix + key);
  };
  best_ = read("best").toDouble();
  wait_ = read_integer(archive, prefix + "wait", 0);
  last_count_ = read_integer(archive, prefix + "last_count", -1);
  last_step_ = read_integer(archive, prefix + "last_step", -1);
  last_epoch_ = read_integer(archive, prefix + "last_epoch", -1);
}

}  // namespace torchbus
