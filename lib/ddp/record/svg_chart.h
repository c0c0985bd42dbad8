#pragma once
// Charts as inline SVG, drawn here rather than by a script in the page: the report opens anywhere,
// offline, and shows the same picture in every browser.

#include <string>
#include <utility>
#include <vector>

namespace ddp {

/// One line of a chart.
struct ChartSeries {
  std::string label;
  std::string color;  ///< CSS colour
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  ///< (x, y), x ascending
  /// Made from the series just before it (a difference): a value it cannot draw at an x where that
  /// one has one too is the same value missing, and the chart's note counts it once.
  bool derived = false;
};

/// A line chart with axes (round ticks, gridlines) and a legend; "no data" when every series is empty.
/// A line of more points than the plot has pixel columns is thinned to what it draws (Note [Thinning]).
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<ChartSeries>& series);

/// One box of a box chart: a whisker from `low` to `high`, a bar at `middle`.
struct ChartBox {
  std::string label;
  std::string color;
  double low = 0, middle = 0, high = 0;
};

/// Boxes side by side on a shared y axis (per-rank step times).
std::string svg_box_chart(const std::string& title, const std::string& y_label, const std::vector<ChartBox>& boxes);

/// The colour of series `i`: a palette that stays distinguishable for a dozen lines.
std::string chart_color(std::size_t i);

/// `text` with &, <, > and " escaped for HTML.
std::string html_escape(const std::string& text);

}  // namespace ddp
