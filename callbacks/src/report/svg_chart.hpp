#pragma once

// A self-contained SVG line chart (no scripts, no external resources) and the XML escaping it
// uses; RunReport draws one per metric. Private to torchbus::callbacks.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchbus {

/// One point of a line chart; a non-finite `y` is not drawn.
struct ChartPoint {
  double x = 0.0;  ///< position on the x axis (e.g. the step)
  double y = 0.0;  ///< value
};

/// A dashed vertical line across the plot with a label on top, e.g. where an epoch starts.
struct ChartMarker {
  double x = 0.0;     ///< position on the x axis
  std::string label;  ///< text above the line (may be empty)
};

/// What `render_line_chart` draws: one series against x, with axes, ticks and markers.
struct LineChart {
  std::string name;                      ///< the series' name: `data-metric` and the SVG title
  std::vector<ChartPoint> points;        ///< the series in drawing order
  std::string x_label = "step";          ///< caption of the x axis
  std::optional<double> x_min;           ///< left end of the x axis (none: the smallest x)
  std::optional<double> x_max;           ///< right end of the x axis (none: the largest x)
  bool x_integer = true;                 ///< x ticks at whole numbers only (steps, epochs)
  std::vector<ChartMarker> markers;      ///< vertical lines; at most 12 are labelled, evenly spread
  std::size_t max_points = 0;            ///< points drawn at most (0: all); see downsample_min_max
  std::optional<std::size_t> highlight;  ///< index in `points` of a point drawn as a ring
  /// Extra `name="value"` attributes of the svg element, written as given (escape with
  /// escape_xml).
  std::vector<std::string> attributes;
  int width = 640;   ///< width of the viewBox
  int height = 260;  ///< height of the viewBox
};

/// Indices of the points kept when `points` (all finite) must fit in `max_points` (0: keep
/// all): the points are cut into `max_points / 2` buckets of `ceil(n / (max_points / 2))`
/// consecutive points (the last may be shorter), and each bucket keeps its lowest and its highest
/// point (the first of equals; one point when they coincide), in their original order. So spikes
/// survive, the first and last points usually do, and at most `max_points` remain.
std::vector<std::size_t> downsample_min_max(const std::vector<ChartPoint>& points,
                                            std::size_t max_points);

/// The chart as an `<svg class="chart" data-metric="..." ...>` element: one `<polyline
/// class="series">` with one coordinate pair per drawn point (none when nothing is finite), axes
/// with labelled ticks, and a note naming the non-finite values that were left out. The element
/// carries `data-values` (points given), `data-drawn` and `data-skipped` (non-finite ones).
std::string render_line_chart(const LineChart& chart);

/// `text` safe in XML/HTML text and quoted attributes: `& < > " '` become entities, control
/// characters XML forbids and bytes that are not UTF-8 become U+FFFD.
std::string escape_xml(std::string_view text);

/// A number for people: up to `digits` significant digits, `nan`, `inf` or `-inf`.
std::string format_number(double value, int digits = 6);

}  // namespace torchbus
