#include "monitor/http_guard.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "monitor/bad_clients_testing.h"

namespace spot::monitor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::BadClients;

// A guarded server on 127.0.0.1 answering GET / with `handler`.
class ServerOnLoopback {
 public:
  ServerOnLoopback(const HttpGuardOptions& options, httplib::Server::Handler handler)
      : server_(NewGuardedHttpServer(options)) {
    server_->Get("/", std::move(handler));
    port_ = BindGuardedHttpServer(*server_, "127.0.0.1", 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::sleep_for(milliseconds(1));
  }
  ~ServerOnLoopback() {
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

void Ok(const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); }

// One GET / on a new connection, with 5 s to connect and 5 s to answer.
httplib::Result Get(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(seconds(5));
  client.set_read_timeout(seconds(5));
  return client.Get("/");
}

// Waits up to `timeout` for `done`.
bool WaitFor(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

TEST(HttpGuardTest, ServesRequestsOnKeptAliveConnections) {
  ServerOnLoopback server({}, Ok);
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  client.set_read_timeout(seconds(5));
  for (int i = 0; i < 5; ++i) {
    auto r = client.Get("/");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "ok");
  }
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

// Slow-loris clients (a header byte at a time, never the end of the headers)
// take a connection each but cannot hold it past the request timeout, and
// requests on other connections are answered meanwhile.
TEST(HttpGuardTest, SlowClientsAreClosedAtTheRequestTimeoutWhileOthersAreServed) {
  ServerOnLoopback server({.request_timeout = seconds(1)}, Ok);
  BadClients bad(server.port(), milliseconds(200));
  ASSERT_TRUE(bad.OpenSlow(10));
  ASSERT_TRUE(WaitFor([&] { return bad.slow_bytes_sent() >= 20; }, seconds(10)));
  for (int i = 0; i < 3; ++i) {
    auto r = Get(server.port());
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_TRUE(WaitFor([&] { return bad.slow_closed() == 10; }, seconds(20)))
      << bad.slow_closed() << " of 10 slow clients closed";
}

// More idle connections than the cap: each newcomer closes the connection
// that has waited longest for a request, so a real request still gets in.
TEST(HttpGuardTest, AnIdleCrowdBeyondTheCapMakesRoomForRequests) {
  ServerOnLoopback server({.max_connections = 4, .idle_timeout = seconds(60)}, Ok);
  BadClients bad(server.port());
  ASSERT_TRUE(bad.OpenIdle(20));
  // 4 stay open; the other 16 were closed to make room (or refused).
  ASSERT_TRUE(WaitFor([&] { return bad.idle_closed() >= 16; }, seconds(20)))
      << bad.idle_closed() << " of 20 idle clients closed";
  for (int i = 0; i < 3; ++i) {
    auto r = Get(server.port());
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
  }
  // The first request closed one more to get in.
  EXPECT_TRUE(WaitFor([&] { return bad.idle_closed() >= 17; }, seconds(20)));
}

// When every connection is busy in a handler nothing can be closed: a new
// connection gets 503 at once instead of waiting.
TEST(HttpGuardTest, BusyHandlersAtTheCapGetA503) {
  std::mutex mu;
  std::condition_variable cv;
  int inside = 0;
  bool release = false;
  ServerOnLoopback server({.max_connections = 2},
                          [&](const httplib::Request&, httplib::Response& res) {
                            std::unique_lock<std::mutex> lock(mu);
                            ++inside;
                            cv.notify_all();
                            cv.wait(lock, [&] { return release; });
                            res.set_content("ok", "text/plain");
                          });
  std::thread a([&] { EXPECT_TRUE(Get(server.port())); });
  std::thread b([&] { EXPECT_TRUE(Get(server.port())); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, seconds(10), [&] { return inside == 2; }));
  }
  auto busy = Get(server.port());
  ASSERT_TRUE(busy) << httplib::to_string(busy.error());
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_EQ(busy->body, "busy: too many connections\n");
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  a.join();
  b.join();
  auto again = Get(server.port());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

}  // namespace
}  // namespace spot::monitor
