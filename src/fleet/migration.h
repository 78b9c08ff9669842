// Moving a job between regions: its state (the checkpoint) crosses the
// network once, billed at the egress price from the region it leaves to the
// region it enters (AWS bills inter-region transfer per GB; within a region
// it is free). The fleet model (fleet.h) charges it on a launch in another
// region than the job's state; policies price a move with the same matrix.
// Plain data, no I/O but the catalog loader.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "market/trace.h"

namespace spot::fleet {

// The region of a zone named as the clouds name them: "us-east-1a" ->
// "us-east-1" (AWS: a letter after a digit), "us-central1-a" -> "us-central1"
// (GCP: a trailing "-letter"); any other name is its own region.
std::string RegionOfZone(std::string_view zone);
// A pool's region: pool.region when set, else RegionOfZone(pool.zone).
std::string RegionOf(const market::Pool& pool);

// Egress $ per GB between regions (from -> to). Not thread-safe to fill;
// const lookups are.
class EgressPrices {
 public:
  // InvalidArgument for an empty region, a price that is negative or not
  // finite, or a pair given twice.
  Status Add(const std::string& from, const std::string& to, double usd_per_gb);
  // $/GB from -> to: 0 within a region, nullopt for a pair not known.
  std::optional<double> UsdPerGb(const std::string& from, const std::string& to) const;
  size_t size() const { return prices_.size(); }

 private:
  std::map<std::pair<std::string, std::string>, double> prices_;
};

// Reads the catalog's CSV (columns from_region, to_region, price_usd_per_gb;
// e.g. aws_inter_region_egress.csv). NotFound for a missing file,
// InvalidArgument naming the file, line and column for a bad row.
Result<EgressPrices> LoadEgressCsv(const std::string& path);

// The $ to move a job's `checkpoint_gb` between each pair of `regions`
// (row: from, column: to; regions.size() squared; 0 on the diagonal and
// within a region). All zeros when checkpoint_gb is 0. InvalidArgument,
// naming the pair, when checkpoint_gb < 0 or not finite, or when two
// different regions have no price (`egress` null: none has).
Result<std::vector<double>> MigrationMatrix(std::span<const std::string> regions,
                                            double checkpoint_gb, const EgressPrices* egress);

}  // namespace spot::fleet
