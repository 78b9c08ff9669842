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
  void String(std::string_view name, std::string* v, std::string_view help) override {
    fields.push_back(
        {std::string(name), "string", v->empty() ? "\"\"" : *v, "", std::string(help)});
  }
  void StringList(std::string_view name, std::vector<std::string>* v,
                  std::string_view help) override {
    fields.push_back({std::string(name), "list of strings",
                      v->empty() ? "[]" : "[" + Join(*v, ", ") + "]", "", std::string(help)});
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
  void String(std::string_view name, std::string* v, std::string_view) override {
    const std::string* text = Take(name);
    if (text) *v = *text;
  }
  void StringList(std::string_view name, std::vector<std::string>* v, std::string_view) override {
    std::vector<std::string> items;
    if (auto l = c_.lists.find(std::string(name)); l != c_.lists.end()) {
      known_.emplace_back(name);
      items = l->second;
    } else if (const std::string* text = Take(name)) {
      if (text->empty()) {  // "": none
        *v = {};
        return;
      }
      size_t from = 0;
      while (true) {
        const size_t comma = text->find(',', from);
        std::string item = text->substr(from, comma == std::string::npos ? comma : comma - from);
        const size_t a = item.find_first_not_of(" \t");
        const size_t b = item.find_last_not_of(" \t");
        items.push_back(a == std::string::npos ? "" : item.substr(a, b - a + 1));
        if (comma == std::string::npos) break;
        from = comma + 1;
      }
    } else {
      return;
    }
    for (const std::string& item : items) {
      if (item.empty()) return Error(name, "an empty item in the list");
    }
    *v = std::move(items);
  }

  Status Finish() {
    std::vector<std::string> given;
    for (const auto& [name, text] : c_.params) given.push_back(name);
    for (const auto& [name, items] : c_.lists) given.push_back(name);
    for (const std::string& name : given) {
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
    if (c_.lists.count(std::string(name))) {
      Error(name, "expected a single value, got a list");
      return nullptr;
    }
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
    if (section.IsSequence(k)) {
      section.StringList(k, &out->lists[k]);
      out->where[k] = section.Where(k);
      continue;
    }
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
