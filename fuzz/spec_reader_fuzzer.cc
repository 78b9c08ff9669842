// Fuzzes SpecReader (core/spec_reader.h), the YAML reader under every job
// file: parsing, then every accessor on every key of every section.
//
// The first letter of a key picks the accessor, so the fuzzer reaches each
// one: i Int, d Double, b Bool, s String, l StringList, e Enum; keys starting
// with anything else are left unread (unknown fields, "did you mean").
#include <cstdint>
#include <string>
#include <vector>

#include "core/spec_reader.h"
#include "fuzz_support.h"

namespace {

// Aliases can make the tree a graph with cycles (`a: &x {b: *x}`): the walk
// stops at this depth and after this many sections.
constexpr int kMaxDepth = 16;
constexpr int kMaxSections = 256;

void ReadField(spot::SpecReader& r, const std::string& key) {
  switch (key[0]) {
    case 'i': {
      int64_t v = 7;
      r.Int(key, &v, {.min = -5, .max = 1000, .min_exclusive = key.size() % 2 == 0});
      break;
    }
    case 'd': {
      double v = 0.5;
      r.Double(key, &v, {.min = 0, .max = 1, .max_exclusive = true}, /*required=*/true);
      (void)spot::BoundsViolation(v, {.min = 0, .max = 1});
      break;
    }
    case 'b': {
      bool v = false;
      r.Bool(key, &v);
      break;
    }
    case 's': {
      std::string v = "default";
      r.String(key, &v, /*required=*/true);
      break;
    }
    case 'l': {
      std::vector<std::string> v;
      r.StringList(key, &v);
      break;
    }
    case 'e': {
      std::string v = "sgd";
      r.Enum(key, &v, {"sgd", "adam", "cosine"});
      break;
    }
    default:
      break;
  }
}

void Walk(spot::SpecReader& r, int depth, int* sections) {
  for (const std::string& key : r.Keys()) {
    (void)r.Has(key);
    (void)r.FieldName(key);
    (void)r.Where(key);
    if (r.IsMapping(key)) {
      if (depth < kMaxDepth && ++*sections <= kMaxSections) {
        Walk(r.Section(key), depth + 1, sections);
      }
      continue;
    }
    if (!key.empty()) ReadField(r, key);
    if (key.size() > 2 && key[1] == '!') r.AddError(key, "cross-field check");
  }
  // Absent fields: defaults, a required one, and a section that is not there.
  int64_t absent = 3;
  r.Int("absent_int", &absent);
  std::string required;
  r.String("required_string", &required, /*required=*/true);
  (void)r.Section("absent_section").Keys();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = spot::fuzz::AsString(data, size);
  auto reader = spot::SpecReader::FromString(text, "fuzz.yaml");
  if (!reader.ok()) return 0;
  int sections = 0;
  Walk(*reader, 0, &sections);
  spot::Status s = reader->Finish();
  FUZZ_CHECK(s.ok() || s.code() == spot::StatusCode::kInvalidArgument, s.ToString());
  return 0;
}
