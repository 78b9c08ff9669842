// Fuzzes the reader of SpotTrain's JSON log lines (core/logging.h
// ParseLogLine, ErrorMessageOf, ParseLogTimestamp), which `spot logs` and the
// controller (a failed worker's last error) apply to whatever an instance's
// log file holds, and checks it against the writer: any message, written by
// the JSON formatter, reads back as the same text (invalid UTF-8 replaced).
#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/logging.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = spot::fuzz::AsString(data, size);

  // Whatever a file holds: never a crash, and a record only with our fields.
  if (auto r = spot::ParseLogLine(text)) {
    FUZZ_CHECK(spot::LogLevelRank(r->level) >= 0, "a record with an unknown level: " + r->level);
    FUZZ_CHECK(spot::ParseLogTimestamp(spot::FormatLogTimestamp(r->unix_ms)) == r->unix_ms,
               "a record's time does not survive formatting");
  }
  (void)spot::ErrorMessageOf(text);
  if (auto t = spot::ParseLogTimestamp(text)) {
    FUZZ_CHECK(spot::FormatLogTimestamp(*t) == text, "a timestamp accepted in another form");
  }

  // The writer: the input as a message, formatted as the files hold it.
  static auto* formatter = spot::NewJsonLogFormatter().release();
  spdlog::details::log_msg msg(spdlog::source_loc{}, "spot", spdlog::level::warn,
                               spdlog::string_view_t(text.data(), text.size()));
  spdlog::memory_buf_t buf;
  formatter->format(msg, buf);
  const std::string_view line(buf.data(), buf.size());
  FUZZ_CHECK(!line.empty() && line.back() == '\n', "a formatted line without its newline");
  FUZZ_CHECK(line.find('\n') == line.size() - 1, "a formatted line spans several lines");
  auto back = spot::ParseLogLine(line);
  FUZZ_CHECK(back.has_value(), "the reader refuses the writer's line: " + std::string(line));
  const std::string expected =
      nlohmann::json::parse(
          nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
          .get<std::string>();
  FUZZ_CHECK(back->message == expected, "the message does not read back as written");
  FUZZ_CHECK(back->level == "warn", "the level does not read back: " + back->level);
  return 0;
}
