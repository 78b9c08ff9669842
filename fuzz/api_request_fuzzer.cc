// Fuzzes the controller's HTTP API (control/api_server.h) with raw requests:
// the server runs as `spot run` starts it (loopback, a token file, a SQLite
// job store holding two jobs, every page provider set), and each input is
// sent as the bytes of one connection. The request line, headers, routing,
// authorization and the JSON built from the store are all exercised; the
// connection is half-closed after the input so that the server answers what
// it has.
//
// Contract checked: every answer is an HTTP response; no answer is a 500,
// which the server only sends when a handler threw (a bug, not bad input).
// The token is "fuzz-token" (see api_request.dict).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "control/api_server.h"
#include "control/job_store.h"
#include "fuzz_support.h"

namespace {

using spot::control::ApiServer;
using spot::control::JobStore;

struct Server {
  std::unique_ptr<JobStore> store;
  std::unique_ptr<ApiServer> api;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "api_request harness: %s\n", what.c_str());
  std::abort();
}

void Check(const spot::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

void FillStore(JobStore& store) {
  using namespace spot::control;
  Check(store.CreateJob({.id = "demo", .spec_path = "job.yaml", .state = JobState::kRunning}),
        "job");
  Check(store.CreateJob({.id = "done", .spec_path = "job.yaml", .state = JobState::kSucceeded}),
        "job");
  Check(store.PutInstance({.id = "i-0123456789abcdef0",
                           .job_id = "demo",
                           .zone = 0,
                           .zone_name = "us-east-1a",
                           .instance_type = "p3.2xlarge",
                           .provider_data = R"({"pid": 42, "addr": "127.0.0.1:1"})"}),
        "instance");
  LedgerEntry row{.instance_id = "i-0123456789abcdef0", .from_s = 0, .to_s = 60,
                  .usd_per_hour = 0.9};
  Check(store.Bill("i-0123456789abcdef0", {&row, 1}), "bill");
  Check(store.AppendDecision("demo", {.tick = 1, .current = "idle", .target = "spot:0"}),
        "decision");
  Check(store.AppendEvent("demo", {.kind = "launch", .detail = "zone \xff\xfe not UTF-8"}),
        "event");
  Check(store.PutValue("demo", "progress", R"({"step": 12, "epoch": 1})"), "progress");
  Check(store.PutValue("done", "progress", "not json"), "progress");
}

Server& TheServer() {
  static Server* server = [] {
    auto* s = new Server;
    const std::string dir = spot::fuzz::ScratchDir();
    auto store = JobStore::Open(dir + "/jobs.db");
    if (!store.ok()) Die(store.status().ToString());
    s->store = std::move(*store);
    FillStore(*s->store);
    const std::string token = spot::fuzz::WriteScratchFile("token", "fuzz-token\n");
    if (::chmod(token.c_str(), 0600) != 0) Die("chmod token");
    spot::control::ApiOptions options;
    options.token_path = token;
    options.pages.metrics = [] { return std::string("spot_up 1\n"); };
    options.pages.targets = [] { return std::string(R"([{"targets": ["127.0.0.1:1"]}])"); };
    options.pages.dashboard_data = [](const std::string& id) -> spot::Result<std::string> {
      if (id == "done") return spot::NotFoundError("no dashboard data for " + id);
      return std::string(R"({"job": ")") + id + "\"}";
    };
    options.pages.dashboard_html = [](const std::string& id) { return "<html>" + id + "</html>"; };
    auto api = ApiServer::Start(s->store.get(), options,
                                [](const std::string&) { return spot::Status::Ok(); });
    if (!api.ok()) Die(api.status().ToString());
    s->api = std::move(*api);
    return s;
  }();
  return *server;
}

// Sends `request` on a new connection, half-closes it and returns what the
// server wrote until it closed (or 5 s passed).
// A connection to the server. Retried for up to 5 s: thousands of
// connections a second can exhaust loopback's ephemeral ports for a moment;
// a server that accepts nothing for 5 s is a finding.
int Connect(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int err = 0;
  for (int attempt = 0; attempt < 500; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) Die(std::string("socket: ") + std::strerror(errno));
    // Close with a reset: no TIME_WAIT left on this side, whose ports run out.
    linger no_linger{.l_onoff = 1, .l_linger = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_linger, sizeof(no_linger));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    err = errno;
    ::close(fd);
    ::usleep(10000);
  }
  Die(std::string("the server accepted no connection for 5 s: ") + std::strerror(err));
}

std::string RoundTrip(int port, const std::string& request) {
  int fd = Connect(port);
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early on a request it refuses
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[8192];
  for (;;) {
    pollfd p{.fd = fd, .events = POLLIN};
    if (::poll(&p, 1, 5000) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)TheServer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& s = TheServer();
  const std::string reply = RoundTrip(s.api->port(), spot::fuzz::AsString(data, size));
  if (reply.empty()) return 0;  // refused before a response (e.g. a malformed request line)
  FUZZ_CHECK(reply.starts_with("HTTP/1.1 "), "not an HTTP response: " + reply.substr(0, 80));
  // Pipelined requests get one response each: none may be a 500.
  const bool threw = reply.starts_with("HTTP/1.1 500") ||
                     reply.find("\r\nHTTP/1.1 500") != std::string::npos;
  FUZZ_CHECK(!threw, "a handler threw: " + reply.substr(0, 400));
  return 0;
}
