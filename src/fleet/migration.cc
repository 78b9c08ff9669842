#include "fleet/migration.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "market/csv.h"
#include "market/field_parse.h"

namespace spot::fleet {

std::string RegionOfZone(std::string_view zone) {
  const size_t n = zone.size();
  auto alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  if (n >= 3 && alpha(zone[n - 1]) && zone[n - 2] == '-') return std::string(zone.substr(0, n - 2));
  if (n >= 2 && alpha(zone[n - 1]) && digit(zone[n - 2])) return std::string(zone.substr(0, n - 1));
  return std::string(zone);
}

std::string RegionOf(const market::Pool& pool) {
  return pool.region.empty() ? RegionOfZone(pool.zone) : pool.region;
}

Status EgressPrices::Add(const std::string& from, const std::string& to, double usd_per_gb) {
  if (from.empty() || to.empty()) return InvalidArgumentError("empty region name");
  if (!std::isfinite(usd_per_gb) || usd_per_gb < 0) {
    return InvalidArgumentError("price from " + from + " to " + to + " must be finite and >= 0");
  }
  if (!prices_.emplace(std::make_pair(from, to), usd_per_gb).second) {
    return InvalidArgumentError("price from " + from + " to " + to + " given twice");
  }
  return Status::Ok();
}

std::optional<double> EgressPrices::UsdPerGb(const std::string& from, const std::string& to) const {
  if (from == to) return 0.0;
  auto it = prices_.find({from, to});
  if (it == prices_.end()) return std::nullopt;
  return it->second;
}

Result<EgressPrices> LoadEgressCsv(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(market::CsvTable csv, market::CsvTable::Read(path));
  auto from = csv.Column({"from_region"});
  auto to = csv.Column({"to_region"});
  auto price = csv.Column({"price_usd_per_gb"});
  if (!from || !to || !price) {
    return InvalidArgumentError(path +
                                ": header must name from_region, to_region, price_usd_per_gb");
  }
  EgressPrices out;
  for (const market::CsvRow& row : csv.rows()) {
    std::optional<double> usd = market::ParseDouble(row.fields[*price]);
    if (!usd) return csv.FieldError(row, *price, "not a number");
    Status s = out.Add(row.fields[*from], row.fields[*to], *usd);
    if (!s.ok()) return csv.FieldError(row, *price, s.message());
  }
  if (out.size() == 0) return InvalidArgumentError(path + ": no prices");
  return out;
}

Result<std::vector<double>> MigrationMatrix(std::span<const std::string> regions,
                                            double checkpoint_gb, const EgressPrices* egress) {
  if (!std::isfinite(checkpoint_gb) || checkpoint_gb < 0) {
    return InvalidArgumentError("checkpoint GB must be finite and >= 0");
  }
  const size_t n = regions.size();
  std::vector<double> usd(n * n, 0.0);
  if (checkpoint_gb == 0) return usd;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (regions[a] == regions[b]) continue;
      std::optional<double> p = egress ? egress->UsdPerGb(regions[a], regions[b]) : std::nullopt;
      if (!p) {
        char gb[32];
        std::snprintf(gb, sizeof(gb), "%g", checkpoint_gb);
        return InvalidArgumentError("no egress price from region " + regions[a] + " to " +
                                    regions[b] + " (a " + gb + " GB checkpoint moves between them" +
                                    (egress ? "" : "; no egress prices were given") + ")");
      }
      usd[a * n + b] = checkpoint_gb * *p;
    }
  }
  return usd;
}

}  // namespace spot::fleet
