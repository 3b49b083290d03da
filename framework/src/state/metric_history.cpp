#include <torchbus/error.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/scalar_value.hpp>

#include <ATen/ops/stack.h>

#include <algorithm>

namespace torchbus {

MetricHistory::Series& MetricHistory::series_for(std::string_view name) {
  for (auto& series : series_) {
    if (series.name == name) return series;
  }
  series_.push_back(Series{std::string(name), {}, {}});
  return series_.back();
}

MetricHistory::Series* MetricHistory::find(std::string_view name) const noexcept {
  for (auto& series : series_) {
    if (series.name == name && !series.points.empty()) return &series;
  }
  return nullptr;
}

const MetricHistory::Series& MetricHistory::require(std::string_view name) const {
  if (auto* series = find(name)) {
    resolve(*series);
    return *series;
  }
  throw Error(detail::concat("no metric named '", name,
                             "' in the metric history; recorded: ", detail::join_or_none(names())));
}

void MetricHistory::resolve(Series& series) {
  if (series.pending.empty()) return;
  // One host read for all pending values.
  const auto values = at::stack(series.pending).to(at::kDouble).cpu();
  const auto* data = values.data_ptr<double>();
  const auto first = series.points.size() - series.pending.size();
  for (std::size_t i = 0; i < series.pending.size(); ++i) series.points[first + i].value = data[i];
  series.pending.clear();
}

void MetricHistory::record(std::string_view name, std::int64_t step, std::int64_t epoch,
                           double value) {
  auto& series = series_for(name);
  resolve(series);
  series.points.push_back(MetricPoint{step, epoch, value});
}

void MetricHistory::record(std::string_view name, std::int64_t step, std::int64_t epoch,
                           at::Tensor value) {
  TORCHBUS_CHECK(value.numel() == 1 && !value.is_complex(), Error, "metric '", name,
                 "' must be recorded as a one-element real tensor, got ", value.scalar_type(),
                 " of shape ", value.sizes());
  if (const auto number = host_scalar(value)) {  // in CPU memory: no host sync
    record(name, step, epoch, *number);
    return;
  }
  auto& series = series_for(name);
  series.points.push_back(MetricPoint{step, epoch, 0.0});
  series.pending.push_back(value.detach().reshape({}));
  if (series.pending.size() >= kMaxPending) resolve(series);
}

bool MetricHistory::contains(std::string_view name) const noexcept {
  return find(name) != nullptr;
}

std::size_t MetricHistory::length(std::string_view name) const noexcept {
  const auto* series = find(name);
  return series == nullptr ? 0 : series->points.size();
}

const std::vector<MetricPoint>& MetricHistory::series(std::string_view name) const {
  return require(name).points;
}

const MetricPoint& MetricHistory::latest(std::string_view name) const {
  return require(name).points.back();
}

const MetricPoint& MetricHistory::best(std::string_view name, Mode mode) const {
  const auto& points = require(name).points;
  const MetricPoint* best = &points.front();
  for (const auto& point : points) {
    if (mode == Mode::Min ? point.value < best->value : point.value > best->value) best = &point;
  }
  return *best;
}

double MetricHistory::epoch_mean(std::string_view name, std::int64_t epoch) const {
  double sum = 0.0;
  std::int64_t count = 0;
  for (const auto& point : require(name).points) {
    if (point.epoch == epoch) {
      sum += point.value;
      ++count;
    }
  }
  TORCHBUS_CHECK(count > 0, Error, "metric '", name, "' has no points in epoch ", epoch);
  return sum / static_cast<double>(count);
}

std::vector<std::string> MetricHistory::names() const {
  std::vector<std::string> result;
  for (const auto& series : series_) {
    if (!series.points.empty()) result.push_back(series.name);
  }
  return result;
}

void MetricHistory::clear() noexcept {
  series_.clear();
}

void MetricHistory::set_series(std::string_view name, std::vector<MetricPoint> points) {
  auto& series = series_for(name);
  series.pending.clear();
  series.points = std::move(points);
}

void MetricHistory::erase(std::string_view name, std::size_t first, std::size_t last) {
  auto* series = find(name);
  if (series == nullptr) return;
  auto& points = series->points;
  last = std::min(last, points.size());
  if (first >= last) return;
  // The pending values are those of the last points: drop the ones of the points removed.
  const auto pending_from = points.size() - series->pending.size();
  const auto pending = series->pending.begin();
  series->pending.erase(
      pending + static_cast<std::ptrdiff_t>(std::max(first, pending_from) - pending_from),
      pending + static_cast<std::ptrdiff_t>(std::max(last, pending_from) - pending_from));
  points.erase(points.begin() + static_cast<std::ptrdiff_t>(first),
               points.begin() + static_cast<std::ptrdiff_t>(last));
  if (points.empty()) series_.erase(series_.begin() + (series - series_.data()));
}

void MetricMarks::mark(const MetricHistory& history) {
  lengths_.clear();
  for (auto& name : history.names()) {
    const auto length = history.length(name);
    lengths_.emplace_back(std::move(name), length);
  }
}

std::vector<std::string> MetricMarks::recorded_since(const MetricHistory& history) const {
  std::vector<std::string> names;
  for (auto& name : history.names()) {
    const auto found = std::find_if(lengths_.begin(), lengths_.end(),
                                    [&](const auto& entry) { return entry.first == name; });
    const std::size_t before = found == lengths_.end() ? 0 : found->second;
    if (history.length(name) > before) names.push_back(std::move(name));
  }
  return names;
}

}  // namespace torchbus
