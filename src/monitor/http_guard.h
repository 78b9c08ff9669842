// A cpp-httplib server that slow, idle or numerous clients cannot starve:
// the base of the controller's API server and of a worker's /metrics server.
//
// cpp-httplib's own server runs each connection on a fixed pool of threads
// and only times out a single read, so a client that sends a header byte every
// second (a slow-loris) keeps a thread forever, and idle sockets queue ahead
// of everyone else. This one:
//   - serves each connection on its own thread, at most max_connections at
//     once;
//   - closes a connection whose request (line, headers and body) has not
//     fully arrived request_timeout after it began, and one that waits longer
//     than idle_timeout for its next request;
//   - beyond max_connections, closes the connection that has waited longest
//     for its request to make room (so an idle crowd cannot lock out a health
//     check); answers 503 and closes the new one only when every connection
//     is busy in a handler (or a flood of closed ones still holds threads);
//   - on stop(), lets each open connection answer the request it is reading
//     or one more that comes within idle_timeout (so stop() may take up to
//     idle_timeout + request_timeout), as cpp-httplib's own server does.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace httplib {
class Server;
}  // namespace httplib

namespace spot::monitor {

struct HttpGuardOptions {
  // Connections served at once (each holds a thread while open); >= 1.
  size_t max_connections = 64;
  // From the first byte of a request, its line, headers and body must have
  // arrived within this long, or the connection is closed. > 0.
  std::chrono::milliseconds request_timeout{5000};
  // An open connection may wait this long for its first or next request. > 0.
  std::chrono::milliseconds idle_timeout{5000};
  // Writing a response may stall this long (a client that does not read). > 0.
  std::chrono::milliseconds write_timeout{5000};
};

// A server to register handlers on, bind and run as any httplib::Server.
// The guard owns the task queue and the timeouts: the caller must not replace
// new_task_queue nor set timeouts or keep-alive settings (they come from
// `options`; a connection serves up to 100 requests). Thread safety as
// httplib::Server's; handlers run on the connections' threads.
std::unique_ptr<httplib::Server> NewGuardedHttpServer(const HttpGuardOptions& options);

// Binds `server` (made by NewGuardedHttpServer) to host:port (0: any free
// port) and raises its listen backlog; the port bound, or -1 (errno says
// why). Call it instead of bind_to_port/bind_to_any_port, before
// listen_after_bind.
int BindGuardedHttpServer(httplib::Server& server, const std::string& host, int port);

}  // namespace spot::monitor
