#include "report/svg_chart.hpp"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace torchbus {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Geometry of the plot inside the viewBox.
constexpr double kLeft = 64.0, kRight = 16.0, kTop = 26.0, kBottom = 36.0;
constexpr std::size_t kMaxMarkerLabels = 12;  // marker labels drawn at most
constexpr std::size_t kMaxMarkerLines = 200;  // beyond this, only labelled markers get a line
constexpr std::size_t kMaxPointCircles = 60;  // points get a circle (and tooltip) up to this many
constexpr const char* kSeriesColor = "#1f6fb4";

/// Length of the valid UTF-8 sequence starting at `text[i]` (a byte >= 0x80), 0 when invalid.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const auto continuation = [&](std::size_t k) {
    return i + k < text.size() && (byte(k) & 0xC0) == 0x80;
  };
  const unsigned char lead = byte(0);
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (lead == 0xE0 && byte(1) < 0xA0) return 0;  // overlong
    if (lead == 0xED && byte(1) > 0x9F) return 0;  // surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (lead == 0xF0 && byte(1) < 0x90) return 0;  // overlong
    if (lead == 0xF4 && byte(1) > 0x8F) return 0;  // beyond U+10FFFF
    return 4;
  }
  return 0;
}

/// 1, 2 or 5 times a power of ten, about `span / target`.
double nice_step(double span, int target) {
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double residual = raw / magnitude;
  const double nice = residual <= 1.0 ? 1.0 : residual <= 2.0 ? 2.0 : residual <= 5.0 ? 5.0 : 10.0;
  return nice * magnitude;
}

/// One axis: its ends (the data range widened to whole ticks) and its tick values.
struct Axis {
  double lo = 0.0;
  double hi = 1.0;
  std::vector<double> ticks;
  int digits = 6;  // significant digits that tell the tick labels apart

  /// Position of `value` between the ends, 0 to 1 (in halves, so that no difference overflows).
  double fraction(double value) const { return (value / 2 - lo / 2) / (hi / 2 - lo / 2); }
};

/// An axis over [lo, hi] (finite, lo <= hi) with about `target` intervals.
Axis make_axis(double lo, double hi, int target, bool integer) {
  if (lo == hi) {
    const double pad = integer ? 1.0 : (lo == 0.0 ? 1.0 : std::abs(lo) * 0.1);
    lo = integer && lo >= 0.0 && lo < 1.0 ? lo : lo - pad;
    hi += pad;
    lo = std::max(lo, std::numeric_limits<double>::lowest());  // -inf after overflow
    hi = std::min(hi, std::numeric_limits<double>::max());
  }
  Axis axis;
  axis.lo = lo;
  axis.hi = hi;
  const double span = hi - lo;
  double step = std::isfinite(span) ? nice_step(span, target) : 0.0;
  if (integer) step = std::max(step, 1.0);
  const double nice_lo = std::floor(lo / step) * step;
  const double nice_hi = std::ceil(hi / step) * step;
  const double count = std::round((nice_hi - nice_lo) / step);
  if (!(step > 0.0) || !std::isfinite(nice_lo) || !std::isfinite(nice_hi) || !(count >= 1.0) ||
      count > 4.0 * target) {
    axis.ticks = {lo, hi};  // a range too wide (or too fine) for whole ticks: label its ends
    return axis;
  }
  axis.lo = nice_lo;
  axis.hi = nice_hi;
  for (int i = 0; i <= static_cast<int>(count); ++i) axis.ticks.push_back(nice_lo + i * step);
  // Ticks are multiples of `step`: their last significant digit is at step's leading digit.
  // Whole numbers up to 7 digits are written out (%g would write 200 as 2e+02 with 2 digits).
  const double largest = std::max(std::abs(nice_lo), std::abs(nice_hi));
  const int magnitude = static_cast<int>(std::floor(std::log10(largest)));
  const int significant = magnitude - static_cast<int>(std::floor(std::log10(step))) + 1;
  axis.digits =
      std::clamp(magnitude < 7 ? std::max(significant, magnitude + 1) : significant, 1, 15);
  return axis;
}

/// A coordinate of the viewBox, one decimal.
std::string coordinate(double value) {
  return fmt::format("{:.1f}", value);
}

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t length = utf8_length(text, i);
      const auto sequence = text.substr(i, length);
      if (length == 0) {
        out += kReplacement;
        ++i;
      } else if (sequence == "\xEF\xBF\xBE" || sequence == "\xEF\xBF\xBF") {
        out += kReplacement;  // U+FFFE and U+FFFF are not XML characters
        i += length;
      } else {
        out.append(sequence);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '\t':
      case '\n':
      case '\r':
        out += static_cast<char>(c);
        break;
      default:
        if (c < 0x20) {
          out += kReplacement;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

std::string format_number(double value, int digits) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{:.{}g}", value, digits);
}

std::vector<std::size_t> downsample_min_max(const std::vector<ChartPoint>& points,
                                            std::size_t max_points) {
  std::vector<std::size_t> kept;
  const std::size_t n = points.size();
  if (max_points == 0 || n <= max_points) {
    kept.resize(n);
    for (std::size_t i = 0; i < n; ++i) kept[i] = i;
    return kept;
  }
  const std::size_t buckets = std::max<std::size_t>(max_points / 2, 1);
  const std::size_t size = (n + buckets - 1) / buckets;
  for (std::size_t begin = 0; begin < n; begin += size) {
    const std::size_t end = std::min(begin + size, n);
    std::size_t low = begin, high = begin;
    for (std::size_t i = begin + 1; i < end; ++i) {
      if (points[i].y < points[low].y) low = i;
      if (points[i].y > points[high].y) high = i;
    }
    kept.push_back(std::min(low, high));
    if (low != high) kept.push_back(std::max(low, high));
  }
  return kept;
}

std::string render_line_chart(const LineChart& chart) {
  // The finite points, then the ones drawn.
  std::vector<ChartPoint> finite;
  std::vector<std::size_t> finite_index;  // index in chart.points of each finite point
  for (std::size_t i = 0; i < chart.points.size(); ++i) {
    const auto& point = chart.points[i];
    if (std::isfinite(point.x) && std::isfinite(point.y)) {
      finite.push_back(point);
      finite_index.push_back(i);
    }
  }
  const std::size_t skipped = chart.points.size() - finite.size();
  const auto drawn = downsample_min_max(finite, chart.max_points);

  // Axes.
  double x_lo = chart.x_min.value_or(0.0), x_hi = chart.x_max.value_or(0.0);
  double y_lo = 0.0, y_hi = 1.0;
  if (!finite.empty()) {
    const auto [x_low, x_high] = std::minmax_element(
        finite.begin(), finite.end(), [](const auto& a, const auto& b) { return a.x < b.x; });
    const auto [y_low, y_high] = std::minmax_element(
        finite.begin(), finite.end(), [](const auto& a, const auto& b) { return a.y < b.y; });
    if (!chart.x_min) x_lo = x_low->x;
    if (!chart.x_max) x_hi = x_high->x;
    y_lo = y_low->y;
    y_hi = y_high->y;
  }
  if (x_hi < x_lo) std::swap(x_lo, x_hi);
  const Axis x_axis = make_axis(x_lo, x_hi, 6, chart.x_integer);
  const Axis y_axis = make_axis(y_lo, y_hi, 4, false);
  const double width = chart.width, height = chart.height;
  const double plot_w = width - kLeft - kRight, plot_h = height - kTop - kBottom;
  const auto px = [&](double x) { return kLeft + x_axis.fraction(x) * plot_w; };
  const auto py = [&](double y) { return kTop + (1.0 - y_axis.fraction(y)) * plot_h; };

  std::string svg;
  auto out = std::back_inserter(svg);
  fmt::format_to(out,
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-metric=\"{}\" "
                 "data-values=\"{}\" data-drawn=\"{}\" data-skipped=\"{}\" viewBox=\"0 0 {} {}\" "
                 "width=\"{}\" height=\"{}\" role=\"img\" font-family=\"sans-serif\" "
                 "font-size=\"11\"",
                 escape_xml(chart.name), chart.points.size(), drawn.size(), skipped, chart.width,
                 chart.height, chart.width, chart.height);
  for (const auto& attribute : chart.attributes) svg += " " + attribute;
  fmt::format_to(out, ">\n<title>{} against {}</title>\n", escape_xml(chart.name),
                 escape_xml(chart.x_label));
  fmt::format_to(out,
                 "<rect class=\"plot\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" "
                 "stroke=\"#999\"/>\n",
                 coordinate(kLeft), coordinate(kTop), coordinate(plot_w), coordinate(plot_h));

  // Y ticks: grid lines and labels.
  svg += "<g class=\"y-axis\">\n";
  for (double tick : y_axis.ticks) {
    const auto y = coordinate(py(tick));
    fmt::format_to(out,
                   "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\" "
                   "fill=\"#444\">{}</text>\n",
                   coordinate(kLeft), y, coordinate(width - kRight), y, coordinate(kLeft - 6), y,
                   escape_xml(format_number(tick, y_axis.digits)));
  }
  svg += "</g>\n";

  // X ticks and the axis caption.
  svg += "<g class=\"x-axis\">\n";
  const double axis_y = height - kBottom;
  for (double tick : x_axis.ticks) {
    const auto x = coordinate(px(tick));
    fmt::format_to(out,
                   "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>"
                   "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{}</text>\n",
                   x, coordinate(axis_y), x, coordinate(axis_y + 4), x, coordinate(axis_y + 16),
                   escape_xml(format_number(tick, x_axis.digits)));
  }
  fmt::format_to(out,
                 "<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" "
                 "fill=\"#444\">{}</text>\n",
                 coordinate(width - kRight), coordinate(height - 4), escape_xml(chart.x_label));
  svg += "</g>\n";

  // Markers: all lines up to kMaxMarkerLines, labels spread over at most kMaxMarkerLabels.
  std::vector<const ChartMarker*> markers;
  for (const auto& marker : chart.markers) {
    if (std::isfinite(marker.x) && marker.x >= x_axis.lo && marker.x <= x_axis.hi) {
      markers.push_back(&marker);
    }
  }
  if (!markers.empty()) {
    svg += "<g class=\"markers\">\n";
    const std::size_t stride = (markers.size() + kMaxMarkerLabels - 1) / kMaxMarkerLabels;
    for (std::size_t i = 0; i < markers.size(); ++i) {
      const bool labelled = i % stride == 0;
      if (!labelled && markers.size() > kMaxMarkerLines) continue;
      const auto x = coordinate(px(markers[i]->x));
      fmt::format_to(out,
                     "<line class=\"marker\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" "
                     "stroke=\"#b0b0b0\" stroke-dasharray=\"4 3\"/>\n",
                     x, coordinate(kTop), x, coordinate(axis_y));
      if (labelled && !markers[i]->label.empty()) {
        fmt::format_to(out,
                       "<text class=\"marker-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
                       "font-size=\"10\" fill=\"#777\">{}</text>\n",
                       x, coordinate(kTop - 6), escape_xml(markers[i]->label));
      }
    }
    svg += "</g>\n";
  }

  // The series.
  if (!drawn.empty()) {
    fmt::format_to(out,
                   "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" "
                   "stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"",
                   kSeriesColor);
    for (std::size_t i = 0; i < drawn.size(); ++i) {
      const auto& point = finite[drawn[i]];
      fmt::format_to(out, "{}{},{}", i == 0 ? "" : " ", coordinate(px(point.x)),
                     coordinate(py(point.y)));
    }
    svg += "\"/>\n";
  }
  if (!drawn.empty() && drawn.size() <= kMaxPointCircles) {
    svg += "<g class=\"points\">\n";
    for (std::size_t index : drawn) {
      const auto& point = finite[index];
      fmt::format_to(out,
                     "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"><title>{} {}: {}</title>"
                     "</circle>\n",
                     coordinate(px(point.x)), coordinate(py(point.y)), kSeriesColor,
                     escape_xml(chart.x_label), format_number(point.x, 15), format_number(point.y));
    }
    svg += "</g>\n";
  }
  if (chart.highlight && *chart.highlight < chart.points.size()) {
    const auto& point = chart.points[*chart.highlight];
    if (std::isfinite(point.x) && std::isfinite(point.y)) {
      fmt::format_to(out,
                     "<circle class=\"highlight\" cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"none\" "
                     "stroke=\"#d62728\" stroke-width=\"1.5\"/>\n",
                     coordinate(px(point.x)), coordinate(py(point.y)));
    }
  }

  // What was left out.
  std::string note;
  if (finite.empty()) {
    note = chart.points.empty() ? "no values" : "no finite values: nothing to draw";
  } else if (skipped > 0) {
    note =
        fmt::format("{} non-finite value{} (nan/inf) not drawn", skipped, skipped == 1 ? "" : "s");
  }
  if (!note.empty()) {
    fmt::format_to(out,
                   "<text class=\"note\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#b03030\">"
                   "{}</text>\n",
                   coordinate(width - kRight - 4), coordinate(kTop + 14), escape_xml(note));
  }
  svg += "</svg>";
  return svg;
}

}  // namespace torchbus
