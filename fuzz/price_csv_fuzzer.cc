// Fuzzes the price change-point loader (market/loaders.h LoadPriceTable, as
// price files are read by tick and by timestamp) and AttachPrices, which
// resamples a loaded series onto a trace's tick grid.
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "market/loaders.h"

namespace {

using spot::market::PriceTable;
using spot::market::StepSeries;

// The contract of LoadPriceTable (loaders.h): per key, strictly increasing
// times; prices finite and >= 0.
void CheckSeries(const std::string& key, const StepSeries& s) {
  FUZZ_CHECK(!s.empty() && s.time_s.size() == s.value.size(), key + ": empty or ragged series");
  for (size_t i = 0; i < s.time_s.size(); ++i) {
    FUZZ_CHECK(std::isfinite(s.value[i]) && s.value[i] >= 0, key + ": price not finite >= 0");
    FUZZ_CHECK(std::isfinite(s.time_s[i]), key + ": time not finite");
    FUZZ_CHECK(i == 0 || s.time_s[i] > s.time_s[i - 1], key + ": times not strictly increasing");
  }
}

void Load(const std::string& path, double tick_seconds) {
  auto table = spot::market::LoadPriceTable(path, tick_seconds);
  if (!table.ok()) {
    FUZZ_CHECK(table.status().code() == spot::StatusCode::kInvalidArgument,
               table.status().ToString());
    return;
  }
  for (const auto& [key, series] : table->series) CheckSeries(key, series);
  FUZZ_CHECK(std::isfinite(table->start_unix_s), "start_unix_s not finite");
  // A trace of the first key's zone, on a grid of 60 s ticks.
  const std::string& key = table->series.begin()->first;
  spot::market::Trace trace;
  trace.pool.zone = key.substr(0, key.find('/'));
  trace.pool.instance_type = key.find('/') == std::string::npos ? "" : key.substr(key.find('/') + 1);
  trace.gap_seconds = 60;
  trace.available.assign(32, 1);
  spot::Status s = spot::market::AttachPrices(*table, &trace);
  FUZZ_CHECK(s.ok(), "AttachPrices of a loaded key: " + s.ToString());
  FUZZ_CHECK(trace.price.size() == trace.available.size(), "AttachPrices: price/tick mismatch");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = spot::fuzz::WriteScratchFile("prices.csv", spot::fuzz::AsString(data, size));
  Load(path, 0);
  Load(path, 195);
  return 0;
}
