// LoadPriceTable / LoadPriceChangePoints / AttachPrices: price change-point CSVs.
#include <cmath>
#include <optional>
#include <set>

#include "market/csv.h"
#include "market/field_parse.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

enum class TimeKind { kTick, kTimestamp, kOffset };

struct Columns {
  size_t zone = 0;
  size_t price = 0;
  std::optional<size_t> type;
  size_t time = 0;
  TimeKind kind = TimeKind::kOffset;
};

Result<Columns> FindColumns(const CsvTable& t, double tick_seconds) {
  Columns c;
  auto zone = t.Column({"availability_zone", "zone", "region"});
  auto price = t.Column({"spot_usd_per_hour", "spot_price", "price"});
  auto tick = t.Column({"tick"});
  auto stamp = t.Column({"timestamp", "valid_from_commit_date", "time"});
  auto offset = t.Column({"offset_seconds"});
  if (!zone) return InvalidArgumentError(t.file() + ":1: no zone column (availability_zone)");
  if (!price) return InvalidArgumentError(t.file() + ":1: no price column (spot_usd_per_hour)");
  c.zone = *zone;
  c.price = *price;
  c.type = t.Column({"instance_type", "machine_type"});
  if (tick && tick_seconds > 0) {
    c.time = *tick, c.kind = TimeKind::kTick;
  } else if (stamp) {
    c.time = *stamp, c.kind = TimeKind::kTimestamp;
  } else if (offset) {
    c.time = *offset, c.kind = TimeKind::kOffset;
  } else {
    return InvalidArgumentError(t.file() + ":1: no time column (timestamp, offset_seconds, " +
                                "or tick with a tick length)");
  }
  return c;
}

Result<double> RowTime(const CsvTable& t, const CsvRow& row, const Columns& c, double tick_s) {
  const std::string& f = row.fields[c.time];
  if (c.kind == TimeKind::kTimestamp) {
    auto v = ParseUtcTime(f);
    if (!v) return t.FieldError(row, c.time, "not a UTC time '" + f + "'");
    return *v;
  }
  auto v = ParseDouble(f);
  if (!v) return t.FieldError(row, c.time, "not a number '" + f + "'");
  if (c.kind != TimeKind::kTick) return *v;
  // A finite tick times the tick length can overflow ("1e308" x 195 s).
  const double time = *v * tick_s;
  if (!std::isfinite(time)) return t.FieldError(row, c.time, "too large (got " + f + ")");
  return time;
}

// The key of a row: zone, or zone/type when the file holds several types.
std::string RowKey(const CsvRow& row, const Columns& c, bool by_type) {
  std::string key = row.fields[c.zone];
  if (by_type) key += "/" + row.fields[*c.type];
  return key;
}

bool HasSeveralTypes(const CsvTable& t, const Columns& c) {
  if (!c.type) return false;
  std::set<std::string> types;
  for (const CsvRow& row : t.rows()) types.insert(row.fields[*c.type]);
  return types.size() > 1;
}

class Builder {
 public:
  Builder(const CsvTable& t, const Columns& c) : t_(t), c_(c) {}

  Status Add(const CsvRow& row, const std::string& key, double time) {
    if (row.fields[c_.zone].empty()) return t_.FieldError(row, c_.zone, "empty zone");
    StepSeries& s = series_[key];
    const std::string& pf = row.fields[c_.price];
    if (pf.empty()) {
      // No spot offer listed (yet, or any more: the type left the region).
      if (!s.empty() && !withdrawn_.contains(key)) withdrawn_[key] = time;
      return Status::Ok();
    }
    auto price = ParseDouble(pf);
    if (!price) return t_.FieldError(row, c_.price, "not a number '" + pf + "'");
    if (*price < 0) return t_.FieldError(row, c_.price, "must be >= 0 (got " + pf + ")");
    if (!s.empty() && !(time > s.time_s.back())) {
      return t_.FieldError(row, c_.time,
                           "time not after the previous row of " + key + " (line " +
                               std::to_string(last_line_[key]) + ")");
    }
    s.time_s.push_back(time);
    s.value.push_back(*price);
    last_line_[key] = row.line;
    withdrawn_.erase(key);
    return Status::Ok();
  }

  std::map<std::string, double> TakeWithdrawn() { return std::move(withdrawn_); }

  std::map<std::string, StepSeries> Finish() {
    std::erase_if(series_, [](const auto& kv) { return kv.second.empty(); });
    return std::move(series_);
  }

 private:
  const CsvTable& t_;
  const Columns& c_;
  std::map<std::string, StepSeries> series_;
  std::map<std::string, int> last_line_;
  std::map<std::string, double> withdrawn_;
};

}  // namespace

Result<PriceTable> LoadPriceTable(const std::string& path, double tick_seconds) {
  if (!(tick_seconds >= 0)) return InvalidArgumentError(path + ": tick_seconds must be >= 0");
  SPOT_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  SPOT_ASSIGN_OR_RETURN(Columns c, FindColumns(t, tick_seconds));
  const bool by_type = HasSeveralTypes(t, c);
  PriceTable table;
  Builder builder(t, c);
  std::optional<double> origin;
  for (const CsvRow& row : t.rows()) {
    SPOT_ASSIGN_OR_RETURN(double time, RowTime(t, row, c, tick_seconds));
    if (!origin) origin = c.kind == TimeKind::kTimestamp ? time : 0.0;
    SPOT_RETURN_IF_ERROR(builder.Add(row, RowKey(row, c, by_type), time - *origin));
  }
  if (c.kind == TimeKind::kTimestamp && origin) table.start_unix_s = *origin;
  auto stamp = t.Column({"timestamp", "valid_from_commit_date", "time"});
  if (c.kind == TimeKind::kTick && stamp && !t.rows().empty()) {
    // Tick mode keeps tick 0 as the origin; recover its wall time from the first row.
    const CsvRow& first = t.rows().front();
    auto when = ParseUtcTime(first.fields[*stamp]);
    auto tick = ParseDouble(first.fields[c.time]);
    if (when && tick) table.start_unix_s = *when - *tick * tick_seconds;
  }
  table.withdrawn_s = builder.TakeWithdrawn();
  table.series = builder.Finish();
  if (table.series.empty()) return InvalidArgumentError(t.file() + ": no price rows");
  return table;
}

Result<std::map<std::string, StepSeries>> LoadPriceChangePoints(const std::string& path,
                                                                double tick_seconds) {
  SPOT_ASSIGN_OR_RETURN(PriceTable table, LoadPriceTable(path, tick_seconds));
  return std::move(table.series);
}

Status AttachPrices(const PriceTable& table, Trace* trace) {
  auto it = table.series.find(trace->pool.zone);
  if (it == table.series.end()) {
    it = table.series.find(trace->pool.zone + "/" + trace->pool.instance_type);
  }
  if (it == table.series.end()) {
    return NotFoundError("no price series for zone '" + trace->pool.zone + "'");
  }
  trace->price = it->second.Resample(0, trace->gap_seconds, trace->ticks());
  if (trace->start_unix_s == 0) trace->start_unix_s = table.start_unix_s;
  return Status::Ok();
}

}  // namespace spot::market
