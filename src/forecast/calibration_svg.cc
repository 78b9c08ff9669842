#include "forecast/calibration_svg.h"

#include <fmt/format.h>

#include <map>

namespace spot::forecast {
namespace {

constexpr double kSize = 300, kMargin = 50, kPanelGap = 60;
const char* const kColors[] = {"#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f"};

using Pooled = std::map<std::string, std::vector<CalibrationBin>>;  // model -> 10 bins

void Pool(std::vector<CalibrationBin>& into, const std::vector<CalibrationBin>& bins) {
  if (into.empty()) into.resize(bins.size());
  for (size_t b = 0; b < bins.size(); ++b) {
    into[b].n += bins[b].n;
    into[b].mean_p += bins[b].mean_p * double(bins[b].n);
    into[b].observed += bins[b].observed * double(bins[b].n);
  }
}

std::string HorizonPanel(double x0, double y0, double horizon, const Pooled& models,
                         int64_t min_n) {
  auto X = [&](double p) { return x0 + p * kSize; };
  auto Y = [&](double p) { return y0 + kSize - p * kSize; };
  std::string out = fmt::format(
      "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n"
      "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#999' stroke-dasharray='4,3'/>\n"
      "<text x='{}' y='{}' font-size='12'>horizon {} h</text>\n"
      "<text x='{}' y='{}' font-size='11'>predicted probability</text>\n"
      "<text x='{}' y='{}' font-size='11' transform='rotate(-90 {} {})'>observed frequency"
      "</text>\n",
      x0, y0, kSize, kSize, X(0), Y(0), X(1), Y(1), x0, y0 - 8, horizon, x0 + 80, y0 + kSize + 30,
      x0 - 30, y0 + 220, x0 - 30, y0 + 220);
  for (int i = 0; i <= 10; i += 5) {
    out += fmt::format("<text x='{:.0f}' y='{:.0f}' font-size='10'>{:.1f}</text>\n",
                       X(i / 10.0) - 6, y0 + kSize + 14, i / 10.0);
    out += fmt::format("<text x='{:.0f}' y='{:.0f}' font-size='10'>{:.1f}</text>\n", x0 - 22,
                       Y(i / 10.0) + 4, i / 10.0);
  }
  int c = 0;
  for (const auto& [model, bins] : models) {
    const char* color = kColors[c % 6];
    std::string pts;
    for (const CalibrationBin& b : bins) {
      if (b.n < min_n) continue;
      double p = b.mean_p / double(b.n), o = b.observed / double(b.n);
      pts += fmt::format("{:.1f},{:.1f} ", X(p), Y(o));
      out += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'/>\n", X(p), Y(o), color);
    }
    out += fmt::format("<polyline points='{}' fill='none' stroke='{}'/>\n", pts, color);
    out += fmt::format("<text x='{}' y='{}' font-size='11' fill='{}'>{}</text>\n", x0 + 8,
                       y0 + 16 + 14 * c, color, model);
    ++c;
  }
  return out;
}

}  // namespace

std::string RenderCalibrationSvg(const std::vector<PreemptionResult>& results,
                                 const std::string& title, int64_t min_points) {
  std::map<double, Pooled> by_horizon;
  for (const PreemptionResult& r : results) {
    Pool(by_horizon[r.horizon_hours][r.model], r.metrics.calibration);
  }
  std::string body = fmt::format("<text x='10' y='20' font-size='14'>{}</text>\n", title);
  double x = kMargin;
  for (const auto& [h, models] : by_horizon) {
    body += HorizonPanel(x, 50, h, models, min_points);
    x += kSize + kPanelGap;
  }
  double width = std::max(x, kMargin + kSize + kPanelGap) + 10;
  return fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' "
      "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n{}</svg>\n",
      width, 50 + kSize + 50, body);
}

}  // namespace spot::forecast
