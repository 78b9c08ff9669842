// Address checks and socket helpers shared by the loopback-only servers (the
// controller's API, a worker's /metrics) and by whoever starts one on a port
// of its choosing. Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace spot {

// True for "localhost", "::1" and any IPv4 address in 127.0.0.0/8.
bool IsLoopbackHost(const std::string& host);

// "HOST:PORT", an IPv6 host in brackets ("[::1]:80"): an address in a URL or
// a Prometheus target.
std::string HostPort(const std::string& host, int port);

// Where a server (`what`, e.g. "API server") may listen: a loopback address,
// or, when `reachable_from_network`, one named address (never a wildcard:
// "", 0.0.0.0, ::), and a port in [0, 65535]. InvalidArgument naming the
// server and why otherwise.
Status CheckListenAddress(std::string_view what, const std::string& host, int port,
                          bool reachable_from_network);

// Socket options for a listening server: SO_REUSEADDR only. cpp-httplib's
// default adds SO_REUSEPORT, which lets a second server bind a port in use and
// silently take part of its requests. Use as
// `server.set_socket_options(SetReuseAddressOnly)`.
void SetReuseAddressOnly(int socket);

// A TCP port on 127.0.0.1 that was free at the time of the call (bound to
// port 0, then released): another process may take it before the caller
// binds it, so retry a start that fails on a taken port. Unavailable when no
// socket can be bound.
Result<int> PickFreePort();

}  // namespace spot
