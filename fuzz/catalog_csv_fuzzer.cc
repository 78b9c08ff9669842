// Fuzzes the instance catalog loader (market/loaders.h LoadCatalogCsv).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "market/loaders.h"

namespace {

// Catalog numbers are "finite numbers >= 0" (catalog_csv.cc's contract).
void CheckNumber(double v, const std::string& what) {
  FUZZ_CHECK(std::isfinite(v) && v >= 0, what + " is not a finite number >= 0");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = spot::fuzz::WriteScratchFile("catalog.csv", spot::fuzz::AsString(data, size));
  auto entries = spot::market::LoadCatalogCsv(path);
  if (!entries.ok()) {
    FUZZ_CHECK(entries.status().code() == spot::StatusCode::kInvalidArgument,
               entries.status().ToString());
    return 0;
  }
  for (const spot::market::CatalogEntry& e : *entries) {
    FUZZ_CHECK(!e.instance_type.empty() && !e.region.empty(), "empty instance type or region");
    CheckNumber(e.gpus, "gpus");
    CheckNumber(e.vcpus, "vcpus");
    CheckNumber(e.memory_gb, "memory_gb");
    CheckNumber(e.ondemand_usd_per_hour, "ondemand_usd_per_hour");
    CheckNumber(e.spot_usd_per_hour, "spot_usd_per_hour");
    FUZZ_CHECK(e.gpu_count == static_cast<int>(std::ceil(e.gpus)), "gpu_count is not ceil(gpus)");
  }
  return 0;
}
