// Test helper: clients that misbehave against an HTTP server on 127.0.0.1.
// Slow-loris clients send the start of a request one byte at a time and never
// finish its headers; idle clients connect and send nothing. A background
// thread feeds the slow ones and notices when the server closes any of them.
// Not for production code; not thread-safe apart from the counters.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace spot::testing {

class BadClients {
 public:
  // `byte_every`: how often each slow client sends its next byte.
  explicit BadClients(int port, std::chrono::milliseconds byte_every = std::chrono::seconds(1))
      : port_(port), every_(byte_every), thread_([this] { Run(); }) {}
  ~BadClients() {
    stop_ = true;
    thread_.join();
    for (const Client& c : clients_) {
      if (c.fd >= 0) ::close(c.fd);
    }
  }
  BadClients(const BadClients&) = delete;
  BadClients& operator=(const BadClients&) = delete;

  // Open `n` connections of each kind; false when one cannot connect.
  bool OpenSlow(int n) { return Open(n, /*slow=*/true); }
  bool OpenIdle(int n) { return Open(n, /*slow=*/false); }

  // How many of each kind the server has closed so far.
  int slow_closed() const { return slow_closed_.load(); }
  int idle_closed() const { return idle_closed_.load(); }
  // Bytes the slow clients have sent in all.
  int slow_bytes_sent() const { return slow_bytes_.load(); }

 private:
  // Never ends its headers: no empty line.
  static constexpr std::string_view kSlowRequest =
      "GET /api/v1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

  struct Client {
    int fd = -1;
    bool slow = false;
    size_t sent = 0;
    std::chrono::steady_clock::time_point next{};
  };

  bool Open(int n, bool slow) {
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(port_));
      if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        if (fd >= 0) ::close(fd);
        return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      clients_.push_back({.fd = fd, .slow = slow});
    }
    return true;
  }

  void Run() {
    while (!stop_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (Client& c : clients_) Serve(c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Sends a slow client's next byte when due; notices a close by the server.
  void Serve(Client& c) {
    if (c.fd < 0) return;
    const auto now = std::chrono::steady_clock::now();
    bool closed = false;
    if (c.slow && now >= c.next && c.sent < kSlowRequest.size()) {
      closed = ::send(c.fd, kSlowRequest.data() + c.sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
               errno != EAGAIN;
      ++c.sent;
      ++slow_bytes_;
      c.next = now + every_;
    }
    pollfd p{c.fd, POLLIN, 0};
    if (!closed && ::poll(&p, 1, 0) > 0) {
      char buf[512];
      ssize_t r = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);  // a 400 or 503, then EOF
      closed = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
    }
    if (!closed) return;
    ::close(c.fd);
    c.fd = -1;
    ++(c.slow ? slow_closed_ : idle_closed_);
  }

  const int port_;
  const std::chrono::milliseconds every_;
  std::mutex mu_;
  std::vector<Client> clients_;  // GUARDED_BY(mu_)
  std::atomic<bool> stop_{false};
  std::atomic<int> slow_closed_{0}, idle_closed_{0}, slow_bytes_{0};
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace spot::testing
