// Fuzzes the `aws ec2 describe-spot-price-history` loader (market/loaders.h
// LoadAwsSpotPriceHistory), with and without a product filter.
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "market/loaders.h"

namespace {

void Load(const std::string& path, const std::string& product) {
  auto series = spot::market::LoadAwsSpotPriceHistory(path, product);
  if (!series.ok()) {
    FUZZ_CHECK(series.status().code() == spot::StatusCode::kInvalidArgument,
               series.status().ToString());
    return;
  }
  for (const auto& [key, s] : *series) {
    FUZZ_CHECK(s.time_s.size() == s.value.size() && !s.empty(), key + ": empty or ragged");
    for (size_t i = 0; i < s.time_s.size(); ++i) {
      FUZZ_CHECK(std::isfinite(s.value[i]) && s.value[i] >= 0, key + ": price not finite >= 0");
      FUZZ_CHECK(std::isfinite(s.time_s[i]), key + ": time not finite");
      FUZZ_CHECK(i == 0 || s.time_s[i] > s.time_s[i - 1], key + ": times not increasing");
    }
    (void)s.At(s.time_s.front() - 1);
    (void)s.Resample(s.time_s.front(), 300, 8);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = spot::fuzz::WriteScratchFile("history.json", spot::fuzz::AsString(data, size));
  Load(path, "");
  Load(path, "Linux/UNIX");
  return 0;
}
