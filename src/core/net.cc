#include "core/net.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace spot
