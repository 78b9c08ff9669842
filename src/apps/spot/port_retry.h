// Starting a listener on a port picked ahead of time, which another process
// may have bound meanwhile (core/net.h, PickFreePort).
#pragma once

#include <spdlog/spdlog.h>

#include <functional>

#include "core/net.h"
#include "core/status.h"

namespace spot::cli {

// Starts a listener with start(port); when `port` is taken (Unavailable:
// `spot run` picks each instance's metrics port with PickFreePort, and
// another process may bind it before the instance starts), on another free
// port, up to three tries in all. The caller publishes the port it got.
template <typename T>
Result<T> StartOnPortOrAnother(int port, const std::function<Result<T>(int)>& start) {
  Result<T> got = start(port);
  for (int tries = 1; tries < 3 && port > 0 && got.status().code() == StatusCode::kUnavailable;
       ++tries) {
    Result<int> other = PickFreePort();
    if (!other.ok()) break;
    spdlog::warn("{}; listening on port {} instead", got.status().message(), *other);
    port = *other;
    got = start(port);
  }
  return got;
}

}  // namespace spot::cli
