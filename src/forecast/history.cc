#include "forecast/history.h"

#include <algorithm>
#include <cmath>

namespace spot::forecast {

Result<Panel> PanelFromTraces(const std::string& name, const std::vector<market::Trace>& traces,
                              int32_t min_count) {
  if (traces.empty()) return InvalidArgumentError(name + ": no traces");
  if (min_count < 1) return InvalidArgumentError(name + ": min_count must be >= 1");
  Panel p{.name = name,
          .gap_seconds = traces[0].gap_seconds,
          .start_unix_s = traces[0].start_unix_s,
          .min_count = min_count};
  p.ticks = traces[0].ticks();
  bool prices = true;
  for (const market::Trace& t : traces) {
    if (t.ticks() == 0) return InvalidArgumentError(t.source + ": trace " + t.name + " is empty");
    if (t.gap_seconds != p.gap_seconds) {
      return InvalidArgumentError(t.source + ": gap_seconds " + std::to_string(t.gap_seconds) +
                                  " differs from the panel's " + std::to_string(p.gap_seconds));
    }
    p.ticks = std::min(p.ticks, t.ticks());
    prices = prices && t.has_prices();
    p.source += (p.source.empty() ? "" : ", ") + t.source;
  }
  for (const market::Trace& t : traces) {
    p.zones.push_back(t.name.empty() ? t.pool.zone : t.name);
    p.available.emplace_back(t.available.begin(), t.available.begin() + p.ticks);
    if (prices) p.price.emplace_back(t.price.begin(), t.price.begin() + p.ticks);
  }
  return p;
}

Result<Panel> PanelFromPriceTable(const std::string& name, const market::PriceTable& table,
                                  double gap_seconds) {
  if (gap_seconds <= 0) return InvalidArgumentError(name + ": gap_seconds must be > 0");
  if (table.series.empty()) return InvalidArgumentError(name + ": no price series");
  double last = 0;
  for (const auto& [zone, s] : table.series) {
    if (!s.empty()) last = std::max(last, s.time_s.back());
  }
  Panel p{
      .name = name, .source = name, .gap_seconds = gap_seconds, .start_unix_s = table.start_unix_s};
  p.ticks = static_cast<int64_t>(std::floor(last / gap_seconds)) + 1;
  for (const auto& [zone, s] : table.series) {
    if (s.empty()) continue;
    p.zones.push_back(zone);
    p.price.push_back(s.Resample(0, gap_seconds, p.ticks));
  }
  return p;
}

HistoryView::HistoryView(std::vector<ZoneSeries> zones, double gap_seconds, double start_unix_s,
                         int32_t min_count, int64_t end)
    : zones_(std::move(zones)),
      gap_s_(gap_seconds),
      start_unix_s_(start_unix_s),
      min_count_(min_count),
      end_(end) {}

HistoryView HistoryView::Of(const Panel& panel, int64_t end) {
  std::vector<ZoneSeries> zones(panel.zones.size());
  for (int z = 0; z < panel.num_zones(); ++z) {
    if (panel.has_prices()) zones[z].price = panel.price[z];
    if (panel.has_availability()) zones[z].available = panel.available[z];
  }
  return HistoryView(std::move(zones), panel.gap_seconds, panel.start_unix_s, panel.min_count, end);
}

int64_t HistoryView::Ticks(double hours) const {
  return std::max<int64_t>(1, std::llround(hours * 3600.0 / gap_s_));
}

int HistoryView::HourOfDay(int64_t t) const {
  double h = std::floor((start_unix_s_ + static_cast<double>(t) * gap_s_) / 3600.0);
  return static_cast<int>(h - 24.0 * std::floor(h / 24.0));
}

int HistoryView::DayOfWeek(int64_t t) const {
  // 1970-01-01 was a Thursday; 0 = Monday.
  double d = std::floor((start_unix_s_ + static_cast<double>(t) * gap_s_) / 86400.0) + 3;
  return static_cast<int>(d - 7.0 * std::floor(d / 7.0));
}

HistoryView HistoryView::Truncate(int64_t new_end) const {
  HistoryView v = *this;
  v.end_ = std::min(new_end, end_);
  return v;
}

int64_t CurrentRunTicks(const HistoryView& h, int z) {
  int64_t t = h.end() - 1;
  while (t >= 0 && h.Up(z, t)) --t;
  return h.end() - 1 - t;
}

}  // namespace spot::forecast
