// Fuzzes the availability/preemption trace loader (market/loaders.h
// LoadAvailabilityJson) and the run split every policy reads a trace through.
//
// Input: the first line is the file's stem (the loader infers the pool from
// "<zone>_<kind>_<n>"; at most 200 bytes, as a file name is), the rest the JSON.
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "market/loaders.h"
#include "market/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = spot::fuzz::AsString(data, size);
  auto [stem, json] = spot::fuzz::SplitFirstLine(input);
  const std::string name = spot::fuzz::SafeFileName(stem) + ".json";
  const std::string path = spot::fuzz::WriteScratchFile(name, json);
  auto trace = spot::market::LoadAvailabilityJson(path);
  std::remove(path.c_str());
  if (!trace.ok()) {
    FUZZ_CHECK(trace.status().code() == spot::StatusCode::kInvalidArgument,
               trace.status().ToString());
    return 0;
  }
  // The contract of Trace (market/trace.h).
  FUZZ_CHECK(std::isfinite(trace->gap_seconds) && trace->gap_seconds > 0, "gap_seconds");
  for (int32_t n : trace->available) FUZZ_CHECK(n >= 0, "a negative count");
  FUZZ_CHECK(trace->price.empty() || trace->price.size() == trace->available.size(),
             "prices and counts differ in length");
  for (double p : trace->price) FUZZ_CHECK(std::isfinite(p) && p >= 0, "price not finite >= 0");
  int64_t covered = 0;
  for (const auto& run : spot::market::AvailabilityRuns(*trace, 1)) covered += run.length;
  FUZZ_CHECK(covered == trace->ticks(), "AvailabilityRuns do not cover the trace");
  const double up = spot::market::AvailabilityFraction(*trace, 2);
  FUZZ_CHECK(up >= 0 && up <= 1, "AvailabilityFraction outside [0, 1]");
  (void)trace->hours();
  return 0;
}
