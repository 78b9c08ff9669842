// MetricsServer: GET /metrics on loopback (or on one named address of the
// machine, for a worker scraped from another one), for a process that has no
// other HTTP server (each `spot worker`). Prometheus scrapes it.
//   GET|HEAD /metrics -> 200, ExposeText(registry), Content-Type kTextContentType
//   GET|HEAD /        -> 200, a line pointing to /metrics
//   other methods on those paths -> 405 with "Allow: GET, HEAD"; other paths -> 404
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "monitor/http_guard.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace spot::monitor {

struct MetricsServerOptions {
  // Address to listen on. Refused unless loopback: 127.0.0.0/8, "::1" or
  // "localhost" (the same rule as the controller's API server), or
  // `reachable_from_network` is set.
  std::string host = "127.0.0.1";
  // Allows `host` to be one address of this machine on a network (a worker
  // whose controller scrapes it from another machine: its address toward the
  // rendezvous). A wildcard ("0.0.0.0", "::", "") is refused all the same.
  bool reachable_from_network = false;
  // TCP port, 0..65535; 0: any free port (see MetricsServer::port()).
  int port = 0;
  // Called before each scrape collects the registry, to refresh gauges that
  // are computed on demand. Runs on a server thread, never concurrently with
  // itself. May be empty.
  std::function<void()> before_collect;
  // Connection cap and timeouts against slow or idle clients (http_guard.h):
  // scrapes answer while others hold connections.
  HttpGuardOptions http{.max_connections = 16};
};

class MetricsServer {
 public:
  // Binds and starts serving `registry` on a background thread; returns once
  // the server accepts connections. InvalidArgument for a host refused (see
  // MetricsServerOptions::host), a
  // port out of range or no registry; Unavailable when the port cannot be
  // bound (the message names host and port).
  static Result<std::unique_ptr<MetricsServer>> Start(
      std::shared_ptr<prometheus::Registry> registry, const MetricsServerOptions& options);

  // Stops serving and joins the server thread.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;         // the bound port
  std::string url() const;  // "http://HOST:PORT" (no path)

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spot::monitor
