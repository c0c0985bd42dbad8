#include "ddp/record/svg_chart.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ddp {
namespace {

constexpr double kWidth = 640, kHeight = 280;
constexpr double kLeft = 64, kRight = 16, kTop = 46, kBottom = 44;

std::string number(double v) {
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.4g}", v);
}

std::string open_svg(const std::string& title) {
  return fmt::format(R"(<svg class="chart" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">)"
                     R"(<rect width="100%" height="100%" fill="#fff"/>)"
                     R"(<text x="{}" y="20" class="title">{}</text>)",
                     kWidth, kHeight, kWidth, kHeight, html_escape(title), kLeft, html_escape(title));
}

std::string no_data(const std::string& title) {
  return open_svg(title) +
         fmt::format(R"(<text x="{}" y="{}" class="empty">no data</text></svg>)", kWidth / 2 - 30, kHeight / 2);
}

// The plot area's frame and the ticks at both ends of each axis.
// No x ticks when x0 == x1 (a box chart, whose x is categories).
std::string axes(double x0, double x1, double y0, double y1, const std::string& x_label, const std::string& y_label) {
  double right = kWidth - kRight, bottom = kHeight - kBottom;
  std::string x_ticks =
      x0 == x1 ? ""
               : fmt::format(R"(<text x="{}" y="{}" class="tick">{}</text>)", kLeft, bottom + 16, number(x0)) +
                     fmt::format(R"(<text x="{}" y="{}" class="tick" text-anchor="end">{}</text>)", right, bottom + 16,
                                 number(x1));
  return fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" class="frame"/>)", kLeft, kTop,
                     right - kLeft, bottom - kTop) + x_ticks +
         fmt::format(R"(<text x="{}" y="{}" class="tick" text-anchor="end">{}</text>)", kLeft - 6, bottom, number(y0)) +
         fmt::format(R"(<text x="{}" y="{}" class="tick" text-anchor="end">{}</text>)", kLeft - 6, kTop + 10,
                     number(y1)) +
         fmt::format(R"(<text x="{}" y="{}" class="axis" text-anchor="middle">{}</text>)", (kLeft + right) / 2,
                     kHeight - 8, html_escape(x_label)) +
         fmt::format(R"svg(<text x="14" y="{}" class="axis" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>)svg",
                     (kTop + bottom) / 2, (kTop + bottom) / 2, html_escape(y_label));
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  double x = kLeft;
  for (const auto& [label, color] : entries) {
    out += fmt::format(R"(<rect x="{}" y="28" width="10" height="10" fill="{}"/><text x="{}" y="37" class="legend">{}</text>)",
                       x, color, x + 14, html_escape(label));
    x += 24 + 6.5 * static_cast<double>(label.size());
  }
  return out;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string chart_color(std::size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<ChartSeries>& series) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!std::isfinite(x0)) return no_data(title);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::fabs(y0) * 0.1);
  double right = kWidth - kRight, bottom = kHeight - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (right - kLeft); };
  auto py = [&](double y) { return bottom - (y - y0) / (y1 - y0) * (bottom - kTop); };

  std::string out = open_svg(title) + axes(x0, x1, y0, y1, x_label, y_label);
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    entries.emplace_back(s.label, s.color);
    std::string points;
    for (const auto& [x, y] : s.points) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    out += fmt::format(R"(<polyline class="series" fill="none" stroke="{}" stroke-width="2"{} points="{}"/>)", s.color,
                       s.dashed ? R"( stroke-dasharray="6 4")" : "", points);
    if (s.points.size() == 1)  // a single point is no line: mark it
      out += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", px(s.points[0].first),
                         py(s.points[0].second), s.color);
  }
  return out + legend(entries) + "</svg>";
}

std::string svg_box_chart(const std::string& title, const std::string& y_label, const std::vector<ChartBox>& boxes) {
  if (boxes.empty()) return no_data(title);
  double y0 = 0, y1 = 0;
  for (const auto& b : boxes) y1 = std::max(y1, b.high);
  if (y1 <= y0) y1 = 1;
  double right = kWidth - kRight, bottom = kHeight - kBottom;
  auto py = [&](double y) { return bottom - (y - y0) / (y1 - y0) * (bottom - kTop); };
  std::string out = open_svg(title) + axes(0, 0, y0, y1, "", y_label);
  double slot = (right - kLeft) / static_cast<double>(boxes.size());
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const auto& b = boxes[i];
    double cx = kLeft + slot * (static_cast<double>(i) + 0.5), half = std::min(24.0, slot / 3);
    out += fmt::format(R"(<rect class="box" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" opacity="0.35"/>)",
                       cx - half, py(b.high), 2 * half, std::max(1.0, py(b.low) - py(b.high)), b.color);
    out += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="3"/>)",
                       cx - half, cx + half, py(b.middle), py(b.middle), b.color);
    out += fmt::format(R"(<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>)", cx, bottom + 30,
                       html_escape(b.label));
  }
  return out + "</svg>";
}

}  // namespace ddp
