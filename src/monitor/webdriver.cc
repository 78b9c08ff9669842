#include "monitor/webdriver.h"

#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/base64.h"
#include "core/net.h"
#include "core/process.h"
#include "core/temp_dir.h"

namespace spot::monitor {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr double kStopGraceS = 3;
constexpr int kStartAttempts = 3;  // a picked port can be taken before chromedriver binds it
constexpr size_t kLogTail = 2000;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// chromedriver in a process group of its own, so that stopping the group also
// stops the browser processes it started; output appended to `log`.
Result<int64_t> SpawnDriver(const std::vector<std::string>& argv, const std::string& log) {
  return Spawn({.argv = argv,
                .log_path = log,
                .group = ProcessGroup::kNewGroup,
                .parent_death_signal = SIGKILL});
}

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  return s.size() > kLogTail ? "..." + s.substr(s.size() - kLogTail) : s;
}

// JavaScript's truthiness of a JSON value.
bool Truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) {
    double d = v.get<double>();
    return d != 0 && !std::isnan(d);
  }
  if (v.is_string()) return !v.get<std::string>().empty();
  return true;  // objects and arrays
}

// A WebDriver error ({"error", "message"}) as a Status.
Status WebDriverError(const std::string& what, int http_status, const json& value) {
  std::string error = value.is_object() ? value.value("error", "") : "";
  std::string message = value.is_object() ? value.value("message", "") : value.dump();
  // chromedriver appends session details and a stack trace: keep the gist.
  if (size_t cut = message.find("\n  (Session info"); cut != std::string::npos) {
    message.resize(cut);
  }
  std::string text = fmt::format("{}: HTTP {}: {}: {}", what, http_status, error, message);
  if (error == "timeout" || error == "script timeout") return DeadlineExceededError(text);
  if (error == "invalid session id" || error == "session not created") {
    return UnavailableError(text);
  }
  return InternalError(text);
}

class ChromeBrowser final : public Browser {
 public:
  ChromeBrowser(const BrowserOptions& options, TempDir dir)
      : options_(options), dir_(std::move(dir)) {
    log_path_ =
        options.log_path.empty() ? (dir_.path() / "chromedriver.log").string() : options.log_path;
  }
  ~ChromeBrowser() override;

  // Starts chromedriver and opens a session.
  Status Open();

  Status Navigate(const std::string& url) override {
    return Call("POST", "/url", json{{"url", url}}).status();
  }
  Result<json> Execute(const std::string& script, const json& args) override {
    return Call("POST", "/execute/sync", json{{"script", script}, {"args", args}});
  }
  Result<json> WaitFor(const std::string& expression, double timeout_s) override;
  Status SetWindowSize(int width, int height) override {
    return Call("POST", "/window/rect", json{{"width", width}, {"height", height}}).status();
  }
  Result<std::string> ScreenshotPng() override;
  Result<std::vector<std::string>> ConsoleErrors() override;

 private:
  // Sends a command of the session (`path` relative to /session/ID) or, with
  // `session` false, of the server. Returns the reply's "value".
  Result<json> Call(const std::string& method, const std::string& path,
                    const json& body = json::object(), bool session = true);
  Status StartDriver();
  Status WaitDriverReady();
  Status CreateSession();

  const BrowserOptions options_;
  TempDir dir_;
  std::string log_path_;
  int64_t pid_ = -1;
  bool reaped_ = false;
  std::unique_ptr<httplib::Client> http_;
  std::string session_;
};

ChromeBrowser::~ChromeBrowser() {
  if (!session_.empty() && http_) {
    http_->set_read_timeout(5, 0);
    (void)Call("DELETE", "");  // closes the browser
  }
  // SIGTERM, then SIGKILL to the whole group: chromedriver if it hung, and any
  // browser process left over.
  if (pid_ > 0 && !reaped_) (void)StopProcess(pid_, kStopGraceS, /*whole_group=*/true);
}

Result<json> ChromeBrowser::Call(const std::string& method, const std::string& path,
                                 const json& body, bool session) {
  std::string url = session ? "/session/" + session_ + path : path;
  std::string what = fmt::format("WebDriver {} {}", method, url);
  httplib::Result r = [&] {
    if (method == "GET") return http_->Get(url);
    if (method == "DELETE") return http_->Delete(url);
    return http_->Post(url, body.dump(-1, ' ', false, json::error_handler_t::replace),
                       "application/json");
  }();
  if (!r) {
    return UnavailableError(fmt::format("{}: {} (chromedriver log {})", what,
                                        httplib::to_string(r.error()), log_path_));
  }
  json reply = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) {
    return InternalError(fmt::format("{}: HTTP {}: not a JSON object", what, r->status));
  }
  json value = reply.contains("value") ? reply["value"] : json();
  if (r->status != 200) return WebDriverError(what, r->status, value);
  return value;
}

Status ChromeBrowser::StartDriver() {
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    SPOT_ASSIGN_OR_RETURN(int port, PickListenPort());
    SPOT_ASSIGN_OR_RETURN(
        pid_, SpawnDriver({options_.chromedriver, fmt::format("--port={}", port)}, log_path_));
    reaped_ = false;
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port);
    auto timeout = Seconds(options_.command_timeout_s);
    http_->set_connection_timeout(std::chrono::seconds(2));
    http_->set_read_timeout(timeout);
    http_->set_write_timeout(timeout);
    last = WaitDriverReady();
    if (last.ok() || !reaped_) return last;  // only an early exit (a taken port) is retried
  }
  return last;
}

Status ChromeBrowser::WaitDriverReady() {
  auto deadline = Clock::now() + Seconds(options_.start_timeout_s);
  while (Clock::now() < deadline) {
    if (ProcessStatus s = CheckProcess(pid_); !s.running) {
      reaped_ = true;
      return UnavailableError(fmt::format("{} {} before it was ready: {}", options_.chromedriver,
                                          DescribeExit(s), LogTail(log_path_)));
    }
    if (httplib::Result r = http_->Get("/status"); r && r->status == 200) {
      json reply = json::parse(r->body, nullptr, false);
      if (!reply.is_discarded() && reply.contains("value") && reply["value"].is_object() &&
          reply["value"].value("ready", false)) {
        return Status::Ok();
      }
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return UnavailableError(fmt::format("{} not ready after {} s: {}", options_.chromedriver,
                                      options_.start_timeout_s, LogTail(log_path_)));
}

Status ChromeBrowser::CreateSession() {
  json args = {"--headless=new",
               "--no-sandbox",
               "--disable-gpu",
               "--disable-dev-shm-usage",
               "--disable-quic",
               "--no-first-run",
               "--no-default-browser-check",
               "--disable-background-networking",
               "--disable-component-update",
               "--disable-sync",
               "--disable-extensions",
               "--hide-scrollbars",
               "--user-data-dir=" + (dir_.path() / "profile").string(),
               fmt::format("--window-size={},{}", options_.width, options_.height)};
  json caps = {{"browserName", "chrome"},
               {"goog:chromeOptions", {{"binary", options_.chromium}, {"args", args}}},
               {"goog:loggingPrefs", {{"browser", "ALL"}}}};
  SPOT_ASSIGN_OR_RETURN(json value,
                        Call("POST", "/session", json{{"capabilities", {{"alwaysMatch", caps}}}},
                             /*session=*/false));
  if (!value.is_object() || !value.contains("sessionId") || !value["sessionId"].is_string()) {
    return InternalError("WebDriver: the new session has no id: " + value.dump());
  }
  session_ = value["sessionId"].get<std::string>();
  int ms = static_cast<int>(options_.command_timeout_s * 1000);
  return Call("POST", "/timeouts", json{{"script", ms}, {"pageLoad", ms}}).status();
}

Status ChromeBrowser::Open() {
  SPOT_RETURN_IF_ERROR(StartDriver());
  Status s = CreateSession();
  if (!s.ok()) return s.WithContext(fmt::format("starting {}", options_.chromium));
  return Status::Ok();
}

Result<json> ChromeBrowser::WaitFor(const std::string& expression, double timeout_s) {
  auto deadline = Clock::now() + Seconds(timeout_s);
  const std::string script = "return (" + expression + ");";
  for (;;) {
    SPOT_ASSIGN_OR_RETURN(json value, Execute(script, json::array()));
    if (Truthy(value)) return value;
    if (Clock::now() >= deadline) {
      return DeadlineExceededError(
          fmt::format("waited {} s for `{}`; last value {}", timeout_s, expression, value.dump()));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Result<std::string> ChromeBrowser::ScreenshotPng() {
  SPOT_ASSIGN_OR_RETURN(json value, Call("GET", "/screenshot"));
  if (!value.is_string()) return InternalError("WebDriver screenshot: not a string");
  std::optional<std::string> png = Base64Decode(value.get_ref<const std::string&>());
  if (!png) return DataLossError("WebDriver screenshot: invalid base64");
  return *std::move(png);
}

Result<std::vector<std::string>> ChromeBrowser::ConsoleErrors() {
  // chromedriver's extension (the W3C protocol has no logs).
  SPOT_ASSIGN_OR_RETURN(json entries, Call("POST", "/se/log", json{{"type", "browser"}}));
  std::vector<std::string> errors;
  for (const json& e : entries) {
    if (e.is_object() && e.value("level", "") == "SEVERE") errors.push_back(e.value("message", ""));
  }
  return errors;
}

}  // namespace

Result<std::unique_ptr<Browser>> Browser::Start(const BrowserOptions& options) {
  if (::access(options.chromedriver.c_str(), X_OK) != 0) {
    return FailedPreconditionError(fmt::format(
        "{} not found: install the Debian package chromium-driver", options.chromedriver));
  }
  if (::access(options.chromium.c_str(), X_OK) != 0) {
    return FailedPreconditionError(
        fmt::format("{} not found: install the Debian package chromium", options.chromium));
  }
  if (options.width <= 0 || options.height <= 0) {
    return InvalidArgumentError(
        fmt::format("browser window {}x{}: sizes must be > 0", options.width, options.height));
  }
  SPOT_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("spot-browser"));
  auto browser = std::make_unique<ChromeBrowser>(options, std::move(dir));
  SPOT_RETURN_IF_ERROR(browser->Open());
  return std::unique_ptr<Browser>(std::move(browser));
}

}  // namespace spot::monitor
