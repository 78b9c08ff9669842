#include "core/logging.h"

#include <fmt/format.h>
#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

namespace spot {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr char kTextPattern[] = "%Y-%m-%d %H:%M:%S.%e %^%l%$ %v";
constexpr std::string_view kContextPrefix = "spot.";

// The log context: the "spot.*" fields of every JSON line, in the order
// they were first set. Never destroyed: threads may log during exit.
struct Context {
  std::mutex mu;
  OrderedJson fields = OrderedJson::object();  // GUARDED_BY(mu)
};
Context& TheContext() {
  static auto* c = new Context;
  return *c;
}

// The default logger's sinks (set by InitLogging before threads start).
struct Sinks {
  std::shared_ptr<spdlog::sinks::dist_sink_mt> all;  // adding a sink locks
  std::shared_ptr<spdlog::sinks::sink> err;
  LogFormat err_format = LogFormat::kText;
};
Sinks& TheSinks() {
  static auto* s = new Sinks;
  return *s;
}

const char* LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

std::string EnvKey(std::string_view key) {
  std::string out = "SPOT_LOG_";
  for (char c : key) out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return out;
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    OrderedJson j;
    j["@timestamp"] = FormatLogTimestamp(ms);
    j["log.level"] = LevelName(msg.level);
    j["message"] = std::string(msg.payload.data(), msg.payload.size());
    j["ecs.version"] = kEcsVersion;
    j["log.logger"] = std::string(msg.logger_name.data(), msg.logger_name.size());
    j["process.pid"] = pid_;
    j["process.thread.id"] = msg.thread_id;
    j["service.name"] = "spot";
    {
      Context& c = TheContext();
      std::lock_guard lock(c.mu);
      for (const auto& [key, value] : c.fields.items()) j[key] = value;
    }
    // Bytes that are not UTF-8 (a path, a peer's text) become U+FFFD rather
    // than an exception in the middle of logging.
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }

 private:
  int64_t pid_ = ::getpid();
};

void SetField(OrderedJson& fields, std::string_view key, const LogValue& value) {
  const std::string name = std::string(kContextPrefix) + std::string(key);
  std::visit([&](const auto& v) { fields[name] = v; }, value);
}

// The known fields first, in this order, then the others as they came.
OrderedJson Canonical(const OrderedJson& fields) {
  OrderedJson out = OrderedJson::object();
  for (const char* key : {"job", "role", "instance", "rank", "generation"}) {
    auto it = fields.find(std::string(kContextPrefix) + key);
    if (it != fields.end()) out[it.key()] = *it;
  }
  for (const auto& [key, value] : fields.items()) {
    if (!out.contains(key)) out[key] = value;
  }
  return out;
}

// Digits of `text` at [at, at + n) as a number; -1 when any is not a digit.
int Digits(std::string_view text, size_t at, size_t n) {
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return -1;
    v = v * 10 + (text[i] - '0');
  }
  return v;
}

std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

int64_t IntField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return InvalidArgumentError(fmt::format("log format '{}': not text or json", text));
}

Status InitLogging(LogLevel level) {
  Sinks& s = TheSinks();
  const char* env_format = std::getenv(kLogFormatEnv);
  Result<LogFormat> format = ParseLogFormat(env_format ? env_format : "text");
  s.err_format = format.ok() ? *format : LogFormat::kText;
  if (s.err_format == LogFormat::kJson) {
    s.err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    s.err->set_formatter(NewJsonLogFormatter());
  } else {
    s.err = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    s.err->set_formatter(std::make_unique<spdlog::pattern_formatter>(kTextPattern));
  }
  s.all = std::make_shared<spdlog::sinks::dist_sink_mt>();
  s.all->add_sink(s.err);
  auto logger = std::make_shared<spdlog::logger>("spot", s.all);
  switch (level) {
    case LogLevel::kDebug:
      logger->set_level(spdlog::level::debug);
      break;
    case LogLevel::kInfo:
      logger->set_level(spdlog::level::info);
      break;
    case LogLevel::kWarn:
      logger->set_level(spdlog::level::warn);
      break;
    case LogLevel::kError:
      logger->set_level(spdlog::level::err);
      break;
  }
  logger->flush_on(spdlog::level::trace);  // a line is on disk before the next
  spdlog::set_default_logger(logger);
  for (const char* key : {"job", "role", "instance"}) {
    const char* v = std::getenv(EnvKey(key).c_str());
    if (v != nullptr && *v != '\0') SetLogContext(key, std::string(v));
  }
  if (!format.ok()) {
    return InvalidArgumentError(fmt::format("{}: {}", kLogFormatEnv, format.status().message()));
  }
  return Status::Ok();
}

LogFormat StderrLogFormat() { return TheSinks().err_format; }

void SetTextLogPattern(const std::string& pattern) {
  Sinks& s = TheSinks();
  if (s.err && s.err_format == LogFormat::kText) {
    s.err->set_formatter(std::make_unique<spdlog::pattern_formatter>(pattern));
  }
}

Status AddJsonLogFile(const std::string& path) {
  Sinks& s = TheSinks();
  if (!s.all) return FailedPreconditionError("logging to " + path + ": InitLogging first");
  std::shared_ptr<spdlog::sinks::sink> file;
  try {
    file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  } catch (const spdlog::spdlog_ex& e) {
    return InternalError(fmt::format("log file {}: {}", path, e.what()));
  }
  file->set_formatter(NewJsonLogFormatter());
  s.all->add_sink(std::move(file));
  return Status::Ok();
}

void SetLogContext(std::string_view key, LogValue value) { SetLogContext({{key, value}}); }

void SetLogContext(std::initializer_list<std::pair<std::string_view, LogValue>> fields) {
  Context& c = TheContext();
  std::lock_guard lock(c.mu);
  for (const auto& [key, value] : fields) SetField(c.fields, key, value);
  c.fields = Canonical(c.fields);
}

void ClearLogContext() {
  Context& c = TheContext();
  std::lock_guard lock(c.mu);
  c.fields = OrderedJson::object();
}

std::vector<std::pair<std::string, std::string>> ChildLogEnvironment(
    std::initializer_list<std::pair<std::string_view, std::string>> overrides) {
  std::vector<std::pair<std::string, std::string>> env = {{kLogFormatEnv, "json"}};
  {
    Context& c = TheContext();
    std::lock_guard lock(c.mu);
    auto job = c.fields.find(std::string(kContextPrefix) + "job");
    if (job != c.fields.end() && job->is_string()) {
      env.emplace_back(EnvKey("job"), job->get<std::string>());
    }
  }
  for (const auto& [key, value] : overrides) {
    const std::string name = EnvKey(key);
    std::erase_if(env, [&](const auto& kv) { return kv.first == name; });
    env.emplace_back(name, value);
  }
  return env;
}

void ExportLogEnvironment() {
  for (const auto& [key, value] : ChildLogEnvironment()) ::setenv(key.c_str(), value.c_str(), 1);
}

std::unique_ptr<spdlog::formatter> NewJsonLogFormatter() {
  return std::make_unique<JsonFormatter>();
}

std::optional<LogRecord> ParseLogLine(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty() || line.front() != '{') return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  LogRecord r;
  auto ts = ParseLogTimestamp(StringField(j, "@timestamp"));
  r.level = StringField(j, "log.level");
  if (!ts || LogLevelRank(r.level) < 0) return std::nullopt;
  r.unix_ms = *ts;
  r.message = StringField(j, "message");
  r.job = StringField(j, "spot.job");
  r.role = StringField(j, "spot.role");
  r.instance = StringField(j, "spot.instance");
  r.rank = IntField(j, "spot.rank");
  r.generation = IntField(j, "spot.generation");
  return r;
}

std::string ErrorMessageOf(std::string_view line) {
  if (auto r = ParseLogLine(line)) {
    const bool error = LogLevelRank(r->level) >= LogLevelRank("error") ||
                       r->message.find("error") != std::string::npos;
    return error ? r->message : "";
  }
  return line.find("error") != std::string_view::npos ? std::string(line) : "";
}

std::string FormatLogTimestamp(int64_t unix_ms) {
  int64_t secs = unix_ms / 1000, ms = unix_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    secs -= 1;
  }
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::optional<int64_t> ParseLogTimestamp(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS.mmmZ
  if (text.size() != 24 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':' || text[19] != '.' || text[23] != 'Z') {
    return std::nullopt;
  }
  const int year = Digits(text, 0, 4), month = Digits(text, 5, 2), day = Digits(text, 8, 2);
  const int hour = Digits(text, 11, 2), minute = Digits(text, 14, 2), sec = Digits(text, 17, 2);
  const int ms = Digits(text, 20, 3);
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > 31 || hour < 0 || hour > 23 ||
      minute < 0 || minute > 59 || sec < 0 || sec > 60 || ms < 0) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = sec;
  const std::time_t t = timegm(&tm);
  if (tm.tm_mday != day) return std::nullopt;  // e.g. February 30 was normalized
  return static_cast<int64_t>(t) * 1000 + ms;
}

int LogLevelRank(std::string_view level) {
  static constexpr std::array<std::pair<std::string_view, int>, 8> kRanks = {{{"trace", 0},
                                                                              {"debug", 0},
                                                                              {"info", 1},
                                                                              {"warn", 2},
                                                                              {"warning", 2},
                                                                              {"error", 3},
                                                                              {"err", 3},
                                                                              {"critical", 4}}};
  for (const auto& [name, rank] : kRanks) {
    if (name == level) return rank;
  }
  return -1;
}

}  // namespace spot
