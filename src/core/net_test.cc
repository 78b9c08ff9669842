#include "core/net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spot {
namespace {

// Whether a TCP socket binds `port` on the IPv4 address `host` (host order).
bool Binds(int port, uint32_t host) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(host);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

TEST(NetTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.0.0.2", "127.255.255.254", "localhost", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "example.com", "", "127.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

// A listener's port for another process comes from below the kernel's
// ephemeral range, where no outgoing connection or bind to port 0 can take it
// before that process binds it, and is free on every address.
TEST(NetTest, PickListenPortStaysBelowTheEphemeralRange) {
  const PortRange range = EphemeralPortRange();
  EXPECT_GE(range.first, 1);
  EXPECT_LE(range.first, range.last);
  for (int i = 0; i < 20; ++i) {
    Result<int> port = PickListenPort();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    if (range.first >= 2048) {
      EXPECT_GE(*port, 1024);
      EXPECT_LT(*port, range.first);
    }
    EXPECT_TRUE(Binds(*port, INADDR_ANY)) << *port;
  }
  // A range that leaves no room below it: a port the kernel would give.
  Result<int> port = PickListenPort({.first = 1500, .last = 65000});
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_GT(*port, 0);
}

TEST(NetTest, PickFreePortGivesAPortWeCanBind) {
  Result<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
  EXPECT_TRUE(Binds(*port, INADDR_LOOPBACK)) << *port;
}

TEST(NetTest, HostPortBracketsIpv6) {
  EXPECT_EQ(HostPort("127.0.0.1", 80), "127.0.0.1:80");
  EXPECT_EQ(HostPort("::1", 8080), "[::1]:8080");
}

TEST(NetTest, ServersListenOnLoopbackOrOneNamedAddress) {
  EXPECT_TRUE(CheckListenAddress("API server", "127.0.0.1", 0, false).ok());
  Status st = CheckListenAddress("API server", "10.0.0.5", 80, false);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("API server: host \"10.0.0.5\" is not a loopback address"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(CheckListenAddress("API server", "10.0.0.5", 80, true).ok());
  for (const char* wildcard : {"", "0.0.0.0", "::", "[::]"}) {
    st = CheckListenAddress("metrics server", wildcard, 80, true);
    EXPECT_NE(st.message().find("listens on every address"), std::string::npos) << wildcard;
  }
  st = CheckListenAddress("metrics server", "127.0.0.1", 70000, false);
  EXPECT_NE(st.message().find("port 70000 out of range"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace spot
