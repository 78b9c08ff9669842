// spottrain/client.h: SpotTrain's client for a C++ training program that
// `spot run` starts as a command workload (the counterpart of the Python
// package `spottrain`; docs/python-client.md describes the contract).
// Header-only; needs cpp-httplib (`httplib.h`) and nlohmann-json.
//
//   std::string error;
//   auto env = spottrain::ReadEnv(&error);          // RANK, SPOT_* ...
//   if (!env) { fprintf(stderr, "%s\n", error.c_str()); return 2; }
//   spottrain::Session session(*env);               // installs the notice handler
//   for (int64_t step = start; step < total && !session.ShouldStop(); ++step) {
//     ...train...
//     session.Report({.step = step + 1, .loss = loss});
//   }
//   spottrain::AtomicWriteFile(session.CheckpointDir() + "/model.bin", bytes);
//
// Nothing here throws: failures the environment causes come back as values
// with a message naming the file, variable or server and the reason.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace spottrain {

// The variables a program gets (absent ones keep these defaults: rank 0 of 1,
// no controller).
struct Env {
  int rank = 0;                           // RANK
  int world_size = 1;                     // WORLD_SIZE
  int local_rank = 0;                     // LOCAL_RANK
  int local_world_size = 1;               // LOCAL_WORLD_SIZE
  int node_rank = 0;                      // NODE_RANK
  std::string master_addr;                // MASTER_ADDR
  int master_port = 0;                    // MASTER_PORT (0: unset)
  std::string job;                        // SPOT_JOB
  std::string instance;                   // SPOT_INSTANCE
  std::string checkpoint_dir;             // SPOT_CHECKPOINT_DIR
  std::string notice_file;                // SPOT_NOTICE_FILE
  std::string controller_url;             // SPOT_CONTROLLER_URL, http://host:port
  std::string token_file;                 // SPOT_TOKEN_FILE
  std::string notice_signal = "SIGTERM";  // SPOT_NOTICE_SIGNAL
};

// The number of a notice signal by name (SIGTERM, SIGINT, SIGUSR1, SIGUSR2,
// SIGHUP, SIGQUIT: those a program can catch to save); 0 for any other.
inline int SignalNumber(std::string_view name) {
  static const std::pair<const char*, int> kSignals[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGUSR1", SIGUSR1},
      {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP}, {"SIGQUIT", SIGQUIT}};
  for (const auto& [n, v] : kSignals) {
    if (name == n) return v;
  }
  return 0;
}

// Reads the variables through `get` (default: the process environment).
// nullopt with `error` naming the variable and the reason for a bad value.
inline std::optional<Env> ReadEnv(
    std::string* error, const std::function<const char*(const char*)>& get = std::getenv) {
  Env env;
  auto text = [&](const char* name, std::string* out) {
    const char* v = get(name);
    if (v != nullptr && *v != '\0') *out = v;
  };
  auto integer = [&](const char* name, int minimum, int* out) {
    const char* v = get(name);
    if (v == nullptr || *v == '\0') return true;
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || value < minimum || value > 1'000'000'000) {
      if (error != nullptr) {
        *error = std::string("environment variable ") + name +
                 ": expected an integer >= " + std::to_string(minimum) + ", got '" + v + "'";
      }
      return false;
    }
    *out = static_cast<int>(value);
    return true;
  };
  if (!integer("RANK", 0, &env.rank) || !integer("WORLD_SIZE", 1, &env.world_size) ||
      !integer("LOCAL_RANK", 0, &env.local_rank) ||
      !integer("LOCAL_WORLD_SIZE", 1, &env.local_world_size) ||
      !integer("NODE_RANK", 0, &env.node_rank) || !integer("MASTER_PORT", 0, &env.master_port)) {
    return std::nullopt;
  }
  text("MASTER_ADDR", &env.master_addr);
  text("SPOT_JOB", &env.job);
  text("SPOT_INSTANCE", &env.instance);
  text("SPOT_CHECKPOINT_DIR", &env.checkpoint_dir);
  text("SPOT_NOTICE_FILE", &env.notice_file);
  text("SPOT_CONTROLLER_URL", &env.controller_url);
  text("SPOT_TOKEN_FILE", &env.token_file);
  text("SPOT_NOTICE_SIGNAL", &env.notice_signal);
  std::string problem;
  if (env.rank >= env.world_size) {
    problem = "environment variable RANK: " + std::to_string(env.rank) +
              " is not below WORLD_SIZE " + std::to_string(env.world_size);
  } else if (SignalNumber(env.notice_signal) == 0) {
    problem =
        "environment variable SPOT_NOTICE_SIGNAL: must be one of SIGTERM, SIGINT, "
        "SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, got '" +
        env.notice_signal + "'";
  } else if (!env.controller_url.empty() && env.controller_url.rfind("http://", 0) != 0) {
    problem = "environment variable SPOT_CONTROLLER_URL: expected an http:// URL, got '" +
              env.controller_url + "'";
  } else if (!env.controller_url.empty() && env.job.empty()) {
    problem = "environment variable SPOT_JOB: must be set with SPOT_CONTROLLER_URL";
  }
  if (!problem.empty()) {
    if (error != nullptr) *error = problem;
    return std::nullopt;
  }
  return env;
}

// The agent's termination notice (SPOT_NOTICE_FILE).
struct NoticeInfo {
  std::optional<double> notice_unix_s;
  std::optional<double> deadline_unix_s;  // when the instance is reclaimed
  std::string action;                     // "terminate", "stop", ...
  std::string source;                     // "aws", "gcp", ...
};

// One progress report (POST /api/v1/jobs/JOB/report). Non-finite numbers are
// left out of the body (the controller refuses them), as are metrics past 64.
struct Report {
  int64_t step = 0;  // completed steps
  std::optional<double> loss;
  std::optional<int64_t> samples;  // processed since the last report
  std::optional<int64_t> epoch;
  std::optional<int64_t> total_steps;
  std::map<std::string, double> metrics;
  bool done = false;  // the final report of a finished training
};

enum class ReportOutcome {
  kAccepted,  // the controller answered 200
  kSkipped,   // nothing to do: no controller, or not rank 0 (see Options)
  kFailed,    // not delivered or refused; `error` says why
};

namespace detail {

inline volatile std::sig_atomic_t notice_signalled = 0;

inline void OnNoticeSignal(int) { notice_signalled = 1; }

inline std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

inline std::string PercentEncode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

inline bool ReadFile(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error != nullptr) *error = Errno(path);
    return false;
  }
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

}  // namespace detail

// The report's JSON body, as the controller reads it.
inline std::string ReportBody(const Report& r, const std::string& instance, int rank) {
  nlohmann::json body = {{"instance", instance}, {"rank", rank}, {"step", r.step}};
  if (r.total_steps) body["total_steps"] = *r.total_steps;
  if (r.epoch) body["epoch"] = *r.epoch;
  if (r.loss && std::isfinite(*r.loss)) body["loss"] = *r.loss;
  if (r.samples) body["samples"] = *r.samples;
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [k, v] : r.metrics) {
    if (std::isfinite(v) && metrics.size() < 64) metrics[k] = v;
  }
  if (!metrics.empty()) body["metrics"] = std::move(metrics);
  if (r.done) body["done"] = true;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct Options {
  // Where checkpoints go when SPOT_CHECKPOINT_DIR is not set (the job's
  // durable directory wins); "" = "checkpoints".
  std::string checkpoint_dir;
  // Handle the notice signal (SPOT_NOTICE_SIGNAL) with a flag. One Session
  // with a handler at a time; the previous handler is put back by ~Session.
  bool install_handler = true;
  bool report_all_ranks = false;  // false: only rank 0 reports
  double report_timeout_s = 2;    // connect, send and receive, each
};

// What a program needs from SpotTrain. ShouldStop() is safe to call from any
// thread; Report() blocks at most about 3 x report_timeout_s.
class Session {
 public:
  explicit Session(Env env, Options options = {}) : env_(std::move(env)), options_(options) {
    checkpoint_dir_ = !env_.checkpoint_dir.empty()       ? env_.checkpoint_dir
                      : !options_.checkpoint_dir.empty() ? options_.checkpoint_dir
                                                         : "checkpoints";
    signum_ = SignalNumber(env_.notice_signal);
    if (options_.install_handler && signum_ != 0) {
      detail::notice_signalled = 0;
      struct sigaction sa {};
      sa.sa_handler = detail::OnNoticeSignal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      installed_ = sigaction(signum_, &sa, &previous_) == 0;
    }
  }
  ~Session() {
    if (installed_) sigaction(signum_, &previous_, nullptr);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Env& env() const { return env_; }
  int Rank() const { return env_.rank; }
  int WorldSize() const { return env_.world_size; }
  const std::string& CheckpointDir() const { return checkpoint_dir_; }

  // True once the notice signal came or the notice file exists.
  bool ShouldStop() const {
    if (installed_ && detail::notice_signalled != 0) return true;
    struct stat st;
    return !env_.notice_file.empty() && ::stat(env_.notice_file.c_str(), &st) == 0;
  }

  // The notice file's content; nullopt when there is none (error empty) or
  // it is not a notice (error names the file and the reason).
  std::optional<NoticeInfo> Notice(std::string* error = nullptr) const {
    if (error != nullptr) error->clear();
    if (env_.notice_file.empty()) return std::nullopt;
    std::string text;
    if (!detail::ReadFile(env_.notice_file, &text, nullptr)) return std::nullopt;
    auto fail = [&](const std::string& why) {
      if (error != nullptr) *error = "notice file " + env_.notice_file + ": " + why;
      return std::nullopt;
    };
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("not JSON");
    if (!j.is_object()) return fail("not a JSON object");
    NoticeInfo n;
    for (auto [key, out] : {std::pair{"notice_unix_s", &n.notice_unix_s},
                            std::pair{"deadline_unix_s", &n.deadline_unix_s}}) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_number()) return fail(std::string("field ") + key + ": expected a number");
      *out = it->get<double>();
    }
    for (auto [key, out] : {std::pair{"action", &n.action}, std::pair{"source", &n.source}}) {
      auto it = j.find(key);
      if (it != j.end() && it->is_string()) *out = it->get<std::string>();
    }
    return n;
  }

  // Seconds left before the reclaim (0 once past it); nullopt without a
  // notice or a deadline in it.
  std::optional<double> DeadlineS() const {
    auto n = Notice();
    if (!n || !n->deadline_unix_s) return std::nullopt;
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return std::max(0.0, *n->deadline_unix_s - now);
  }

  // Sends one report (rank 0 only unless report_all_ranks); never throws.
  ReportOutcome Report(const spottrain::Report& r, std::string* error = nullptr) const {
    if (env_.controller_url.empty() || (env_.rank != 0 && !options_.report_all_ranks)) {
      return ReportOutcome::kSkipped;
    }
    const std::string path = "/api/v1/jobs/" + detail::PercentEncode(env_.job) + "/report";
    auto fail = [&](const std::string& why) {
      if (error != nullptr) *error = "report to " + env_.controller_url + path + ": " + why;
      return ReportOutcome::kFailed;
    };
    try {
      std::string token, why;
      if (!detail::ReadFile(env_.token_file, &token, &why)) return fail("token file " + why);
      token = token.substr(0, token.find_first_of("\r\n"));
      httplib::Client client(env_.controller_url);
      const auto timeout = std::chrono::duration<double>(options_.report_timeout_s);
      client.set_connection_timeout(timeout);
      client.set_read_timeout(timeout);
      client.set_write_timeout(timeout);
      const httplib::Headers headers = {{"Authorization", "Bearer " + token}};
      auto res =
          client.Post(path, headers, ReportBody(r, env_.instance, env_.rank), "application/json");
      if (!res) return fail(httplib::to_string(res.error()));
      if (res->status == 200) return ReportOutcome::kAccepted;
      const auto j = nlohmann::json::parse(res->body, nullptr, false);
      std::string message = res->body;
      if (j.is_object() && j.contains("error") && j["error"].is_string()) message = j["error"];
      return fail("HTTP " + std::to_string(res->status) + ": " + message);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }

 private:
  Env env_;
  Options options_;
  std::string checkpoint_dir_;
  int signum_ = 0;
  bool installed_ = false;
  struct sigaction previous_ {};
};

// Replaces `path` with `bytes` crash-safely: a temporary file beside it,
// written, fsynced, renamed over `path`, then the directory fsynced. After a
// crash `path` holds the old or the new content, never a mix. False with
// `error` naming the file and the failed call.
inline bool AtomicWriteFile(const std::string& path, std::string_view bytes,
                            std::string* error = nullptr) {
  static std::atomic<int> counter{0};
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  auto fail = [&](const std::string& what) {
    if (error != nullptr) *error = detail::Errno(what);
    return false;
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail(tmp + ": open");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      return fail(tmp + ": write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = saved;
    return fail(tmp + ": fsync");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    return fail(path + ": rename");
  }
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return fail(dir + ": open");
  const bool synced = ::fsync(dfd) == 0;
  const int saved = errno;
  ::close(dfd);
  errno = saved;
  return synced || fail(dir + ": fsync");
}

}  // namespace spottrain
