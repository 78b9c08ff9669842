#include "core/net.h"

#include <gtest/gtest.h>

namespace spot {
namespace {

TEST(NetTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.0.0.2", "127.255.255.254", "localhost", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "example.com", "", "127.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

}  // namespace
}  // namespace spot
