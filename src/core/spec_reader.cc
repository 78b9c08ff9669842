#include "core/spec_reader.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

#include "core/file_io.h"
#include "core/number_text.h"

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

using namespace std::literals;

std::string At(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

int LineOf(std::string_view text, size_t byte) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + byte, '\n'));
}

// Why `text` is not UTF-8 (or ASCII) text, or "". yaml-cpp would decode
// UTF-16 and UTF-32 silently; a job file is UTF-8, as every tool around it
// writes and reads it.
std::string EncodingProblem(std::string_view text) {
  const char* fix = ": save it as UTF-8";
  if (text.starts_with("\x00\x00\xFE\xFF"sv) || text.starts_with("\xFF\xFE\x00\x00"sv)) {
    return "is UTF-32 text (it starts with a UTF-32 byte-order mark)"s + fix;
  }
  if (text.starts_with("\xFE\xFF"sv) || text.starts_with("\xFF\xFE"sv)) {
    return "is UTF-16 text (it starts with a UTF-16 byte-order mark)"s + fix;
  }
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return "line " + std::to_string(LineOf(text, nul)) +
           " holds a NUL byte: not a text file, or UTF-16/UTF-32 text without a byte-order mark" +
           fix;
  }
  return "";
}

// Quoted ("64", '64') and block scalars carry yaml-cpp's non-specific tag
// "!"; an explicit !!str makes a string too.
bool IsQuoted(const YAML::Node& n) {
  return n.IsScalar() && (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str");
}

// Where each YAML document of a text starts: enough to tell a second
// document from a parser that yields documents without reading on.
struct DocumentStarts : YAML::EventHandler {
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& m) override { marks.push_back(m); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

Result<std::string> ReadSpecFile(const std::string& path) {
  auto text = ReadFile(path, kMaxSpecFileBytes);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return InvalidArgumentError(path + ": no such file");
  }
  return text;
}

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
  if (text.size() > kMaxSpecFileBytes) {
    return InvalidArgumentError(file_name + ": too large (" + std::to_string(text.size()) +
                                " bytes; a job file holds at most " +
                                std::to_string(kMaxSpecFileBytes) + ")");
  }
  if (std::string why = EncodingProblem(text); !why.empty()) {
    return InvalidArgumentError(file_name + ": " + why);
  }
  YAML::Node root;
  try {
    // Count the documents first, by parser events: yaml-cpp's LoadAll never
    // returns on some inputs (a stray ',' at the top level makes its parser
    // yield an empty document at the same place forever).
    DocumentStarts starts;
    std::istringstream in(text);
    YAML::Parser parser(in);
    while (starts.marks.size() < 3 && parser.HandleNextDocument(starts)) {
    }
    if (starts.marks.size() > 1) {
      const auto& m = starts.marks;
      const YAML::Mark& second = m[1];
      // A real document starts after the one before it.
      if (m[1].pos <= m[0].pos || (m.size() > 2 && m[2].pos <= m[1].pos)) {
        const size_t at = static_cast<size_t>(std::max(0, second.pos));
        const std::string what = at < text.size() ? "'" + std::string(1, text[at]) + "'"
                                                  : std::string("the end of the file");
        return InvalidArgumentError(At(file_name, second) + ": invalid YAML: unexpected " + what);
      }
      return InvalidArgumentError(At(file_name, second) +
                                  ": a second YAML document (after '---'): a job file holds one");
    }
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for this is "bad file"; its mark is where its
    // scanner had read to, which can be past the place.
    return InvalidArgumentError(file_name + ": invalid YAML: mappings and lists nested more than " +
                                std::to_string(e.depth() - 1) + " levels deep (by line " +
                                std::to_string(e.mark.line + 1) + ", column " +
                                std::to_string(e.mark.column + 1) + ")");
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(At(file_name, e.mark) + ": invalid YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    return InvalidArgumentError(file_name + ": expected a mapping of fields at the top level");
  }
  return SpecReader(file_name, root, "", std::make_shared<Shared>());
}

Result<SpecReader> SpecReader::FromFile(const std::string& path) {
  SPOT_ASSIGN_OR_RETURN(std::string text, ReadSpecFile(path));
  return FromString(text, path);
}

bool SpecReader::Has(std::string_view key) const {
  return node_.IsMap() && node_[std::string(key)].IsDefined();
}

bool SpecReader::Quoted(std::string_view key) const {
  return Has(key) && IsQuoted(node_[std::string(key)]);
}

bool SpecReader::IsMapping(std::string_view key) const {
  return Has(key) && node_[std::string(key)].IsMap();
}

bool SpecReader::IsSequence(std::string_view key) const {
  return Has(key) && node_[std::string(key)].IsSequence();
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

std::string SpecReader::Where(std::string_view key) const { return At(file_, Mark(key)); }

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

std::optional<std::string> SpecReader::NumberText(std::string_view key, bool required,
                                                  std::string_view kind) {
  auto n = Scalar(key, required, kind);
  if (!n) return std::nullopt;
  if (IsQuoted(*n)) {
    AddError(key, "expected " + std::string(kind) + ", got the string \"" + n->Scalar() +
                      "\" (write numbers without quotes)");
    return std::nullopt;
  }
  return n->Scalar();
}

bool SpecReader::CheckBounds(std::string_view key, double v, const Bounds& b) {
  std::string why = BoundsViolation(v, b);
  if (!why.empty()) AddError(key, why);
  return why.empty();
}

void SpecReader::Int(std::string_view key, int64_t* out, Bounds bounds, bool required) {
  auto text = NumberText(key, required, "an integer");
  if (!text) return;
  Result<int64_t> v = ParseInteger(*text);
  if (!v.ok()) return AddError(key, std::string(v.status().message()));
  if (CheckBounds(key, static_cast<double>(*v), bounds)) *out = *v;
}

void SpecReader::Int(std::string_view key, int* out, Bounds bounds, bool required) {
  int64_t v = *out;
  const size_t errors = shared_->errors.size();
  Int(key, &v, bounds, required);
  if (shared_->errors.size() != errors) return;
  if (v < INT_MIN || v > INT_MAX) {
    return AddError(key, "is out of range for a 32-bit integer (got " + std::to_string(v) + ")");
  }
  *out = static_cast<int>(v);
}

void SpecReader::Double(std::string_view key, double* out, Bounds bounds, bool required) {
  auto text = NumberText(key, required, "a number");
  if (!text) return;
  Result<double> v = ParseNumber(*text);
  if (!v.ok()) return AddError(key, std::string(v.status().message()));
  if (CheckBounds(key, *v, bounds)) *out = *v;
}

void SpecReader::Bool(std::string_view key, bool* out) {
  auto n = Scalar(key, false, "true or false");
  if (!n) return;
  // YAML 1.2's core schema: true or false, unquoted. yaml-cpp also takes
  // YAML 1.1's yes/no/on/off/y/n, which turn a country code or a typo into a
  // boolean without a word.
  const std::string& t = n->Scalar();
  const bool quoted = IsQuoted(*n);
  if (!quoted && (t == "true" || t == "True" || t == "TRUE")) {
    *out = true;
  } else if (!quoted && (t == "false" || t == "False" || t == "FALSE")) {
    *out = false;
  } else {
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
