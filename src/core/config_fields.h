// Parameters of a component chosen by name (a policy, a forecaster, a
// provider), declared once next to its options struct and used three ways:
// read from a job file with bounds checked, listed by --help, and tabled in
// docs/job-spec.md (XGBoost's param.h idea, without macros).
//
// A component's options declare their fields in one function found by
// argument-dependent lookup:
//   void DeclareFields(HazardUpOptions& o, FieldVisitor& v) {
//     v.Double("history_window_hours", &o.history_window_hours, {.min = 1},
//              "past window the survival curve is fitted on");
//     ...
//   }
// The defaults are the struct's member initializers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/spec_reader.h"
#include "core/status.h"

namespace spot {

class FieldVisitor {
 public:
  virtual ~FieldVisitor() = default;
  virtual void Double(std::string_view name, double* v, const Bounds& b, std::string_view help) = 0;
  virtual void Int(std::string_view name, int64_t* v, const Bounds& b, std::string_view help) = 0;
  virtual void Bool(std::string_view name, bool* v, std::string_view help) = 0;
  // A string that must be one of `choices`.
  virtual void Enum(std::string_view name, std::string* v, std::vector<std::string> choices,
                    std::string_view help) = 0;
  // Free text (a name, an id, a path), quoted or not.
  virtual void String(std::string_view name, std::string* v, std::string_view help) = 0;
  // Several strings: a YAML sequence ([a, b]) or one string of
  // comma-separated items ("a,b"); empty items are refused.
  virtual void StringList(std::string_view name, std::vector<std::string>* v,
                          std::string_view help) = 0;
};

// One declared field, for help and docs.
struct FieldInfo {
  std::string name;
  std::string type;           // "number", "integer", "bool", "one of a / b"
  std::string default_value;  // as a job file would write it
  std::string bounds;         // "> 0", "[0, 1]", "" when none
  std::string help;
};

// A component as a job file names it:
//   policy: up                                   (name only: every default)
//   policy: {name: hazard-up, min_runs: 8}       (name and parameters)
struct ComponentConfig {
  std::string name;
  std::map<std::string, std::string> params;  // parameter -> its scalar as written
  std::map<std::string, std::string> where;   // parameter -> "job.yaml:7:9"
  std::string field;                          // the job file's field, "policy"
  std::set<std::string> quoted;  // parameters written in quotes: strings, never numbers
  std::map<std::string, std::vector<std::string>> lists;  // parameters written as sequences
};

using DeclareFn = std::function<void(FieldVisitor&)>;

// The fields `declare` declares, with their defaults.
std::vector<FieldInfo> CollectFields(const DeclareFn& declare);
// Sets the fields `declare` declares from config.params. InvalidArgument
// listing every problem, each with its place and field: an unknown
// parameter (naming the known ones), a value of the wrong type, one out of
// bounds, a choice not offered.
Status ReadParams(const ComponentConfig& config, const DeclareFn& declare);
// Reads `key` of `reader` as a ComponentConfig: a plain name, or a mapping
// with `name` and parameters (scalars, or sequences of scalars). Absent: `out` keeps its name.
void ReadComponent(SpecReader& reader, std::string_view key, ComponentConfig* out);

// A Markdown table of fields (| parameter | type | default | bounds | meaning |).
std::string FieldsMarkdown(const std::vector<FieldInfo>& fields);

}  // namespace spot
