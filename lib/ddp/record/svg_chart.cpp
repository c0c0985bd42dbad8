#include "ddp/record/svg_chart.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace ddp {
namespace {

constexpr double kWidth = 640, kHeight = 280;
constexpr double kLeft = 64, kRight = 16, kTop = 46, kBottom = 44;
constexpr double kLegendRow = 14, kLegendChar = 6.5;  // a legend line's height, a character's width
constexpr std::size_t kLegendLabelMax = 48;           // characters; longer labels are cut in the middle
constexpr int kLegendRowsMax = 4;                      // beyond: "+N more", so the plot keeps its height
constexpr double kLegendMore = 80;                     // the width "+N more" takes

// A tick's label, with as many digits as tell it from the next one `step` away (1.0000001 is not 1).
std::string number(double v, double step) {
  const bool far = v != 0 && (std::fabs(v) >= 1e7 || std::fabs(v) < 1e-3);
  int digits = far ? 3 : 4;
  // Whole digits below 1e7 are written out: 60000 tokens/s, not 6e+04.
  if (!far && std::fabs(v) >= 1) digits = std::max(digits, static_cast<int>(std::floor(std::log10(std::fabs(v)))) + 1);
  if (v != 0 && step > 0)
    digits = std::clamp(static_cast<int>(std::floor(std::log10(std::fabs(v))) - std::floor(std::log10(step))) + 1,
                        digits, 15);
  return fmt::format("{:.{}g}", v, digits);
}

// The title starts where the plot does (`left`), above its legend.
std::string open_svg(const std::string& title, double left = kLeft) {
  return fmt::format(R"(<svg class="chart" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">)"
                     R"(<rect width="100%" height="100%" fill="#fff"/>)"
                     R"(<text x="{}" y="20" class="title">{}</text>)",
                     kWidth, kHeight, kWidth, kHeight, html_escape(title), left, html_escape(title));
}

std::string no_data(const std::string& title) {
  return open_svg(title) +
         fmt::format(R"(<text x="{}" y="{}" class="empty">no data</text></svg>)", kWidth / 2 - 30, kHeight / 2);
}

// A data range widened to round numbers, and the ticks on it: 1, 2 or 5 times a power of ten apart,
// about five of them (Heckbert's "nice numbers"), so that 96.3-98.6 reads 96, 96.5, ..., 99.
struct Scale {
  double lo, hi;
  std::vector<double> ticks;
  double step = 0;
  /// Where v lies from lo (0) to hi (1): in halves, so that no finite range overflows (-1e308 to 1e308).
  double fraction(double v) const { return (v / 2 - lo / 2) / (hi / 2 - lo / 2); }
};

Scale nice_scale(double lo, double hi) {
  // In halves where a difference or a rounding up could overflow (values near the largest double).
  double raw = (hi / 2 - lo / 2) / 2.5, magnitude = std::pow(10.0, std::floor(std::log10(raw))), step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  if (!std::isfinite(step)) step = std::numeric_limits<double>::max() / 4;
  auto rounded = [](double nice, double value) { return std::isfinite(nice) ? nice : value; };
  Scale scale{rounded(std::floor(lo / step) * step, lo), rounded(std::ceil(hi / step) * step, hi), {}, step};
  // Counted, not stepped: a step below the values' precision would never move t.
  const auto count = std::min<long long>(std::llround((scale.hi / 2 - scale.lo / 2) / (step / 2)), 20);
  for (long long i = 0; i <= count; ++i) {
    double t = (scale.lo / 2 + static_cast<double>(i) * (step / 2)) * 2;  // halves: exact, and no overflow
    scale.ticks.push_back(std::fabs(t) < step / 1e6 ? 0 : t);
  }
  if (scale.hi <= scale.lo) scale.hi = scale.lo + step;  // a range within rounding: one tick, a visible band
  return scale;
}

// The plot area's frame, gridlines at the ticks, their labels and the axes' names. `top` is where
// the plot area starts (below the legend). No x ticks when x0 == x1 (a box chart: x is categories).
std::string axes(double left, double top, const Scale& x, const Scale& y, bool x_ticks, const std::string& x_label,
                 const std::string& y_label) {
  double right = kWidth - kRight, bottom = kHeight - kBottom;
  auto px = [&](double v) { return left + x.fraction(v) * (right - left); };
  auto py = [&](double v) { return bottom - y.fraction(v) * (bottom - top); };
  std::string out;
  for (double t : y.ticks)
    out += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" class="grid"/>)"
                       R"(<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>)",
                       left, right, py(t), py(t), left - 6, py(t) + 4, number(t, y.step));
  if (x_ticks)
    for (double t : x.ticks) {
      // Centred on the frame's right edge, a long last label (100000) ran off the chart: it ends there.
      const std::string label = number(t, x.step);
      const bool past_edge = px(t) + kLegendChar * static_cast<double>(label.size()) / 2 > kWidth - 2;
      out += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" class="grid"/>)"
                         R"(<text x="{:.1f}" y="{}" class="tick" text-anchor="{}">{}</text>)",
                         px(t), px(t), top, bottom, past_edge ? kWidth - 2 : px(t), bottom + 16,
                         past_edge ? "end" : "middle", label);
    }
  return out + fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" class="frame"/>)", left, top, right - left,
                           bottom - top) +
         fmt::format(R"(<text x="{}" y="{}" class="axis" text-anchor="middle">{}</text>)", (left + right) / 2,
                     kHeight - 8, html_escape(x_label)) +
         fmt::format(R"svg(<text x="14" y="{}" class="axis" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>)svg",
                     (top + bottom) / 2, (top + bottom) / 2, html_escape(y_label));
}

// Entries left to right, wrapping onto more lines rather than running off the chart; returns the
// SVG and where the plot area may start below it.
// Characters, not bytes, of UTF-8 text: what a label's width goes by.
std::size_t characters(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// A label of at most kLegendLabelMax characters: a longer one keeps its start and its end, where
// what tells a run's lines apart is ("... eval", "... rank 3"), cut between UTF-8 characters.
std::string shortened(const std::string& full) {
  if (characters(full) <= kLegendLabelMax) return full;
  constexpr std::size_t kTail = 16, kHead = kLegendLabelMax - kTail - 1;  // and the ellipsis
  auto continuation = [&full](std::size_t at) { return (full[at] & 0xC0) == 0x80; };
  std::size_t head = 0;
  for (std::size_t kept = 0; head < full.size() && kept < kHead; ++kept)
    for (++head; head < full.size() && continuation(head);) ++head;
  std::size_t tail = full.size();
  for (std::size_t kept = 0; tail > head && kept < kTail; ++kept)
    for (--tail; tail > head && continuation(tail);) --tail;
  return full.substr(0, head) + "\u2026" + full.substr(tail);
}

// Where the plot starts: right of the widest y tick label, which ends 6 px short of it and keeps
// clear of the rotated axis name (centred at x 14): 7-digit tokens/s ran into it at a fixed 64 px.
double plot_left(const Scale& y) {
  std::size_t widest = 0;
  for (double t : y.ticks) widest = std::max(widest, number(t, y.step).size());
  return std::max(kLeft, 30 + kLegendChar * static_cast<double>(widest));
}

// Note [Thinning]: a line of more points than the plot has pixel columns draws nothing more for
// them, but makes the page large: 500k logged steps of 8 ranks made a 32 MB page that Chromium
// would not render. Per pixel column, the first, lowest, highest and last points (M4, Jugel et
// al. 2014) draw every pixel the whole line would, spikes included; `pixels` in x order.
std::vector<std::pair<double, double>> thinned(const std::vector<std::pair<double, double>>& pixels) {
  std::vector<std::pair<double, double>> kept;
  for (std::size_t begin = 0; begin < pixels.size();) {
    const double column = std::floor(pixels[begin].first);
    std::size_t end = begin, low = begin, high = begin;
    for (; end < pixels.size() && std::floor(pixels[end].first) == column; ++end) {
      if (pixels[end].second < pixels[low].second) low = end;
      if (pixels[end].second > pixels[high].second) high = end;
    }
    std::size_t chosen[] = {begin, low, high, end - 1};
    std::sort(std::begin(chosen), std::end(chosen));
    for (std::size_t i = 0; i < 4; ++i)
      if (i == 0 || chosen[i] != chosen[i - 1]) kept.push_back(pixels[chosen[i]]);
    begin = end;
  }
  return kept;
}

// The legend's rows from the plot's left edge; returns them and where the plot can start below.
std::pair<std::string, double> legend(const std::vector<ChartSeries>& entries, double left) {
  std::string out;
  double x = left, y = 28, right = kWidth - kRight;
  int row = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& entry = entries[i];
    std::string label = shortened(entry.label);
    double width = 30 + kLegendChar * static_cast<double>(characters(label));
    // On the last row an entry leaves room to say how many did not fit, unless it is the last.
    const bool last_row = row == kLegendRowsMax - 1;
    const double reserve = last_row && i + 1 < entries.size() ? kLegendMore : 0;
    if (x > left && x + width - 10 + reserve > right) {
      if (last_row) {  // the rest, named on hover: 128 ranks' lines would leave no plot
        std::string rest;
        for (std::size_t j = i; j < entries.size(); ++j) rest += (j == i ? "" : ", ") + entries[j].label;
        out += fmt::format(R"(<g><title>{}</title><text x="{}" y="{}" class="legend">+{} more</text></g>)",
                           html_escape(rest), x, y + 9, entries.size() - i);
        break;
      }
      x = left, y += kLegendRow, ++row;
    }
    std::string whole = label == entry.label ? "" : "<title>" + html_escape(entry.label) + "</title>";  // on hover
    // The swatch is a stretch of the line as drawn, dashed or not: runs share a colour by run.
    out += fmt::format(R"(<g>{}<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="3"{}/>)"
                       R"(<text x="{}" y="{}" class="legend">{}</text></g>)",
                       whole, x, x + 16, y + 5, y + 5, entry.color, entry.dashed ? R"( stroke-dasharray="4 2")" : "",
                       x + 20, y + 9, html_escape(label));
    x += width;
  }
  return {out, std::max(kTop, y + 18)};
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
  // NaN and infinite values (a diverged loss) cannot be drawn: they are left out and counted in a
  // note, so that a chart never looks empty, or calm, without saying why.
  auto drawable = [](double x, double y) { return std::isfinite(x) && std::isfinite(y); };
  int undrawn = 0;
  double first_undrawn = std::numeric_limits<double>::infinity();
  std::set<double> undrawn_before, undrawn_here;  // the x of the previous series' values not drawn, and this one's
  for (const auto& s : series) {
    undrawn_before.swap(undrawn_here);
    undrawn_here.clear();
    for (const auto& [x, y] : s.points) {
      if (!drawable(x, y)) {
        undrawn_here.insert(x);
        if (s.derived && undrawn_before.count(x)) continue;  // counted with the series it was made from
        ++undrawn;
        first_undrawn = std::min(first_undrawn, x);
        continue;
      }
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  const std::string note =
      undrawn == 0 ? ""
                   : fmt::format(R"(<text x="{}" y="20" class="note" text-anchor="end">{} value(s) not drawn: NaN or infinite{}</text>)",
                                 kWidth - kRight, undrawn,
                                 std::isfinite(first_undrawn) ? fmt::format(", from {} {}", x_label, first_undrawn) : "");
  if (!std::isfinite(x0)) return undrawn == 0 ? no_data(title) : open_svg(title) + note + "</svg>";
  // One x (an evaluation at the end alone) or one value (a constant rate): in the middle of the
  // plot, not on its frame.
  if (x1 - x0 <= 1e-9 * std::max(std::fabs(x0), std::fabs(x1))) x0 -= 1, x1 += 1;
  if (y1 - y0 <= 1e-9 * std::max(std::fabs(y0), std::fabs(y1))) {  // flat, to rounding
    const double widen = y0 == 0 ? 1 : std::fabs(y0) * 0.1;
    if (y0 == 0 || !std::isfinite(y0 + widen))
      y0 == 0 ? y1 = widen : y0 -= widen;  // zero on the floor; near the largest double: below it
    else
      y0 -= widen, y1 += widen;
  }
  std::vector<ChartSeries> entries;
  for (const auto& s : series)
    if (!s.points.empty()) entries.push_back({s.label, s.color, s.dashed, {}});
  Scale xs = nice_scale(x0, x1), ys = nice_scale(y0, y1);
  double left = plot_left(ys), right = kWidth - kRight, bottom = kHeight - kBottom;
  auto [legend_svg, top] = legend(entries, left);
  auto px = [&](double x) { return left + xs.fraction(x) * (right - left); };
  auto py = [&](double y) { return bottom - ys.fraction(y) * (bottom - top); };

  std::string out = open_svg(title, left) + axes(left, top, xs, ys, true, x_label, y_label);
  for (const auto& s : series) {
    // A line for each run of drawable points: a value not drawn breaks it, rather than a straight
    // line across hiding it; a run of one point has no line, and is marked.
    std::vector<std::pair<double, double>> run;
    auto draw = [&]() {
      if (run.size() == 1)
        out += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", px(run[0].first), py(run[0].second),
                           s.color);
      if (run.size() > 1) {
        std::vector<std::pair<double, double>> pixels;
        for (const auto& [x, y] : run) pixels.emplace_back(px(x), py(y));
        std::string points;
        for (const auto& [x, y] : thinned(pixels)) points += fmt::format("{:.1f},{:.1f} ", x, y);
        out += fmt::format(R"(<polyline class="series" fill="none" stroke="{}" stroke-width="2"{} points="{}"/>)",
                           s.color, s.dashed ? R"( stroke-dasharray="6 4")" : "", points);
      }
      run.clear();
    };
    for (const auto& [x, y] : s.points) {
      if (drawable(x, y))
        run.emplace_back(x, y);
      else
        draw();
    }
    draw();
  }
  return out + legend_svg + note + "</svg>";
}

std::string svg_box_chart(const std::string& title, const std::string& y_label, const std::vector<ChartBox>& boxes) {
  if (boxes.empty()) return no_data(title);
  double y1 = 0;
  for (const auto& b : boxes) y1 = std::max(y1, b.high);
  if (y1 <= 0) y1 = 1;
  Scale ys = nice_scale(0, y1);
  double right = kWidth - kRight, bottom = kHeight - kBottom;
  auto py = [&](double y) { return bottom - ys.fraction(y) * (bottom - kTop); };
  const double left = plot_left(ys);
  std::string out = open_svg(title, left) + axes(left, kTop, Scale{0, 1, {}, 0}, ys, false, "", y_label);
  double slot = (right - left) / static_cast<double>(boxes.size());
  // Labels that would run together (16 ranks: "rank 0rank 1...") are written every few boxes.
  std::size_t widest = 0;
  for (const auto& b : boxes) widest = std::max(widest, characters(b.label));
  const auto label_every = static_cast<std::size_t>(std::ceil((kLegendChar * static_cast<double>(widest) + 8) / slot));
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const auto& b = boxes[i];
    double cx = left + slot * (static_cast<double>(i) + 0.5), half = std::min(24.0, slot / 3);
    out += fmt::format(R"(<rect class="box" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" opacity="0.35"/>)",
                       cx - half, py(b.high), 2 * half, std::max(1.0, py(b.low) - py(b.high)), b.color);
    out += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="3"/>)",
                       cx - half, cx + half, py(b.middle), py(b.middle), b.color);
    if (i % std::max<std::size_t>(label_every, 1) == 0)
      out += fmt::format(R"(<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>)", cx, bottom + 30,
                         html_escape(b.label));
  }
  return out + "</svg>";
}

}  // namespace ddp
