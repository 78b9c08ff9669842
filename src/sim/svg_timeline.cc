#include "sim/svg_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace spot::sim {
namespace {

constexpr double kLeft = 90, kWidth = 860, kRow = 14, kPlot = 120, kGap = 26;

struct Frame {
  double hours;  // horizontal extent
  double gap_h;
  double X(double h) const { return kLeft + kWidth * h / hours; }
};

std::string Label(double y, const std::string& text) {
  return fmt::format("<text x='4' y='{:.1f}' font-size='11'>{}</text>\n", y, text);
}

// One row of colored cells, merging equal neighbours.
template <typename ColorFn>
std::string Band(const Frame& f, int64_t n, double y, ColorFn color) {
  std::string out;
  int64_t i = 0;
  while (i < n) {
    std::string c = color(i);
    int64_t j = i + 1;
    while (j < n && color(j) == c) ++j;
    if (!c.empty()) {
      out += fmt::format("<rect x='{:.2f}' y='{:.1f}' width='{:.2f}' height='{}' fill='{}'/>\n",
                         f.X(i * f.gap_h), y, f.X(j * f.gap_h) - f.X(i * f.gap_h), kRow, c);
    }
    i = j;
  }
  return out;
}

std::string Polyline(const Frame& f, double y0, double max_v, int64_t n, const double* v,
                     const std::string& color) {
  std::string pts = fmt::format("{:.2f},{:.2f} ", f.X(0), y0 + kPlot);
  for (int64_t i = 0; i < n; ++i) {
    pts += fmt::format("{:.2f},{:.2f} ", f.X((i + 1) * f.gap_h), y0 + kPlot - kPlot * v[i] / max_v);
  }
  return fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>\n", color,
                     pts);
}

std::string Line(double x1, double y1, double x2, double y2, const std::string& style) {
  return fmt::format("<line x1='{:.2f}' y1='{:.2f}' x2='{:.2f}' y2='{:.2f}' {}/>\n", x1, y1, x2,
                     y2, style);
}

}  // namespace

std::string RenderTimelineSvg(const RunResult& run, std::span<const market::Trace* const> zones,
                              int64_t start_tick, const JobSpec& job, const std::string& title) {
  const int64_t n = static_cast<int64_t>(run.timeline.size());
  Frame f{std::max({job.deadline_hours, run.finish_hours, 1e-9}), zones[0]->gap_seconds / 3600.0};
  const int64_t avail_n = std::min<int64_t>(static_cast<int64_t>(std::ceil(f.hours / f.gap_h)),
                                            zones[0]->ticks() - start_tick);
  double y = 30;
  std::string body = fmt::format("<text x='4' y='16' font-size='13'>{}</text>\n", title);
  for (size_t z = 0; z < zones.size(); ++z, y += kRow + 4) {
    body += Label(y + 11, zones[z]->name.empty() ? fmt::format("zone {}", z) : zones[z]->name);
    body += Band(f, avail_n, y, [&](int64_t i) -> std::string {
      return zones[z]->available[start_tick + i] >= job.nodes ? "#8fd18f" : "#e8a0a0";
    });
  }
  body += Label(y + 11, "instance");
  body += Band(f, n, y, [&](int64_t i) -> std::string {
    const Placement& p = run.timeline[i].placement;
    if (p.kind == policy::InstanceKind::kSpot) return "#2e7d32";
    return p.kind == policy::InstanceKind::kOnDemand ? "#1565c0" : "";
  });
  y += kRow + kGap;
  std::vector<double> progress(n), cost(n);
  for (int64_t i = 0; i < n; ++i) progress[i] = run.timeline[i].progress, cost[i] = run.timeline[i].cost;
  body += Label(y + 10, "progress (h)");
  body += Line(f.X(0), y + kPlot, f.X(job.deadline_hours), y + kPlot - kPlot * job.compute_hours /
               job.compute_hours, "stroke='#999' stroke-dasharray='4,3'");
  body += Line(f.X(job.deadline_hours), y, f.X(job.deadline_hours), y + kPlot,
               "stroke='#c62828' stroke-width='1.5'");
  body += Polyline(f, y, job.compute_hours, n, progress.data(), "#000");
  y += kPlot + kGap;
  double max_cost = std::max(run.cost, 1e-9);
  body += Label(y + 10, fmt::format("cost (${:.0f})", run.cost));
  body += Polyline(f, y, max_cost, n, cost.data(), "#6a1b9a");
  y += kPlot + 20;
  body += fmt::format(
      "<text x='{}' y='{:.1f}' font-size='11'>0 h .. {:.1f} h; green: spot up / on spot, red: no "
      "spot, blue: on-demand, dashed: uniform progress, red line: deadline</text>\n",
      kLeft, y, f.hours);
  return fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{:.0f}' "
      "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n{}</svg>\n",
      kLeft + kWidth + 20, y + 10, body);
}

}  // namespace spot::sim
