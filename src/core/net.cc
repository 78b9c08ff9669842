#include "core/net.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

namespace spot {

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr addr{};
  if (inet_pton(AF_INET, host.c_str(), &addr) != 1) return false;
  return (ntohl(addr.s_addr) >> 24) == 127;
}

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

Status CheckListenAddress(std::string_view what, const std::string& host, int port,
                          bool reachable_from_network) {
  if (reachable_from_network) {
    if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
      return InvalidArgumentError(
          fmt::format("{}: host \"{}\" listens on every address; name one address", what, host));
    }
  } else if (!IsLoopbackHost(host)) {
    return InvalidArgumentError(fmt::format(
        "{}: host \"{}\" is not a loopback address (127.x.x.x, ::1 or localhost)", what, host));
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(fmt::format("{}: port {} out of range", what, port));
  }
  return Status::Ok();
}

void SetReuseAddressOnly(int socket) {
  int yes = 1;
  ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

Result<int> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return UnavailableError("no free port on 127.0.0.1: " + err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

PortRange EphemeralPortRange() {
  PortRange r;
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0, last = 0;
  if (in >> first >> last && first > 0 && first <= last && last <= 65535) r = {first, last};
  return r;
}

namespace {

// True when `port` can be bound on every address right now: a dual-stack
// IPv6 wildcard socket, or the IPv4 wildcard where IPv6 is off.
bool FreeOnEveryAddress(int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a6), sizeof(a6)) == 0;
    ::close(fd);
    return ok;
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a4), sizeof(a4)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

Result<int> PickListenPort(PortRange range) {
  constexpr int kLowest = 1024;
  if (range.first - kLowest >= 1024) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, range.first - 1);
    for (int tries = 0; tries < 64; ++tries) {
      const int port = pick(rng);
      if (FreeOnEveryAddress(port)) return port;
    }
  }
  return PickFreePort();
}

}  // namespace spot
