// SpecReader reads a user's YAML file field by field and reports every problem
// with the file, line, column and dotted field name, e.g.
//   job.yaml:7:9: optimizer.lr: must be > 0 (got -1)
//   job.yaml:3:1: batch_sise: unknown field (did you mean 'batch_size'?)
// Each accessor declares a field (type, bounds, default taken from *out) in one
// place, so validation and documentation share a source. Errors accumulate;
// Finish() returns all of them as one InvalidArgument Status.
//
// Not thread-safe. A nested reader (Section) shares its parent's error list.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spot {

// Inclusive bounds unless the *_exclusive flag is set.
struct Bounds {
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
};

// Why `v` breaks `b` ("must be > 0 (got -1)"), or "" when it does not.
std::string BoundsViolation(double v, const Bounds& b);
// `b` as a reader would: "> 0", "[0, 1]", ">= 1", "" when unbounded.
std::string BoundsText(const Bounds& b);
// A number as messages and docs print it (up to 6 significant digits).
std::string FormatNumber(double v);
// " (did you mean 'k'?)" for the known name closest to `key`, or "".
std::string DidYouMean(std::string_view key, const std::vector<std::string>& known);

// The largest job file read (a job file is a few kilobytes; this leaves room
// for comments, and refuses a file that is something else).
inline constexpr uint64_t kMaxSpecFileBytes = 4 << 20;

// Reads a job file's text. InvalidArgument naming the file for a missing one
// ("no such file"), anything but a regular file, or one over kMaxSpecFileBytes.
Result<std::string> ReadSpecFile(const std::string& path);

class SpecReader {
 public:
  // Reads `path` with ReadSpecFile and parses it with FromString.
  static Result<SpecReader> FromFile(const std::string& path);
  // Parses `text` as if it were the contents of `file_name`. InvalidArgument
  // naming the file (and the line where there is one) for text over
  // kMaxSpecFileBytes, UTF-16/UTF-32 text (a byte-order mark or NUL bytes),
  // a YAML syntax error, nesting too deep, more than one YAML document, or a
  // top level that is not a mapping.
  static Result<SpecReader> FromString(const std::string& text, const std::string& file_name);

  // Scalars. Absent optional fields leave *out unchanged (its value is the
  // default), and so does a value with an error. Numbers are read by
  // number_text.h's rule: plain decimal, never quoted ("64" is a string),
  // never with a leading zero.
  void Int(std::string_view key, int64_t* out, Bounds bounds = {}, bool required = false);
  // As above, into an int: values outside int's range are errors too.
  void Int(std::string_view key, int* out, Bounds bounds = {}, bool required = false);
  void Double(std::string_view key, double* out, Bounds bounds = {}, bool required = false);
  void Bool(std::string_view key, bool* out);
  void String(std::string_view key, std::string* out, bool required = false);
  // A list of strings (a YAML sequence of scalars).
  void StringList(std::string_view key, std::vector<std::string>* out, bool required = false);
  // A string that must be one of `allowed`.
  void Enum(std::string_view key, std::string* out, std::initializer_list<std::string_view> allowed,
            bool required = false);

  // A nested mapping; an absent key gives an empty section (all defaults).
  // The section is owned by this reader and lives as long as it does.
  SpecReader& Section(std::string_view key, bool required = false);

  bool Has(std::string_view key) const;
  // True when `key` holds a scalar written in quotes (or as a block scalar):
  // a string, which a number field refuses.
  bool Quoted(std::string_view key) const;
  // True when `key` holds a mapping (a section), false when absent or not.
  bool IsMapping(std::string_view key) const;
  // True when `key` holds a sequence, false when absent or not.
  bool IsSequence(std::string_view key) const;
  // The keys of this section, in file order.
  std::vector<std::string> Keys() const;
  // The dotted name of `key` in this section, for messages ("optimizer.lr").
  std::string FieldName(std::string_view key) const;
  // Where `key` sits ("job.yaml:7:9"), or this section's position when absent.
  std::string Where(std::string_view key) const;
  // Records an error about `key` (for cross-field checks).
  void AddError(std::string_view key, const std::string& reason);

  // Reports fields of this section (and every section taken from it) that no
  // accessor read, then returns all errors, or OK.
  Status Finish();

  const std::string& file() const { return file_; }

 private:
  struct Shared {
    std::vector<std::string> errors;
  };
  SpecReader(std::string file, YAML::Node node, std::string prefix, std::shared_ptr<Shared> shared);

  // Marks `key` known and returns its node when present and a scalar.
  std::optional<YAML::Node> Scalar(std::string_view key, bool required, std::string_view kind);
  // Scalar, and the text of a number: refuses a quoted one.
  std::optional<std::string> NumberText(std::string_view key, bool required, std::string_view kind);
  // Records why `v` breaks `b`, if it does; true when it does not.
  bool CheckBounds(std::string_view key, double v, const Bounds& b);
  void CollectUnknown() const;
  YAML::Mark Mark(std::string_view key) const;

  std::string file_;
  YAML::Node node_;
  std::string prefix_;
  std::shared_ptr<Shared> shared_;
  std::set<std::string, std::less<>> known_;
  std::vector<std::unique_ptr<SpecReader>> sections_;
};

}  // namespace spot
