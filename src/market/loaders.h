// Loaders for recorded markets. Every error names the file and, where there is
// one, the line/record and field, and comes back as InvalidArgument (malformed
// input) or NotFound (missing file).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "market/trace.h"

namespace spot::market {

// The availability/preemption JSON of the shared records:
//   {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...] [, "prices": [...]]}
// The pool is inferred from the file name where it follows "<zone>_<kind>_<n>.json"
// (e.g. "us-east-1a_v100_1.json": aws, us-east-1, us-east-1a, "v100_1").
//
// SkyNomad's traces (the converted markets of its artifact, which its
// simulator reads) share the schema but invert `data`: 1 is a PREEMPTED tick (no spot), 0 an
// available one. They are told apart by `metadata.price_info`, which that format requires
// ({"price": spot $/h, "on_demand_price": $/h}); such a file's data must be 0 or 1 and are read as
// 1 - flag, its on-demand price goes to Trace::ondemand_price, its `price` fills Trace::price where
// there is no `prices` array, `metadata.zone` names the zone and `metadata.start_time` the start,
// and Trace::read_as says so. Its files are "<zone>_<kind>/full.json" and windows
// "<zone>_<kind>/<n>.json": such a trace is named for its folder
// ("us-east-2a_v100_1", "us-east-2a_v100_1#3").
//
// `convention` overrides that guess: kAvailable reads `data` as counts, and
// kPreempted as preempted flags (as SkyNomad's simulator reads every trace,
// files without price_info too), whatever the metadata says.
enum class TraceConvention { kAuto, kAvailable, kPreempted };
Result<Trace> LoadAvailabilityJson(const std::string& path,
                                   TraceConvention convention = TraceConvention::kAuto);

// Probe records, one row a probe: a time column ("date", "timestamp" or
// "time": "YYYY-MM-DD HH:MM:SS" UTC, strictly increasing) and a count column
// ("availability", "available" or "count": instances obtainable, 1/0 for one),
// as the 2023 V100 probe campaign's processed CSVs ("date,availability").
// The tick is the median time between probes, to the nearest second. Probes
// no further apart than 1.5 ticks are one tick each (that campaign's 195 s
// probes come 194-280 s apart, and the shared records' JSON takes each as a
// tick); where the probing paused longer, ticks are laid on time from the
// first probe, each holding the last probe at or before its start, so the
// market keeps its length. start_unix_s is the first probe's time, the pool
// comes from the file name as for the JSON, and Trace::read_as says which.
Result<Trace> LoadAvailabilityCsv(const std::string& path);

// LoadAvailabilityCsv for a ".csv" file (whose counts are availability),
// LoadAvailabilityJson with `convention` otherwise.
Result<Trace> LoadAvailabilityFile(const std::string& path,
                                   TraceConvention convention = TraceConvention::kAuto);
// "auto", "available", "preempted" (as a flag spells them).
Result<TraceConvention> ParseTraceConvention(const std::string& name);

// The pool of a zone name: AWS ("us-east-1a": aws, region us-east-1) and GCP
// ("us-central1-a": gcp, region us-central1) zones give cloud and region;
// any other name only the zone.
Pool PoolOfZone(const std::string& zone);
// The pool a trace's name gives: "<zone>_<kind>" -> PoolOfZone(zone) with
// instance type <kind> ("us-east-1a_v100_1": "v100_1"); none without a '_'.
Pool PoolOfTraceName(const std::string& name);

// The most ticks a resampled trace may have (LoadAvailabilityCsv): a year of
// one-second ticks.
inline constexpr int64_t kMaxTraceTicks = 366LL * 86400;

// A price change-point CSV (prices/*.csv of the shared records): one step
// series per availability zone, times in seconds from the first row's time.
// Columns are found by name: a zone column ("availability_zone"), a price
// column ("spot_usd_per_hour"), and a time column ("timestamp" as
// "YYYY-MM-DD HH:MM:SS" UTC, or "offset_seconds", or "tick" with `tick_seconds`).
Result<std::map<std::string, StepSeries>> LoadPriceChangePoints(const std::string& path,
                                                                double tick_seconds = 0);

// LoadPriceChangePoints with the absolute time of the series' origin.
struct PriceTable {
  // UTC Unix time of time 0 of every series: the first row's timestamp, or 0
  // when the file has only offsets/ticks and no timestamp column.
  double start_unix_s = 0;
  // Keyed by zone; when the file holds more than one instance type, by
  // "<zone>/<instance type>" (e.g. GCP's weekly file: "us-central1/a2-highgpu-1g").
  std::map<std::string, StepSeries> series;
  // Keys whose last rows have an empty price after earlier prices (GCP: the
  // machine type left the region), with the time of the first such row. The
  // series itself keeps its last price after that time.
  std::map<std::string, double> withdrawn_s;
};

// The contract of LoadPriceChangePoints, in detail:
// - the zone column is the first of "availability_zone", "zone", "region"; the
//   price column "spot_usd_per_hour" (or "spot_price", "price"); the instance
//   type column (optional) "instance_type" or "machine_type";
// - time: "tick" x tick_seconds when tick_seconds > 0 and there is a tick
//   column; else a timestamp ("timestamp", "valid_from_commit_date", "time"),
//   as seconds after the first row's; else "offset_seconds";
// - rows of one key must have strictly increasing times (rejected otherwise,
//   never sorted: a change-point file out of order is a broken file);
// - an empty price is skipped: before a key's first price (GCP lists no spot
//   price before 2023-05-08) and after it (see PriceTable::withdrawn_s);
//   non-empty prices must be finite numbers >= 0.
Result<PriceTable> LoadPriceTable(const std::string& path, double tick_seconds = 0);

// Fills trace->price with the series of trace->pool.zone (or "<zone>/<type>"),
// sampled at the trace's tick starts i * gap_seconds, which must share the
// series' origin (true for aws-v100-2023-02 with the p3.2xlarge CSV read with
// tick_seconds = 195). Sets trace->start_unix_s when it is 0 and the table has
// a start. NotFound when the table has no series for the zone.
Status AttachPrices(const PriceTable& table, Trace* trace);

// `aws ec2 describe-spot-price-history` output: {"SpotPriceHistory": [{
// "AvailabilityZone", "InstanceType", "ProductDescription", "SpotPrice", "Timestamp"}]}.
// One step series per "zone/instance type", times in seconds since the Unix epoch.
// Records are sorted by time (AWS lists newest first). Identical duplicates are
// dropped; two different prices for one key and time are an error, which is
// what happens when the file mixes product descriptions: pass `product` (e.g.
// "Linux/UNIX") to keep only that one. SpotPrice may be a string or a number.
Result<std::map<std::string, StepSeries>> LoadAwsSpotPriceHistory(const std::string& path);
Result<std::map<std::string, StepSeries>> LoadAwsSpotPriceHistory(const std::string& path,
                                                                  const std::string& product);

// One row of an instance catalog.
struct CatalogEntry {
  std::string cloud;
  std::string instance_type;
  std::string region;
  std::string gpu_model;  // "" when none
  int gpu_count = 0;      // GPUs, a fractional GPU counted as 1 (see gpus)
  double gpus = 0;        // exact: 0.25 for g6f.2xlarge's quarter of an L40
  double vcpus = 0;
  double memory_gb = 0;
  double ondemand_usd_per_hour = 0;
  double spot_usd_per_hour = 0;  // 0 when the catalog has no spot price
};

// catalog/aws_gpu_ondemand_catalog_*.csv and catalog/gcp_machine_catalog_*.csv.
Result<std::vector<CatalogEntry>> LoadCatalogCsv(const std::string& path);

}  // namespace spot::market
