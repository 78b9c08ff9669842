// Test helper: TCP listeners on 127.0.0.1 that are not a working rendezvous
// store, for the tests of what a worker does when pointed at one (issue 20).
//   kSilent            accepts and reads, never writes;
//   kHttp              answers whatever arrives as an HTTP server answers a
//                      request it cannot parse, then closes;
//   kGarbage           sends random bytes on accept and every 100 ms after;
//   kStoreThenSilent   speaks enough of LibTorch 1.13's TCPStore protocol to
//                      pass the probe and a client's first wait (SET, GET,
//                      WAIT), then swallows every other query unanswered, as
//                      a store that hangs would.
// One thread serves all connections; the destructor closes them (which also
// ends a client blocked on one). Not for production code.
#pragma once

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace spot::testing {

enum class Listener { kSilent, kHttp, kGarbage, kStoreThenSilent };

class FakeListener {
 public:
  explicit FakeListener(Listener kind) : kind_(kind) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeListener() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (const Conn& c : conns_) {
      ::shutdown(c.fd, SHUT_RDWR);
      ::close(c.fd);
    }
    ::close(fd_);
  }
  FakeListener(const FakeListener&) = delete;
  FakeListener& operator=(const FakeListener&) = delete;

  int port() const { return port_; }
  std::string url() const { return fmt::format("tcp://127.0.0.1:{}", port_); }
  int accepted() const { return accepted_.load(); }
  // kStoreThenSilent: queries it left unanswered.
  int swallowed() const { return swallowed_.load(); }

 private:
  struct Conn {
    int fd;
    std::string in;       // bytes not yet parsed (kStoreThenSilent)
    bool silent = false;  // kStoreThenSilent: swallowing from now on
  };

  void Serve() {
    std::mt19937 rng(20);
    auto last_garbage = std::chrono::steady_clock::now();
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 20);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) Read(conns_[i - 1]);
      }
      if (fds[0].revents & POLLIN) Accept(rng);
      if (kind_ == Listener::kGarbage &&
          std::chrono::steady_clock::now() - last_garbage > std::chrono::milliseconds(100)) {
        for (const Conn& c : conns_) SendGarbage(c.fd, rng);
        last_garbage = std::chrono::steady_clock::now();
      }
      std::erase_if(conns_, [](const Conn& c) { return c.fd < 0; });
    }
  }
  void Accept(std::mt19937& rng) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    ++accepted_;
    conns_.push_back({.fd = fd});
    if (kind_ == Listener::kGarbage) SendGarbage(fd, rng);
  }
  void Read(Conn& c) {
    char buf[4096];
    ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0 && kind_ == Listener::kStoreThenSilent) {
      c.in.append(buf, static_cast<size_t>(n));
      while (!c.silent && Answer(c)) {
      }
      return;
    }
    if (n > 0 && kind_ != Listener::kHttp) return;
    if (n > 0) {
      static constexpr std::string_view kReply =
          "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
          "Connection: close\r\n\r\nBad Request";
      (void)::send(c.fd, kReply.data(), kReply.size(), MSG_NOSIGNAL);
    }
    ::close(c.fd);
    c.fd = -1;
  }
  static void SendGarbage(int fd, std::mt19937& rng) {
    std::string junk(64, '\0');
    for (char& b : junk) b = static_cast<char>(rng());
    (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  // Parses one whole query off c.in and answers it; false when it is not
  // all there yet or c went silent.
  bool Answer(Conn& c) {
    if (c.in.empty()) return false;
    size_t at = 1;
    auto sized = [&](std::string* out) {
      uint64_t n = 0;
      if (c.in.size() < at + sizeof(n)) return false;
      std::memcpy(&n, c.in.data() + at, sizeof(n));
      if (c.in.size() < at + sizeof(n) + n) return false;
      if (out != nullptr) *out = c.in.substr(at + sizeof(n), n);
      at += sizeof(n) + n;
      return true;
    };
    std::string key, value;
    switch (static_cast<uint8_t>(c.in[0])) {
      case kSet:
        if (!sized(&key) || !sized(&value)) return false;
        values_[key] = value;
        break;
      case kGet: {
        if (!sized(&key)) return false;
        std::string reply(sizeof(uint64_t), '\0');
        const uint64_t n = values_[key].size();
        std::memcpy(reply.data(), &n, sizeof(n));
        Send(c.fd, reply + values_[key]);
        break;
      }
      case kWait: {
        uint64_t keys = 0;
        if (c.in.size() < at + sizeof(keys)) return false;
        std::memcpy(&keys, c.in.data() + at, sizeof(keys));
        at += sizeof(keys);
        for (uint64_t i = 0; i < keys; ++i) {
          if (!sized(nullptr)) return false;
        }
        Send(c.fd, std::string(1, '\0'));  // STOP_WAITING
        break;
      }
      default:
        ++swallowed_;
        c.silent = true;
        return false;
    }
    c.in.erase(0, at);
    return true;
  }
  static void Send(int fd, const std::string& bytes) {
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  // LibTorch 1.13's TCPStore query types.
  static constexpr uint8_t kSet = 0, kGet = 2, kWait = 5;
  const Listener kind_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0}, swallowed_{0};
  std::vector<Conn> conns_;                    // the serving thread's only
  std::map<std::string, std::string> values_;  // likewise
  std::thread thread_;
};

}  // namespace spot::testing
