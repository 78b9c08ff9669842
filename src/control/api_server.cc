#include "control/api_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "control/openapi_spec.h"
#include "core/file_io.h"
#include "core/net.h"
#include "monitor/http_guard.h"
#include "monitor/metrics.h"

namespace spot::control {
namespace {

using json = nlohmann::json;

constexpr size_t kTokenBytes = 32;
constexpr size_t kEventsShown = 50;
constexpr auto kStartTimeout = std::chrono::seconds(5);
constexpr size_t kMaxBodyBytes = 64 * 1024;  // larger request bodies are answered 413

// Takes time that depends on the lengths only, never on where the bytes differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

Status ErrnoError(std::string_view what, const std::string& path) {
  return UnavailableError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

Result<std::string> RandomHex(size_t bytes) {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("opening", "/dev/urandom");
  std::vector<unsigned char> buf(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::read(fd, buf.data() + got, bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = ErrnoError("reading", "/dev/urandom");
      ::close(fd);
      return s;
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : buf) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// Like WriteFileAtomically, but the file is 0600 from its first byte.
Status WriteSecretFile(const std::string& path, std::string_view contents) {
  std::filesystem::path final_path(path);
  std::string dir = final_path.parent_path().string();
  std::string tmp =
      (final_path.parent_path() / (std::string(kTempFilePrefix) + final_path.filename().string() +
                                   "." + std::to_string(::getpid())))
          .string();
  ::unlink(tmp.c_str());  // a leftover of a crash would keep its old mode
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("creating", tmp);
  Status s;
  if (::fchmod(fd, 0600) != 0) s = ErrnoError("chmod", tmp);
  while (s.ok() && !contents.empty()) {
    ssize_t n = ::write(fd, contents.data(), contents.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = ErrnoError("writing", tmp);
    if (n > 0) contents.remove_prefix(static_cast<size_t>(n));
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("syncing", tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("closing", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError("renaming to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDirectory(dir.empty() ? "." : dir);
}

Result<std::string> ReadToken(const std::string& path, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("stat", path);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgumentError(fmt::format("API token file {} is not a regular file", path));
  }
  if ((st.st_mode & 077) != 0) {
    return InvalidArgumentError(
        fmt::format("API token file {} is accessible to group or others (mode {:03o}); "
                    "chmod 600 it",
                    path, st.st_mode & 0777));
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("reading", path);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  std::string token(Trim(text));
  if (token.empty()) return InvalidArgumentError(fmt::format("API token file {} is empty", path));
  return token;
}

int HttpCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

json JobJson(const JobRecord& j, double cost_usd) {
  return json{{"id", j.id},
              {"state", JobStateName(j.state)},
              {"message", j.message},
              {"spec_path", j.spec_path},
              {"created_unix_s", j.created_unix_s},
              {"updated_unix_s", j.updated_unix_s},
              {"time_compression", j.time_compression},
              {"start_tick", j.start_tick},
              {"cost_usd", cost_usd}};
}

// The provider's data as JSON when it is JSON (the local provider's is), else as text.
json ProviderData(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_discarded() ? json(text) : j;
}

json InstanceJson(const InstanceRecord& r) {
  return json{{"id", r.id},
              {"zone", r.zone},
              {"zone_name", r.zone_name},
              {"instance_type", r.instance_type},
              {"lifecycle", r.spot ? "spot" : "on-demand"},
              {"provider_data", ProviderData(r.provider_data)},
              {"launched_s", r.launched_s},
              {"ended_s", r.ended_s ? json(*r.ended_s) : json(nullptr)},
              {"end_reason", r.end_reason},
              {"billed_until_s", r.billed_until_s}};
}

json EventJson(const EventRecord& e) {
  return json{{"sim_s", e.sim_s},
              {"wall_unix_s", e.wall_unix_s},
              {"kind", e.kind},
              {"instance_id", e.instance_id},
              {"detail", e.detail}};
}

json LedgerJson(const LedgerEntry& l) {
  return json{{"instance_id", l.instance_id},
              {"from_s", l.from_s},
              {"to_s", l.to_s},
              {"usd_per_hour", l.usd_per_hour},
              {"usd", l.usd}};
}

json DecisionJson(const DecisionRecord& d) {
  return json{{"tick", d.tick},
              {"abs_tick", d.abs_tick},
              {"progress_hours", d.progress_hours},
              {"current", d.current},
              {"changeover_left_hours", d.changeover_left_hours},
              {"preempted", d.preempted},
              {"target", d.target}};
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void ReplyError(httplib::Response& res, int code, const std::string& message) {
  Reply(res, code, json{{"error", message}});
}

enum class Route {
  kHealth,
  kOpenApi,
  kJobs,
  kJob,
  kLedger,
  kDecisions,
  kCancel,
  kReport,
  kDashboardData,
  kTargets,
  kMetrics,
  kHome,
  kPage
};

struct RouteMatch {
  Route route;
  std::string method;  // the one method the route answers
  std::string job;     // "" unless the path names a job
};

// The segments of a request target's path, each percent-decoded after the
// split: "/api/v1/jobs/a%2Fcancel" names the job "a/cancel", not the cancel
// route of job "a". "/" has none. nullopt unless the path begins with "/".
std::optional<std::vector<std::string>> PathSegments(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (!path.starts_with('/')) return std::nullopt;
  path.remove_prefix(1);
  std::vector<std::string> parts;
  if (path.empty()) return parts;
  for (size_t start = 0;;) {
    size_t slash = path.find('/', start);
    parts.push_back(httplib::detail::decode_url(std::string(path.substr(start, slash - start)),
                                                /*convert_plus_to_space=*/false));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

// nullopt for a path no route has.
std::optional<RouteMatch> MatchPath(std::string_view target) {
  std::optional<std::vector<std::string>> segments = PathSegments(target);
  if (!segments) return std::nullopt;
  const std::vector<std::string>& p = *segments;
  if (std::any_of(p.begin(), p.end(), [](const std::string& s) { return s.empty(); })) {
    return std::nullopt;
  }
  if (p.empty()) return RouteMatch{Route::kHome, "GET", ""};
  if (p.size() == 1 && p[0] == "metrics") return RouteMatch{Route::kMetrics, "GET", ""};
  if (p.size() == 2 && p[0] == "jobs") return RouteMatch{Route::kPage, "GET", p[1]};
  if (p.size() < 3 || p[0] != "api" || p[1] != "v1") return std::nullopt;
  const std::string& what = p[2];
  if (p.size() == 3 && what == "healthz") return RouteMatch{Route::kHealth, "GET", ""};
  if (p.size() == 3 && what == "targets") return RouteMatch{Route::kTargets, "GET", ""};
  if (p.size() == 3 && what == "openapi.yaml") return RouteMatch{Route::kOpenApi, "GET", ""};
  if (what != "jobs" || p.size() > 5) return std::nullopt;
  if (p.size() == 3) return RouteMatch{Route::kJobs, "GET", ""};
  if (p.size() == 4) return RouteMatch{Route::kJob, "GET", p[3]};
  if (p[4] == "ledger") return RouteMatch{Route::kLedger, "GET", p[3]};
  if (p[4] == "decisions") return RouteMatch{Route::kDecisions, "GET", p[3]};
  if (p[4] == "cancel") return RouteMatch{Route::kCancel, "POST", p[3]};
  if (p[4] == "report") return RouteMatch{Route::kReport, "POST", p[3]};
  if (p[4] == "dashboard") return RouteMatch{Route::kDashboardData, "GET", p[3]};
  return std::nullopt;
}

// The error the HTTP layer answers itself (before any handler runs, or for a
// method no handler takes), as the JSON error body every other error has.
std::string HttpLayerError(int status) {
  switch (status) {
    case 400:
      return "malformed request (request line, header or method)";
    case 404:
      return "no such path";
    case 413:
      return fmt::format("request body over {} bytes", kMaxBodyBytes);
    case 414:
      return "request line too long";
    case 416:
      return "malformed Range header";
    default:
      return fmt::format("HTTP {}", status);
  }
}

class HttpApiServer final : public ApiServer {
 public:
  HttpApiServer(JobStore* store, std::string host, std::string token,
                std::function<Status(const std::string&)> cancel, ApiPages pages,
                ReportHandler report, const monitor::HttpGuardOptions& http)
      : store_(store),
        host_(std::move(host)),
        token_(std::move(token)),
        cancel_(std::move(cancel)),
        pages_(std::move(pages)),
        report_(std::move(report)),
        server_(monitor::NewGuardedHttpServer(http)) {}
  ~HttpApiServer() override {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  // Binds, starts the serving thread and waits until it accepts.
  Status Listen(int port);

  int port() const override { return port_; }
  std::string url() const override { return "http://" + HostPort(host_, port_); }
  const std::string& token() const override { return token_; }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res);
  void Dispatch(const RouteMatch& m, const httplib::Request& req, httplib::Response& res);
  // Replies 401/403 and returns false unless the request carries the token.
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  // Replies 404 (or the store's error) and returns nullopt when the job is unknown.
  std::optional<JobRecord> FindJob(const std::string& id, httplib::Response& res);
  // Replies with the store's error when `r` failed; true if it did.
  template <typename T>
  bool Failed(const Result<T>& r, httplib::Response& res) {
    if (r.ok()) return false;
    ReplyError(res, HttpCodeFor(r.status()), r.status().ToString());
    return true;
  }
  void GetJobs(httplib::Response& res);
  void GetJob(const JobRecord& job, httplib::Response& res);
  void Report(const JobRecord& job, const httplib::Request& req, httplib::Response& res);
  void Cancel(const JobRecord& job, httplib::Response& res);
  void ServePages(const RouteMatch& m, httplib::Response& res);
  void ServeJobPage(Route route, const JobRecord& job, httplib::Response& res);

  JobStore* const store_;
  const std::string host_;
  const std::string token_;
  const std::function<Status(const std::string&)> cancel_;
  const ApiPages pages_;
  const ReportHandler report_;
  const std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

Status HttpApiServer::Listen(int port) {
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  // Every method goes to one router, which can tell 404 from 405. "." would
  // not match a decoded newline (%0A) in the path.
  constexpr const char* kAnyPath = R"([\s\S]*)";
  server_->Get(kAnyPath, handler)
      .Post(kAnyPath, handler)
      .Put(kAnyPath, handler)
      .Patch(kAnyPath, handler)
      .Delete(kAnyPath, handler)
      .Options(kAnyPath, handler);
  server_->set_socket_options(SetReuseAddressOnly);  // one controller per port
  server_->set_tcp_nodelay(true);
  server_->set_payload_max_length(kMaxBodyBytes);
  // Errors with no body are the HTTP layer's own (400, 413, 414, ...): they
  // get the JSON error body too (handlers always give one). The request may
  // not have been read to its end (an unknown method leaves its headers, a
  // body over the limit its bytes), and what is left would be read as further
  // requests and answered: the client must not send another on this
  // connection.
  server_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ReplyError(res, res.status, HttpLayerError(res.status));
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }));
  int bound = monitor::BindGuardedHttpServer(*server_, host_, port);
  if (bound <= 0) {
    return UnavailableError(
        fmt::format("API server: cannot listen on {}:{}: {}", host_, port, std::strerror(errno)));
  }
  port_ = bound;
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!server_->is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      server_->stop();
      thread_.join();
      return UnavailableError(fmt::format("API server on {}: did not start", url()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

void HttpApiServer::Handle(const httplib::Request& req, httplib::Response& res) {
  try {
    std::optional<RouteMatch> m = MatchPath(req.target);
    if (!m) return ReplyError(res, 404, fmt::format("no such path {}", req.path));
    std::string method = req.method == "HEAD" ? "GET" : req.method;
    if (method != m->method) {
      res.set_header("Allow", m->method);
      return ReplyError(res, 405,
                        fmt::format("{} takes {}, not {}", req.path, m->method, req.method));
    }
    Dispatch(*m, req, res);
  } catch (const std::exception& e) {
    ReplyError(res, 500, fmt::format("internal error: {}", e.what()));
  } catch (...) {
    ReplyError(res, 500, "internal error");
  }
}

void HttpApiServer::Dispatch(const RouteMatch& m, const httplib::Request& req,
                             httplib::Response& res) {
  if (m.route == Route::kHealth) return Reply(res, 200, json{{"ok", true}});
  if (m.route == Route::kOpenApi) {
    res.status = 200;
    res.set_content(std::string(OpenApiSpec()), "application/yaml");
    return;
  }
  if (m.route == Route::kJobs) return GetJobs(res);
  if (m.route == Route::kMetrics || m.route == Route::kTargets || m.route == Route::kHome) {
    return ServePages(m, res);
  }
  // Authorization comes before the lookup, so that callers without the token
  // cannot probe which jobs exist.
  if ((m.route == Route::kCancel || m.route == Route::kReport) && !Authorized(req, res)) return;
  std::optional<JobRecord> job = FindJob(m.job, res);
  if (!job) return;
  switch (m.route) {
    case Route::kJob:
      return GetJob(*job, res);
    case Route::kLedger: {
      auto rows = store_->Ledger(job->id);
      auto total = store_->TotalCost(job->id);
      if (Failed(rows, res) || Failed(total, res)) return;
      json out = json::array();
      for (const LedgerEntry& l : *rows) out.push_back(LedgerJson(l));
      return Reply(res, 200, json{{"rows", std::move(out)}, {"total_usd", *total}});
    }
    case Route::kDecisions: {
      auto decisions = store_->Decisions(job->id);
      if (Failed(decisions, res)) return;
      json out = json::array();
      for (const DecisionRecord& d : *decisions) out.push_back(DecisionJson(d));
      return Reply(res, 200, json{{"decisions", std::move(out)}});
    }
    case Route::kCancel:
      return Cancel(*job, res);
    case Route::kReport:
      return Report(*job, req, res);
    case Route::kDashboardData:
    case Route::kPage:
      return ServeJobPage(m.route, *job, res);
    default:
      return ReplyError(res, 500, "unrouted path");
  }
}

bool HttpApiServer::Authorized(const httplib::Request& req, httplib::Response& res) const {
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  bool bearer = auth.size() > kScheme.size() &&
                std::equal(kScheme.begin(), kScheme.end(), auth.begin(), [](char a, char b) {
                  return a == std::tolower(static_cast<unsigned char>(b));
                });
  if (!bearer) {
    res.set_header("WWW-Authenticate", "Bearer");
    ReplyError(res, 401, "this call needs \"Authorization: Bearer TOKEN\" (the API token file)");
    return false;
  }
  if (!ConstantTimeEquals(Trim(std::string_view(auth).substr(kScheme.size())), token_)) {
    ReplyError(res, 403, "wrong API token");
    return false;
  }
  return true;
}

std::optional<JobRecord> HttpApiServer::FindJob(const std::string& id, httplib::Response& res) {
  auto job = store_->GetJob(id);
  if (Failed(job, res)) return std::nullopt;
  if (!*job) ReplyError(res, 404, fmt::format("no job {}", id));
  return *job;
}

void HttpApiServer::GetJobs(httplib::Response& res) {
  auto jobs = store_->ListJobs();
  if (Failed(jobs, res)) return;
  json out = json::array();
  for (const JobRecord& j : *jobs) {
    auto cost = store_->TotalCost(j.id);
    if (Failed(cost, res)) return;
    out.push_back(JobJson(j, *cost));
  }
  Reply(res, 200, json{{"jobs", std::move(out)}});
}

void HttpApiServer::GetJob(const JobRecord& job, httplib::Response& res) {
  auto cost = store_->TotalCost(job.id);
  auto instances = store_->Instances(job.id, /*live_only=*/false);
  auto progress = store_->GetValue(job.id, "progress");
  auto events = store_->Events(job.id);
  if (Failed(cost, res) || Failed(instances, res) || Failed(progress, res) || Failed(events, res)) {
    return;
  }
  json out = JobJson(job, *cost);
  out["instances"] = json::array();
  for (const InstanceRecord& r : *instances) out["instances"].push_back(InstanceJson(r));
  // A progress value that is not JSON shows as null rather than failing the call.
  out["progress"] =
      *progress ? json::parse(**progress, nullptr, /*allow_exceptions=*/false) : json(nullptr);
  if (out["progress"].is_discarded()) out["progress"] = nullptr;
  out["events"] = json::array();
  size_t first = events->size() > kEventsShown ? events->size() - kEventsShown : 0;
  for (size_t i = first; i < events->size(); ++i) out["events"].push_back(EventJson((*events)[i]));
  Reply(res, 200, out);
}

void HttpApiServer::ServePages(const RouteMatch& m, httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  if (m.route == Route::kMetrics) {
    if (!pages_.metrics) return ReplyError(res, 404, "this server has no metrics");
    res.status = 200;
    res.set_content(pages_.metrics(), std::string(monitor::kTextContentType));
    return;
  }
  if (m.route == Route::kTargets) {
    if (!pages_.targets) return ReplyError(res, 404, "this server has no scrape targets");
    res.status = 200;
    res.set_content(pages_.targets(), "application/json");
    return;
  }
  // Home: the dashboard of the newest job.
  auto jobs = store_->ListJobs();
  if (Failed(jobs, res)) return;
  if (!pages_.dashboard_html || jobs->empty()) {
    return ReplyError(res, 404, "no dashboard here: see /api/v1/jobs");
  }
  const JobRecord* newest = &jobs->front();
  for (const JobRecord& j : *jobs) {
    if (j.created_unix_s > newest->created_unix_s) newest = &j;
  }
  res.status = 302;
  res.set_header("Location", "/jobs/" + newest->id);
  res.set_content("", "text/plain");
}

void HttpApiServer::ServeJobPage(Route route, const JobRecord& job, httplib::Response& res) {
  res.set_header("Cache-Control", "no-store");
  if (route == Route::kPage) {
    if (!pages_.dashboard_html) return ReplyError(res, 404, "this server has no dashboard");
    res.status = 200;
    res.set_content(pages_.dashboard_html(job.id), "text/html; charset=utf-8");
    return;
  }
  if (!pages_.dashboard_data) return ReplyError(res, 404, "this server has no dashboard");
  Result<std::string> data = pages_.dashboard_data(job.id);
  if (Failed(data, res)) return;
  res.status = 200;
  res.set_content(*data, "application/json");
}

void HttpApiServer::Report(const JobRecord& job, const httplib::Request& req,
                           httplib::Response& res) {
  if (!report_) return ReplyError(res, 503, "this controller takes no reports");
  if (IsTerminal(job.state)) {
    return ReplyError(res, 409,
                      fmt::format("job {} already ended ({})", job.id, JobStateName(job.state)));
  }
  Status s = report_(job.id, req.body);
  if (!s.ok()) return ReplyError(res, HttpCodeFor(s), std::string(s.message()));
  Reply(res, 200, json{{"ok", true}});
}

void HttpApiServer::Cancel(const JobRecord& job, httplib::Response& res) {
  if (IsTerminal(job.state)) {
    return ReplyError(res, 409,
                      fmt::format("job {} already ended ({})", job.id, JobStateName(job.state)));
  }
  if (!cancel_) return ReplyError(res, 503, "this controller cannot cancel jobs");
  Status s = cancel_(job.id);
  if (!s.ok()) return ReplyError(res, HttpCodeFor(s), s.ToString());
  Reply(res, 202, json{{"id", job.id}, {"state", JobStateName(JobState::kCancelled)}});
}

}  // namespace

Result<std::string> LoadOrCreateToken(const std::string& path) {
  if (path.empty()) return InvalidArgumentError("API token file: no path given");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    auto token = ReadToken(path, fd);
    ::close(fd);
    return token;
  }
  if (errno != ENOENT) return ErrnoError("opening API token file", path);
  SPOT_ASSIGN_OR_RETURN(std::string token, RandomHex(kTokenBytes));
  Status s = WriteSecretFile(path, token + "\n");
  if (!s.ok()) return s.WithContext("creating API token file");
  return token;
}

Result<std::unique_ptr<ApiServer>> ApiServer::Start(
    JobStore* store, const ApiOptions& options, std::function<Status(const std::string&)> cancel) {
  if (store == nullptr) return InvalidArgumentError("API server: no job store");
  SPOT_RETURN_IF_ERROR(
      CheckListenAddress("API server", options.host, options.port, options.reachable_from_network));
  SPOT_ASSIGN_OR_RETURN(std::string token, LoadOrCreateToken(options.token_path));
  auto server =
      std::make_unique<HttpApiServer>(store, options.host, std::move(token), std::move(cancel),
                                      options.pages, options.report, options.http);
  SPOT_RETURN_IF_ERROR(server->Listen(options.port));
  return std::unique_ptr<ApiServer>(std::move(server));
}

}  // namespace spot::control
