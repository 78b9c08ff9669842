#include "core/config_fields.h"

#include "core/number_text.h"

namespace spot {
namespace {

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

class Collector final : public FieldVisitor {
 public:
  void Double(std::string_view name, double* v, const Bounds& b, std::string_view help) override {
    fields.push_back(
        {std::string(name), "number", FormatNumber(*v), BoundsText(b), std::string(help)});
  }
  void Int(std::string_view name, int64_t* v, const Bounds& b, std::string_view help) override {
    fields.push_back(
        {std::string(name), "integer", std::to_string(*v), BoundsText(b), std::string(help)});
  }
  void Bool(std::string_view name, bool* v, std::string_view help) override {
    fields.push_back({std::string(name), "bool", *v ? "true" : "false", "", std::string(help)});
  }
  void Enum(std::string_view name, std::string* v, std::vector<std::string> choices,
            std::string_view help) override {
    fields.push_back(
        {std::string(name), "one of " + Join(choices, " / "), *v, "", std::string(help)});
  }
  std::vector<FieldInfo> fields;
};

// Parses the parameters' text, strictly: numbers by number_text.h's rule
// (decimal, no leading zero, never quoted), true or false (no "yes").
class Reader final : public FieldVisitor {
 public:
  explicit Reader(const ComponentConfig& c) : c_(c) {}

  void Double(std::string_view name, double* v, const Bounds& b, std::string_view) override {
    const std::string* text = TakeNumber(name, "a number");
    if (!text) return;
    Result<double> x = ParseNumber(*text);
    if (!x.ok()) return Error(name, std::string(x.status().message()));
    if (std::string why = BoundsViolation(*x, b); !why.empty()) return Error(name, why);
    *v = *x;
  }
  void Int(std::string_view name, int64_t* v, const Bounds& b, std::string_view) override {
    const std::string* text = TakeNumber(name, "an integer");
    if (!text) return;
    Result<int64_t> x = ParseInteger(*text);
    if (!x.ok()) return Error(name, std::string(x.status().message()));
    if (std::string why = BoundsViolation(static_cast<double>(*x), b); !why.empty()) {
      return Error(name, why);
    }
    *v = *x;
  }
  void Bool(std::string_view name, bool* v, std::string_view) override {
    const std::string* text = Take(name);
    if (!text) return;
    if (*text != "true" && *text != "false") {
      return Error(name, "expected true or false (got '" + *text + "')");
    }
    *v = *text == "true";
  }
  void Enum(std::string_view name, std::string* v, std::vector<std::string> choices,
            std::string_view) override {
    const std::string* text = Take(name);
    if (!text) return;
    for (const std::string& c : choices) {
      if (c == *text) {
        *v = c;
        return;
      }
    }
    Error(name, "unknown value '" + *text + "' (expected one of: " + Join(choices, ", ") + ")");
  }

  Status Finish() {
    for (const auto& [name, text] : c_.params) {
      bool declared = false;
      for (const std::string& k : known_) declared = declared || k == name;
      if (declared) continue;
      std::string msg = "unknown parameter of '" + c_.name + "'";
      msg += known_.empty() ? " (it takes none)" : DidYouMean(name, known_);
      if (!known_.empty()) msg += "; it takes: " + Join(known_, ", ");
      Error(name, msg);
    }
    if (errors_.empty()) return Status::Ok();
    return InvalidArgumentError(Join(errors_, "\n"));
  }

 private:
  const std::string* Take(std::string_view name) {
    known_.emplace_back(name);
    auto it = c_.params.find(std::string(name));
    return it == c_.params.end() ? nullptr : &it->second;
  }
  // Take, refusing a quoted value: "8" is a string.
  const std::string* TakeNumber(std::string_view name, std::string_view kind) {
    const std::string* text = Take(name);
    if (text && c_.quoted.count(std::string(name))) {
      Error(name, "expected " + std::string(kind) + ", got the string \"" + *text +
                      "\" (write numbers without quotes)");
      return nullptr;
    }
    return text;
  }
  void Error(std::string_view name, const std::string& why) {
    auto w = c_.where.find(std::string(name));
    const std::string where = w == c_.where.end() ? "" : w->second + ": ";
    const std::string field =
        c_.field.empty() ? std::string(name) : c_.field + "." + std::string(name);
    errors_.push_back(where + field + ": " + why);
  }

  const ComponentConfig& c_;
  std::vector<std::string> known_;
  std::vector<std::string> errors_;
};

}  // namespace

std::vector<FieldInfo> CollectFields(const DeclareFn& declare) {
  Collector c;
  if (declare) declare(c);
  return c.fields;
}

Status ReadParams(const ComponentConfig& config, const DeclareFn& declare) {
  Reader r(config);
  if (declare) declare(r);
  return r.Finish();
}

void ReadComponent(SpecReader& reader, std::string_view key, ComponentConfig* out) {
  out->field = reader.FieldName(key);
  if (!reader.IsMapping(key)) {
    reader.String(key, &out->name);
    return;
  }
  SpecReader& section = reader.Section(key);
  section.String("name", &out->name, /*required=*/true);
  for (const std::string& k : section.Keys()) {
    if (k == "name") continue;
    std::string text;
    section.String(k, &text);
    out->params[k] = text;
    out->where[k] = section.Where(k);
    if (section.Quoted(k)) out->quoted.insert(k);
  }
}

std::string FieldsMarkdown(const std::vector<FieldInfo>& fields) {
  if (fields.empty()) return "(no parameters)\n";
  std::string out = "| parameter | type | default | bounds | meaning |\n|---|---|---|---|---|\n";
  for (const FieldInfo& f : fields) {
    out += "| `" + f.name + "` | " + f.type + " | " + f.default_value + " | " + f.bounds + " | " +
           f.help + " |\n";
  }
  return out;
}

}  // namespace spot
