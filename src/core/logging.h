// Process-wide logging: spdlog's default logger, which every library logs
// through, set up once by the application (InitLogging), and the JSON-lines
// format its files are written in.
//
// Two formats:
//   - text, for people at a terminal: "2026-12-03 07:00:00.123 info message";
//   - JSON lines with Elastic Common Schema (ECS) field names, for files and
//     log shippers, one object per line:
//       {"@timestamp":"2026-12-03T07:00:00.123Z","log.level":"info",
//        "message":"...","ecs.version":"1.6.0","log.logger":"spot",
//        "process.pid":4242,"process.thread.id":4243,"service.name":"spot",
//        "spot.job":"mnist","spot.role":"worker","spot.instance":"i-0002",
//        "spot.rank":1,"spot.generation":3}
//     The "spot.*" fields are this process's log context (SetLogContext),
//     SpotTrain's own fields in a namespace of their own, as ECS advises for
//     custom fields. Messages are escaped by nlohmann::json; bytes that are
//     not UTF-8 become U+FFFD.
//
// The environment chooses the format and the initial context, so that a
// process tells the processes it starts how to log:
//   SPOT_LOG_FORMAT=text|json    the format of standard error (default text)
//   SPOT_LOG_JOB, SPOT_LOG_ROLE, SPOT_LOG_INSTANCE   initial spot.* fields
//
// Thread safety: SetLogContext, AddJsonLogFile and logging itself may be
// called from any thread. InitLogging and ExportLogEnvironment must run
// before other threads start (they replace the default logger / call setenv).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace spdlog {
class formatter;
}

namespace spot {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kJson };

inline constexpr char kLogFormatEnv[] = "SPOT_LOG_FORMAT";
inline constexpr char kEcsVersion[] = "1.6.0";

// "text" or "json"; InvalidArgument naming the value otherwise.
Result<LogFormat> ParseLogFormat(std::string_view text);

// Replaces spdlog's default logger by one that writes to standard error at
// `level` or above, in the format SPOT_LOG_FORMAT names (text when unset),
// with the context SPOT_LOG_JOB, SPOT_LOG_ROLE and SPOT_LOG_INSTANCE give. A
// bad SPOT_LOG_FORMAT is InvalidArgument naming it (logging is then set up
// in text, so the caller can report it).
[[nodiscard]] Status InitLogging(LogLevel level);

// The format of standard error chosen by InitLogging.
LogFormat StderrLogFormat();

// Sets the pattern (spdlog's syntax) of the text written to standard error;
// no effect when that is JSON. Use this, never spdlog::set_pattern, which
// would replace the JSON format of the files too.
void SetTextLogPattern(const std::string& pattern);

// Also writes every log line, as JSON, to `path` (appended; created 0644
// when missing; flushed line by line). Internal naming the file when it
// cannot be opened.
Status AddJsonLogFile(const std::string& path);

// A field of this process's log context, written as "spot.<key>" on every
// JSON line from now on: job, role (controller, worker, rendezvous),
// instance, rank, generation (written in this order, other keys after them).
using LogValue = std::variant<int64_t, std::string>;
void SetLogContext(std::string_view key, LogValue value);
// Several fields at once: no line carries some of them new and some old.
void SetLogContext(std::initializer_list<std::pair<std::string_view, LogValue>> fields);
void ClearLogContext();

// The environment for a child process whose output goes to a file: the JSON
// format, this process's job (spot.job) and `overrides` (job, role or
// instance; e.g. {"instance", id}). A child sets its role itself.
std::vector<std::pair<std::string, std::string>> ChildLogEnvironment(
    std::initializer_list<std::pair<std::string_view, std::string>> overrides = {});
// The same, set in our own environment, for every child started from now on.
// REQUIRES: no other thread runs (setenv).
void ExportLogEnvironment();

// The JSON-lines formatter (with the context above), for tests and sinks of
// one's own.
std::unique_ptr<spdlog::formatter> NewJsonLogFormatter();

// --- Reading the format back (spot logs, the controller's last error) ---

// One line of the JSON format, its fields the reader needs.
struct LogRecord {
  int64_t unix_ms = 0;  // @timestamp
  std::string level;    // log.level: debug, info, warn, error, critical
  std::string message;
  std::string job, role, instance;     // spot.*; "" when absent
  int64_t rank = -1, generation = -1;  // spot.*; -1 when absent
};

// The record of a line written in the JSON format (its trailing newline
// optional); nullopt for anything else: text, other JSON, a torn line, a line
// whose @timestamp or log.level is missing or not ours. Never throws.
std::optional<LogRecord> ParseLogLine(std::string_view line);

// What a log line says about an error, "" when nothing: a JSON line's
// message when its level is error or worse or the message mentions "error";
// another line (a crash's stderr, the CLI's "error: ...") itself when it
// mentions "error".
std::string ErrorMessageOf(std::string_view line);

// "2026-12-03T07:00:00.123Z" (UTC, milliseconds) and back; the parser
// accepts exactly this form and returns nullopt for anything else.
std::string FormatLogTimestamp(int64_t unix_ms);
std::optional<int64_t> ParseLogTimestamp(std::string_view text);

// The order of levels (debug 0, info 1, warn 2, error 3, critical 4; "warning"
// and "err" accepted); -1 for a name that is none of them.
int LogLevelRank(std::string_view level);

}  // namespace spot
