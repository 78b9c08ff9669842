#include "sim/svg_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace spot::sim {
namespace {

constexpr double kLeft = 260, kWidth = 560, kRow = 16, kTop = 40;

struct Row {
  std::string label;
  const ScoreStats* stats;
  bool pooled;
};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string RenderProtocolSvg(const ProtocolResult& r, const std::string& title) {
  std::vector<Row> rows;
  for (const MarketResult& m : r.markets) {
    for (const PolicyScore& p : m.policies)
      rows.push_back({m.name + "  " + p.policy, &p.stats, false});
  }
  for (const PolicyScore& p : r.pooled) rows.push_back({"pooled  " + p.policy, &p.stats, true});
  // The horizontal axis: ratio to up, around 1, wide enough for every interval.
  double lo = 1, hi = 1;
  for (const Row& row : rows) {
    lo = std::min(lo, row.stats->ratio_to_up.ci.lo);
    hi = std::max(hi, row.stats->ratio_to_up.ci.hi);
  }
  // Grid lines every `step`, a round number giving at most ~12 of them.
  double step = 0.01;
  for (double s : {0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0}) {
    step = s;
    if ((hi - lo) / s <= 10) break;
  }
  lo = (std::floor(lo / step) - 1) * step, hi = (std::ceil(hi / step) + 1) * step;
  auto X = [&](double v) { return kLeft + kWidth * (v - lo) / (hi - lo); };
  const double height = kTop + kRow * (rows.size() + 2);
  std::string out = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' "
      "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='4' y='16' font-size='13'>{}</text>\n"
      "<text x='4' y='32' font-size='11'>mean cost / up's on the same starts, 95% bootstrap "
      "interval (od left out); red: p95 cost above on-demand's mean</text>\n",
      kLeft + kWidth + 120, height, Escape(title));
  for (int i = 0; lo + i * step <= hi + step / 2; ++i) {
    const double v = lo + i * step;
    out += fmt::format(
        "<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2:.0f}' stroke='{3}'/>\n"
        "<text x='{0:.1f}' y='{2:.0f}' font-size='9' text-anchor='middle' "
        "dy='10'>{4:.{5}f}</text>\n",
        X(v), kTop - 4, height - kRow, std::abs(v - 1) < step / 2 ? "#444" : "#ddd", v,
        step < 0.1 ? 2 : 1);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const ScoreStats& s = *rows[i].stats;
    const double y = kTop + kRow * i + kRow / 2;
    const bool above = s.cost.p95 > s.od_mean_cost * (1 + 1e-9);
    const char* color = above ? "#c0392b" : rows[i].pooled ? "#1f4e79" : "#2e86c1";
    out += fmt::format(
        "<text x='4' y='{0:.1f}' font-size='11' dy='4'{5}>{1}</text>\n"
        "<line x1='{2:.1f}' x2='{3:.1f}' y1='{0:.1f}' y2='{0:.1f}' stroke='{4}' "
        "stroke-width='2'/>\n"
        "<circle cx='{6:.1f}' cy='{0:.1f}' r='3.5' fill='{4}'/>\n"
        "<text x='{7:.0f}' y='{0:.1f}' font-size='10' dy='4'>{8:.3f} [{9:.3f}, {10:.3f}]</text>\n",
        y, Escape(rows[i].label), X(s.ratio_to_up.ci.lo), X(s.ratio_to_up.ci.hi), color,
        rows[i].pooled ? " font-weight='bold'" : "", X(s.ratio_to_up.mean), kLeft + kWidth + 6,
        s.ratio_to_up.mean, s.ratio_to_up.ci.lo, s.ratio_to_up.ci.hi);
  }
  return out + "</svg>\n";
}

}  // namespace spot::sim
