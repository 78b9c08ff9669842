// Address checks shared by the loopback-only servers (the controller's API,
// a worker's /metrics).
#pragma once

#include <string>

namespace spot {

// True for "localhost", "::1" and any IPv4 address in 127.0.0.0/8.
bool IsLoopbackHost(const std::string& host);

}  // namespace spot
