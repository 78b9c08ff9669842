#include "core/spec_reader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/file_io.h"

namespace spot {
namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

std::string Quote(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  return "nothing";
}

}  // namespace

std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string BoundsViolation(double v, const Bounds& b) {
  if (b.min && (b.min_exclusive ? !(v > *b.min) : !(v >= *b.min))) {
    return "must be " + std::string(b.min_exclusive ? "> " : ">= ") + FormatNumber(*b.min) +
           " (got " + FormatNumber(v) + ")";
  }
  if (b.max && (b.max_exclusive ? !(v < *b.max) : !(v <= *b.max))) {
    return "must be " + std::string(b.max_exclusive ? "< " : "<= ") + FormatNumber(*b.max) +
           " (got " + FormatNumber(v) + ")";
  }
  return "";
}

std::string BoundsText(const Bounds& b) {
  if (b.min && b.max) {
    return std::string(b.min_exclusive ? "(" : "[") + FormatNumber(*b.min) + ", " +
           FormatNumber(*b.max) + (b.max_exclusive ? ")" : "]");
  }
  if (b.min) return std::string(b.min_exclusive ? "> " : ">= ") + FormatNumber(*b.min);
  if (b.max) return std::string(b.max_exclusive ? "< " : "<= ") + FormatNumber(*b.max);
  return "";
}

std::string DidYouMean(std::string_view key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;  // suggest only close matches
  for (const std::string& k : known) {
    size_t d = EditDistance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

SpecReader::SpecReader(std::string file, YAML::Node node, std::string prefix,
                       std::shared_ptr<Shared> shared)
    : file_(std::move(file)), node_(node), prefix_(std::move(prefix)), shared_(std::move(shared)) {}

Result<SpecReader> SpecReader::FromString(const std::string& text, const std::string& file_name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(file_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                                std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    return InvalidArgumentError(file_name + ": expected a mapping of fields at the top level");
  }
  return SpecReader(file_name, root, "", std::make_shared<Shared>());
}

Result<SpecReader> SpecReader::FromFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return InvalidArgumentError(path + ": no such file");
    }
    return text.status();
  }
  return FromString(*text, path);
}

bool SpecReader::Has(std::string_view key) const {
  return node_.IsMap() && node_[std::string(key)].IsDefined();
}

bool SpecReader::IsMapping(std::string_view key) const {
  return Has(key) && node_[std::string(key)].IsMap();
}

std::vector<std::string> SpecReader::Keys() const {
  std::vector<std::string> keys;
  if (!node_.IsMap()) return keys;
  for (auto it = node_.begin(); it != node_.end(); ++it) keys.push_back(it->first.Scalar());
  return keys;
}

std::string SpecReader::FieldName(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
}

YAML::Mark SpecReader::Mark(std::string_view key) const {
  if (node_.IsMap()) {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (it->first.Scalar() == key) return it->second.Mark();
    }
  }
  return node_.Mark();
}

std::string SpecReader::Where(std::string_view key) const {
  YAML::Mark m = Mark(key);
  if (m.is_null()) return file_;
  return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

void SpecReader::AddError(std::string_view key, const std::string& reason) {
  shared_->errors.push_back(Where(key) + ": " + FieldName(key) + ": " + reason);
}

std::optional<YAML::Node> SpecReader::Scalar(std::string_view key, bool required,
                                             std::string_view kind) {
  known_.emplace(key);
  if (!Has(key)) {
    if (required) AddError(key, "required field is missing");
    return std::nullopt;
  }
  YAML::Node n = node_[std::string(key)];
  if (!n.IsScalar()) {
    AddError(key, "expected " + std::string(kind) + " (got " + Quote(n) + ")");
    return std::nullopt;
  }
  return n;
}

void SpecReader::CheckBounds(std::string_view key, double v, const Bounds& b) {
  if (std::string why = BoundsViolation(v, b); !why.empty()) AddError(key, why);
}

void SpecReader::Int(std::string_view key, int64_t* out, Bounds bounds, bool required) {
  auto n = Scalar(key, required, "an integer");
  if (!n) return;
  int64_t v;
  try {
    v = n->as<int64_t>();
  } catch (const YAML::Exception&) {
    AddError(key, "expected an integer (got " + Quote(*n) + ")");
    return;
  }
  CheckBounds(key, static_cast<double>(v), bounds);
  *out = v;
}

void SpecReader::Double(std::string_view key, double* out, Bounds bounds, bool required) {
  auto n = Scalar(key, required, "a number");
  if (!n) return;
  double v;
  try {
    v = n->as<double>();
  } catch (const YAML::Exception&) {
    AddError(key, "expected a number (got " + Quote(*n) + ")");
    return;
  }
  if (!std::isfinite(v)) {
    AddError(key, "must be a finite number (got " + Quote(*n) + ")");
    return;
  }
  CheckBounds(key, v, bounds);
  *out = v;
}

void SpecReader::Bool(std::string_view key, bool* out) {
  auto n = Scalar(key, false, "true or false");
  if (!n) return;
  try {
    *out = n->as<bool>();
  } catch (const YAML::Exception&) {
    AddError(key, "expected true or false (got " + Quote(*n) + ")");
  }
}

void SpecReader::String(std::string_view key, std::string* out, bool required) {
  auto n = Scalar(key, required, "a string");
  if (!n) return;
  *out = n->Scalar();
}

void SpecReader::StringList(std::string_view key, std::vector<std::string>* out, bool required) {
  known_.emplace(key);
  if (!Has(key)) {
    if (required) AddError(key, "required field is missing");
    return;
  }
  YAML::Node n = node_[std::string(key)];
  if (!n.IsSequence()) {
    AddError(key, "expected a list of strings (got " + Quote(n) + ")");
    return;
  }
  std::vector<std::string> items;
  for (const YAML::Node& item : n) {
    if (!item.IsScalar()) {
      AddError(key, "expected a list of strings (an item is " + Quote(item) + ")");
      return;
    }
    items.push_back(item.Scalar());
  }
  *out = std::move(items);
}

void SpecReader::Enum(std::string_view key, std::string* out,
                      std::initializer_list<std::string_view> allowed, bool required) {
  auto n = Scalar(key, required, "a string");
  if (!n) return;
  const std::string& v = n->Scalar();
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    AddError(key, "unknown value '" + v + "' (expected one of: " + list + ")");
    return;
  }
  *out = v;
}

SpecReader& SpecReader::Section(std::string_view key, bool required) {
  known_.emplace(key);
  YAML::Node child;  // undefined: an empty section
  if (Has(key)) {
    YAML::Node n = node_[std::string(key)];
    if (n.IsMap()) {
      child = n;
    } else if (!n.IsNull()) {
      AddError(key, "expected a mapping of fields (got " + Quote(n) + ")");
    }
  } else if (required) {
    AddError(key, "required section is missing");
  }
  sections_.push_back(
      std::unique_ptr<SpecReader>(new SpecReader(file_, child, FieldName(key), shared_)));
  return *sections_.back();
}

void SpecReader::CollectUnknown() const {
  if (node_.IsMap()) {
    std::set<std::string> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string key = it->first.Scalar();
      if (!seen.insert(key).second) {
        // YAML forbids it; yaml-cpp would silently read the first one.
        YAML::Mark m = it->first.Mark();
        shared_->errors.push_back(file_ + ":" + std::to_string(m.line + 1) + ":" +
                                  std::to_string(m.column + 1) + ": " + FieldName(key) +
                                  ": given twice (first at " + Where(key) + ")");
        continue;
      }
      if (known_.count(key)) continue;
      shared_->errors.push_back(Where(key) + ": " + FieldName(key) + ": unknown field" +
                                DidYouMean(key, {known_.begin(), known_.end()}));
    }
  }
  for (const auto& s : sections_) s->CollectUnknown();
}

Status SpecReader::Finish() {
  CollectUnknown();
  if (shared_->errors.empty()) return Status::Ok();
  std::string all;
  for (const std::string& e : shared_->errors) all += (all.empty() ? "" : "\n") + e;
  return InvalidArgumentError(all);
}

}  // namespace spot
