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

// The kernel's ephemeral port range, [first, last]
// (/proc/sys/net/ipv4/ip_local_port_range; Linux's default, 32768-60999,
// when it cannot be read). The kernel takes the local ports of outgoing
// connections and of binds to port 0 from it.
struct PortRange {
  int first = 32768;
  int last = 60999;
};
PortRange EphemeralPortRange();

// A port for a listener that another process opens later (a torchrun-style
// MASTER_PORT, bound by the program's TCPStore seconds after it is chosen):
// free on every address now, and drawn at random from [1024, range.first),
// outside the ephemeral range, so that no outgoing connection and no bind to
// port 0 (Gloo's own listeners, PickFreePort) can take it meanwhile; only a
// process binding that very port can. PickFreePort when no port below the
// range is free (or the range starts below 2048).
Result<int> PickListenPort(PortRange range = EphemeralPortRange());

}  // namespace spot
