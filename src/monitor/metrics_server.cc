#include "monitor/metrics_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <prometheus/registry.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "core/net.h"
#include "monitor/http_guard.h"
#include "monitor/metrics.h"

namespace spot::monitor {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(5);
constexpr std::string_view kAllow = "GET, HEAD";

}  // namespace

struct MetricsServer::Impl {
  std::shared_ptr<prometheus::Registry> registry;
  MetricsServerOptions options;
  std::unique_ptr<httplib::Server> server;  // guarded (http_guard.h)
  std::thread thread;
  int port = 0;
  std::mutex scrape_mu;  // one scrape at a time, so before_collect never overlaps itself

  ~Impl() {
    if (server) server->stop();
    if (thread.joinable()) thread.join();
  }

  Status Listen();
  void Handle(const httplib::Request& req, httplib::Response& res);
  void Scrape(httplib::Response& res);
};

Status MetricsServer::Impl::Listen() {
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  // Every method goes to one handler, which can tell 404 from 405. httplib
  // routes HEAD to the GET handlers and drops the body.
  server = NewGuardedHttpServer(options.http);
  server->Get(".*", handler)
      .Post(".*", handler)
      .Put(".*", handler)
      .Patch(".*", handler)
      .Delete(".*", handler)
      .Options(".*", handler);
  server->set_socket_options(SetReuseAddressOnly);  // one server per port (core/net.h)
  server->set_tcp_nodelay(true);
  server->set_payload_max_length(4096);
  const std::string& host = options.host;
  errno = 0;
  int bound = BindGuardedHttpServer(*server, host, options.port);
  if (bound <= 0) {
    return UnavailableError(fmt::format("metrics server: cannot listen on {}:{}: {}", host,
                                        options.port,
                                        errno != 0 ? std::strerror(errno) : "bind failed"));
  }
  port = bound;
  thread = std::thread([this] { server->listen_after_bind(); });
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!server->is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return UnavailableError(fmt::format("metrics server on {}:{}: did not start", host, port));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

void MetricsServer::Impl::Handle(const httplib::Request& req, httplib::Response& res) {
  const bool metrics = req.path == "/metrics";
  if (!metrics && req.path != "/") {
    res.status = 404;
    res.set_content(fmt::format("no such path {}; metrics are at /metrics\n", req.path),
                    "text/plain; charset=utf-8");
    return;
  }
  if (req.method != "GET" && req.method != "HEAD") {
    res.status = 405;
    res.set_header("Allow", std::string(kAllow));
    res.set_content(fmt::format("{} takes {}, not {}\n", req.path, kAllow, req.method),
                    "text/plain; charset=utf-8");
    return;
  }
  if (!metrics) {
    res.set_content("SpotTrain metrics: GET /metrics (Prometheus text format)\n",
                    "text/plain; charset=utf-8");
    return;
  }
  Scrape(res);
}

void MetricsServer::Impl::Scrape(httplib::Response& res) {
  try {
    std::lock_guard<std::mutex> lock(scrape_mu);
    if (options.before_collect) options.before_collect();
    res.set_content(ExposeText(*registry), std::string(kTextContentType));
  } catch (const std::exception& e) {
    res.status = 500;
    res.set_content(fmt::format("collecting metrics failed: {}\n", e.what()),
                    "text/plain; charset=utf-8");
  } catch (...) {
    res.status = 500;
    res.set_content("collecting metrics failed\n", "text/plain; charset=utf-8");
  }
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() = default;

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    std::shared_ptr<prometheus::Registry> registry, const MetricsServerOptions& options) {
  if (registry == nullptr) return InvalidArgumentError("metrics server: no registry");
  SPOT_RETURN_IF_ERROR(CheckListenAddress("metrics server", options.host, options.port,
                                          options.reachable_from_network));
  auto impl = std::make_unique<Impl>();
  impl->registry = std::move(registry);
  impl->options = options;
  SPOT_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

int MetricsServer::port() const { return impl_->port; }

std::string MetricsServer::url() const {
  return "http://" + HostPort(impl_->options.host, impl_->port);
}

}  // namespace spot::monitor
