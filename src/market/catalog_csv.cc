// LoadCatalogCsv: the AWS and GCP instance catalogs of the shared records.
//
// Columns are found by name: instance type ("instance_type" for AWS,
// "machine_type" for GCP, which also sets the cloud unless a "cloud" column
// says otherwise), "region", "gpu_model", "gpu_count", "vcpus", memory
// ("memory" as "768 GB", or "ram_gb"), "ondemand_usd_per_hour",
// "spot_usd_per_hour". gpu_count may be fractional (AWS g6f: 0.25 GPU). Empty numeric fields read
// as 0 (GCP lists some types with no on-demand price); non-empty ones must be finite numbers >= 0.
#include <cmath>

#include "market/csv.h"
#include "market/field_parse.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

// "768 GB", "1.5 TiB", "64" (GB) -> GB; nullopt when malformed.
std::optional<double> ParseMemoryGb(std::string_view s) {
  static const std::pair<std::string_view, double> kUnits[] = {
      {"GiB", 1.073741824}, {"GB", 1},    {"TiB", 1099.511627776}, {"TB", 1000},
      {"MiB", 0.001048576}, {"MB", 0.001}};
  for (const auto& [unit, scale] : kUnits) {
    if (s.ends_with(unit)) {
      auto v = ParseDouble(s.substr(0, s.size() - unit.size()));
      return v ? std::optional<double>(*v * scale) : std::nullopt;
    }
  }
  return ParseDouble(s);
}

class RowReader {
 public:
  RowReader(const CsvTable& t, const CsvRow& row) : t_(t), row_(row) {}

  // Reads an optional non-negative number column; empty or absent -> 0.
  Status Number(std::optional<size_t> col, double* out, bool memory = false) {
    *out = 0;
    if (!col || row_.fields[*col].empty()) return Status::Ok();
    const std::string& f = row_.fields[*col];
    auto v = memory ? ParseMemoryGb(f) : ParseDouble(f);
    if (!v) return t_.FieldError(row_, *col, "not a number '" + f + "'");
    // A finite number times a unit can overflow ("1e308 TiB").
    if (!std::isfinite(*v)) return t_.FieldError(row_, *col, "too large (got " + f + ")");
    if (*v < 0) return t_.FieldError(row_, *col, "must be >= 0 (got " + f + ")");
    *out = *v;
    return Status::Ok();
  }

  Status Text(std::optional<size_t> col, std::string* out, bool required) {
    if (col) *out = row_.fields[*col];
    if (required && out->empty()) return t_.FieldError(row_, *col, "empty");
    return Status::Ok();
  }

 private:
  const CsvTable& t_;
  const CsvRow& row_;
};

struct Columns {
  std::optional<size_t> type, cloud, region, gpu_model, gpu_count, vcpus, memory, od, spot;
  bool gcp = false;
};

Result<Columns> FindColumns(const CsvTable& t) {
  Columns c;
  c.type = t.Column({"instance_type", "machine_type"});
  c.region = t.Column({"region"});
  if (!c.type) return InvalidArgumentError(t.file() + ":1: no instance_type/machine_type column");
  if (!c.region) return InvalidArgumentError(t.file() + ":1: no region column");
  c.gcp = t.header()[*c.type] == "machine_type";
  c.cloud = t.Column({"cloud"});
  c.gpu_model = t.Column({"gpu_model"});
  c.gpu_count = t.Column({"gpu_count"});
  c.vcpus = t.Column({"vcpus"});
  c.memory = t.Column({"memory", "ram_gb", "memory_gb"});
  c.od = t.Column({"ondemand_usd_per_hour"});
  c.spot = t.Column({"spot_usd_per_hour"});
  return c;
}

Result<CatalogEntry> ReadEntry(const CsvTable& t, const CsvRow& row, const Columns& c) {
  CatalogEntry e;
  RowReader r(t, row);
  e.cloud = c.gcp ? "gcp" : "aws";
  SPOT_RETURN_IF_ERROR(r.Text(c.cloud, &e.cloud, false));
  SPOT_RETURN_IF_ERROR(r.Text(c.type, &e.instance_type, true));
  SPOT_RETURN_IF_ERROR(r.Text(c.region, &e.region, true));
  SPOT_RETURN_IF_ERROR(r.Text(c.gpu_model, &e.gpu_model, false));
  SPOT_RETURN_IF_ERROR(r.Number(c.gpu_count, &e.gpus));
  if (e.gpus > 1e6) return t.FieldError(row, *c.gpu_count, "implausibly large");
  e.gpu_count = static_cast<int>(std::ceil(e.gpus));
  SPOT_RETURN_IF_ERROR(r.Number(c.vcpus, &e.vcpus));
  SPOT_RETURN_IF_ERROR(r.Number(c.memory, &e.memory_gb, /*memory=*/true));
  SPOT_RETURN_IF_ERROR(r.Number(c.od, &e.ondemand_usd_per_hour));
  SPOT_RETURN_IF_ERROR(r.Number(c.spot, &e.spot_usd_per_hour));
  return e;
}

}  // namespace

Result<std::vector<CatalogEntry>> LoadCatalogCsv(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  SPOT_ASSIGN_OR_RETURN(Columns c, FindColumns(t));
  std::vector<CatalogEntry> out;
  out.reserve(t.rows().size());
  for (const CsvRow& row : t.rows()) {
    SPOT_ASSIGN_OR_RETURN(CatalogEntry e, ReadEntry(t, row, c));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace spot::market
