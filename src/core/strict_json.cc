#include "core/strict_json.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace spot {
namespace {

using nlohmann::json;

// Thrown from the parser's callback to stop at the first problem.
struct Refused {
  std::string message;
};

// Where the parser is: one frame per open object or array.
class KeyTracker {
 public:
  explicit KeyTracker(const std::string& file) : file_(file) {}

  bool Event(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.push_back({.object = event == json::parse_event_t::object_start});
        if (frames_.size() > kMaxJsonDepth) {
          throw Refused{file_ + ": " + Path("") + ": objects and arrays nested more than " +
                        std::to_string(kMaxJsonDepth) + " deep"};
        }
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) {
          throw Refused{file_ + ": " + Path(f.key) + ": given twice (JSON keys must be unique)"};
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        ValueDone();
        break;
      case json::parse_event_t::value:
        ValueDone();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object = true;
    std::set<std::string> keys;
    std::string key;   // object: the key whose value is being read
    size_t index = 0;  // array: the element being read
  };

  void ValueDone() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }
  // "metadata.gap_seconds", "SpotPriceHistory[3].Timestamp"; `last` is the
  // innermost object's key ("" for the innermost frame itself).
  std::string Path(const std::string& last) const {
    std::string p;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      p += f.object ? (p.empty() ? "" : ".") + f.key : "[" + std::to_string(f.index) + "]";
    }
    if (!last.empty()) p += (p.empty() ? "" : ".") + last;
    return p.empty() ? "(top level)" : p;
  }

  const std::string& file_;
  std::vector<Frame> frames_;
};

int LineOfByte(std::string_view text, size_t byte) {
  byte = std::min(byte, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + byte, '\n'));
}

}  // namespace

Result<json> ParseStrictJson(std::string_view text, const std::string& file) {
  KeyTracker tracker(file);
  try {
    return json::parse(text, [&](int, json::parse_event_t event, json& parsed) {
      return tracker.Event(event, parsed);
    });
  } catch (const Refused& r) {
    return InvalidArgumentError(r.message);
  } catch (const json::parse_error& e) {
    return InvalidArgumentError(file + ":" + std::to_string(LineOfByte(text, e.byte)) +
                                ": JSON syntax error: " + e.what());
  } catch (const json::exception& e) {
    return InvalidArgumentError(file + ": invalid JSON: " + e.what());
  }
}

Result<int64_t> JsonInt64(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgumentError("expected an integer below 2^63 (got " + value.dump() + ")");
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return InvalidArgumentError("expected an integer (got " + value.dump() + ")");
}

}  // namespace spot
