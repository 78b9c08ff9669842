// The data a forecaster sees: a Panel holds aligned zones of one market on one
// tick grid (prices and/or availability); a HistoryView is the part of it
// before a forecast origin. Every forecaster reads the past only through a
// HistoryView, whose accessors end at the origin: the backtest's look-ahead
// guard (backtest.h) checks that nothing reads past them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "market/loaders.h"
#include "market/trace.h"

namespace spot::forecast {

struct Panel {
  std::string name;         // e.g. "aws-v100-2023-02"
  std::string source;       // files it came from, or "synthetic"
  double gap_seconds = 0;   // tick length, > 0
  double start_unix_s = 0;  // UTC of tick 0; 0 = unknown (hours count from the start)
  int32_t min_count = 1;    // a tick is "up" when available >= min_count
  std::vector<std::string> zones;
  std::vector<std::vector<double>> price;       // per zone; all empty when no prices
  std::vector<std::vector<int32_t>> available;  // per zone; all empty when no availability
  int64_t ticks = 0;

  int num_zones() const { return static_cast<int>(zones.size()); }
  // Every zone has a price series (a market priced in some zones only has
  // none to forecast from as a whole).
  bool has_prices() const {
    return !price.empty() &&
           std::all_of(price.begin(), price.end(), [](const auto& p) { return !p.empty(); });
  }
  bool has_availability() const { return !available.empty() && !available[0].empty(); }
  double hours() const { return static_cast<double>(ticks) * gap_seconds / 3600.0; }
};

// One panel from traces of one market (same gap). Traces of unequal length
// are cut to the shortest (cross-zone features need aligned ticks). Zones are
// named by the traces' names (file stems), else their pool's zone.
// InvalidArgument naming the trace for a mismatched gap or an empty trace.
Result<Panel> PanelFromTraces(const std::string& name, const std::vector<market::Trace>& traces,
                              int32_t min_count = 1);

// A price-only panel: every series of `table` sampled every `gap_seconds`
// from time 0 to the last change point of the longest series.
Result<Panel> PanelFromPriceTable(const std::string& name, const market::PriceTable& table,
                                  double gap_seconds);

// One zone's full series (either may be empty).
struct ZoneSeries {
  std::span<const double> price;
  std::span<const int32_t> available;
};

// Ticks [0, end) of some zones. Cheap to copy; the data must outlive it.
class HistoryView {
 public:
  HistoryView(std::vector<ZoneSeries> zones, double gap_seconds, double start_unix_s,
              int32_t min_count, int64_t end);
  // Ticks [0, end) of `panel`. REQUIRES: 0 <= end <= panel.ticks.
  static HistoryView Of(const Panel& panel, int64_t end);

  int64_t end() const { return end_; }
  int num_zones() const { return static_cast<int>(zones_.size()); }
  double gap_hours() const { return gap_s_ / 3600.0; }
  int32_t min_count() const { return min_count_; }
  // Every zone has a price series (see HistoryPanel::has_prices).
  bool has_prices() const {
    return !zones_.empty() && std::all_of(zones_.begin(), zones_.end(),
                                          [](const auto& z) { return !z.price.empty(); });
  }

  // The first end() values; empty when the zone has no such series.
  std::span<const double> price(int z) const { return Head(zones_[z].price); }
  std::span<const int32_t> available(int z) const { return Head(zones_[z].available); }
  // REQUIRES: 0 <= t < end().
  bool Up(int z, int64_t t) const { return zones_[z].available[t] >= min_count_; }

  // Ticks in `hours`, rounded, at least 1.
  int64_t Ticks(double hours) const;
  // UTC hour of day [0, 24) and day of week [0, 7) of tick t (since the start when unknown).
  int HourOfDay(int64_t t) const;
  int DayOfWeek(int64_t t) const;
  // The same data ending earlier. REQUIRES: new_end <= end().
  HistoryView Truncate(int64_t new_end) const;

 private:
  template <typename T>
  std::span<const T> Head(std::span<const T> s) const {
    return s.empty() ? s : s.first(static_cast<size_t>(end_));
  }
  std::vector<ZoneSeries> zones_;
  double gap_s_ = 0;
  double start_unix_s_ = 0;
  int32_t min_count_ = 1;
  int64_t end_ = 0;
};

// Ticks since the current up run began, counting back from end() - 1 (0 when
// that tick is down or the view is empty).
int64_t CurrentRunTicks(const HistoryView& h, int z);

}  // namespace spot::forecast
