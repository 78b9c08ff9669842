// LoadAwsSpotPriceHistory: `aws ec2 describe-spot-price-history` JSON output.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/strict_json.h"
#include "market/field_parse.h"
#include "market/loaders.h"

namespace spot::market {
namespace {

using nlohmann::json;

struct Record {
  std::string key;
  double time = 0;
  double price = 0;
  size_t index = 0;  // position in SpotPriceHistory, for messages
};

Status Bad(const std::string& file, size_t i, const std::string& field, const std::string& why) {
  return InvalidArgumentError(file + ": SpotPriceHistory[" + std::to_string(i) + "]: " + field +
                              ": " + why);
}

Result<std::string> StringField(const json& r, const std::string& file, size_t i,
                                const char* name) {
  auto it = r.find(name);
  if (it == r.end() || !it->is_string()) return Bad(file, i, name, "missing or not a string");
  return it->get<std::string>();
}

Result<double> PriceField(const json& r, const std::string& file, size_t i) {
  auto it = r.find("SpotPrice");
  if (it == r.end()) return Bad(file, i, "SpotPrice", "missing");
  std::optional<double> v;
  if (it->is_number()) v = it->get<double>();
  if (it->is_string()) v = ParseDouble(it->get<std::string>());
  if (!v || !std::isfinite(*v)) return Bad(file, i, "SpotPrice", "not a number " + it->dump());
  if (*v < 0) return Bad(file, i, "SpotPrice", "must be >= 0 (got " + it->dump() + ")");
  return *v;
}

Result<std::optional<Record>> ParseRecord(const json& r, const std::string& file, size_t i,
                                          const std::string& product) {
  if (!r.is_object()) return Bad(file, i, "record", "not an object");
  if (!product.empty()) {
    SPOT_ASSIGN_OR_RETURN(std::string p, StringField(r, file, i, "ProductDescription"));
    if (p != product) return std::optional<Record>();
  }
  Record rec;
  rec.index = i;
  SPOT_ASSIGN_OR_RETURN(std::string zone, StringField(r, file, i, "AvailabilityZone"));
  SPOT_ASSIGN_OR_RETURN(std::string type, StringField(r, file, i, "InstanceType"));
  SPOT_ASSIGN_OR_RETURN(std::string stamp, StringField(r, file, i, "Timestamp"));
  SPOT_ASSIGN_OR_RETURN(rec.price, PriceField(r, file, i));
  auto t = ParseUtcTime(stamp);
  if (!t) return Bad(file, i, "Timestamp", "not a UTC time '" + stamp + "'");
  rec.time = *t;
  rec.key = zone + "/" + type;
  return std::optional<Record>(rec);
}

Result<std::vector<Record>> ParseRecords(const json& doc, const std::string& file,
                                         const std::string& product) {
  auto h = doc.is_object() ? doc.find("SpotPriceHistory") : doc.end();
  if (!doc.is_object() || h == doc.end() || !h->is_array()) {
    return InvalidArgumentError(file + ": SpotPriceHistory: missing or not an array");
  }
  std::vector<Record> out;
  for (size_t i = 0; i < h->size(); ++i) {
    SPOT_ASSIGN_OR_RETURN(std::optional<Record> rec, ParseRecord((*h)[i], file, i, product));
    if (rec) out.push_back(*rec);
  }
  return out;
}

}  // namespace

Result<std::map<std::string, StepSeries>> LoadAwsSpotPriceHistory(const std::string& path,
                                                                  const std::string& product) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const std::string file = std::filesystem::path(path).filename().string();
  SPOT_ASSIGN_OR_RETURN(json doc, ParseStrictJson(text, file));
  SPOT_ASSIGN_OR_RETURN(std::vector<Record> recs, ParseRecords(doc, file, product));
  std::stable_sort(recs.begin(), recs.end(), [](const Record& a, const Record& b) {
    return a.key != b.key ? a.key < b.key : a.time < b.time;
  });
  std::map<std::string, StepSeries> out;
  for (size_t i = 0; i < recs.size(); ++i) {
    const Record& r = recs[i];
    StepSeries& s = out[r.key];
    if (!s.empty() && s.time_s.back() == r.time) {
      if (s.value.back() == r.price) continue;
      return Bad(file, r.index, "SpotPrice",
                 "second price for " + r.key + " at the same Timestamp as record " +
                     std::to_string(recs[i - 1].index) + " (mixed ProductDescription?)");
    }
    s.time_s.push_back(r.time);
    s.value.push_back(r.price);
  }
  return out;
}

Result<std::map<std::string, StepSeries>> LoadAwsSpotPriceHistory(const std::string& path) {
  return LoadAwsSpotPriceHistory(path, "");
}

}  // namespace spot::market
