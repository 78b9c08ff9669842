// Filters for defects the fuzzers have found and that are not fixed yet, so
// that a run can look past them: each applies only when the environment sets
// SPOT_FUZZ_SKIP_KNOWN=1 (scripts/fuzz.sh never does; a plain run finds them
// again until they are fixed). docs/fuzzing.md lists them; remove a filter
// with its fix.
#pragma once

#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace spot::fuzz {

inline bool SkipKnownBugs() {
  static const bool skip = [] {
    const char* v = std::getenv("SPOT_FUZZ_SKIP_KNOWN");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return skip;
}

// fuzz/regressions/spec_reader/loadall-stray-comma.yaml: yaml-cpp 0.7's
// LoadAll never returns when the parser yields a document without consuming
// anything (a stray ',' at the top level); SpecReader::FromString calls it.
// True when the parser yields more than two documents.
inline bool YamlLoadAllRunsAway(const std::string& text) {
  struct Counter : YAML::EventHandler {
    void OnDocumentStart(const YAML::Mark&) override {}
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
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    Counter counter;
    for (int docs = 0; parser.HandleNextDocument(counter);) {
      if (++docs > 2) return true;
    }
  } catch (...) {
  }
  return false;
}

inline bool KnownYamlBug(const std::string& text) {
  return SkipKnownBugs() && YamlLoadAllRunsAway(text);
}

// fuzz/regressions/rendezvous_state/, fuzz/regressions/ckpt_manifest/:
// nlohmann's get<int64_t>() (and get<int>, get<uint32_t>, ...) of a JSON
// number with a fraction or exponent converts the double with static_cast,
// undefined behaviour when it is out of the integer type's range; the
// rendezvous state and manifest readers call it on untrusted fields.
// True when the text is JSON holding a non-integer number outside (-1, 2^31)
// (a negative one is out of range for the unsigned fields).
inline bool JsonHasHugeFloat(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return false;
  std::vector<const nlohmann::json*> todo = {&doc};
  while (!todo.empty()) {
    const nlohmann::json* j = todo.back();
    todo.pop_back();
    if (j->is_number_float()) {
      const double v = j->get<double>();
      if (!(v > -1.0 && v < 2147483648.0)) return true;
    }
    if (j->is_structured()) {
      for (const auto& child : *j) todo.push_back(&child);
    }
  }
  return false;
}

inline bool KnownJsonBug(const std::string& text) {
  return SkipKnownBugs() && JsonHasHugeFloat(text);
}

}  // namespace spot::fuzz
