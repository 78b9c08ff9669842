// Address checks shared by the loopback-only servers (the controller's API,
// a worker's /metrics).
#pragma once

#include <string>

namespace spot {

// True for "localhost", "::1" and any IPv4 address in 127.0.0.0/8.
bool IsLoopbackHost(const std::string& host);

// Socket options for a listening server: SO_REUSEADDR only. cpp-httplib's
// default adds SO_REUSEPORT, which lets a second server bind a port in use and
// silently take part of its requests. Use as
// `server.set_socket_options(SetReuseAddressOnly)`.
void SetReuseAddressOnly(int socket);

}  // namespace spot
