#include "monitor/http_guard.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace spot::monitor {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Several requests on one connection (keep-alive), then it is closed.
constexpr size_t kRequestsPerConnection = 100;
constexpr int kListenBacklog = 128;
// Connections closed to make room still hold a thread until it notices: at
// most this many times max_connections in all.
constexpr size_t kClosingFactor = 4;

constexpr std::string_view kBusyBody = "busy: too many connections\n";
constexpr std::string_view kBusyReply =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 27\r\n"
    "Retry-After: 1\r\nConnection: close\r\n\r\nbusy: too many connections\n";
static_assert(kBusyBody.size() == 27 && kBusyReply.ends_with(kBusyBody));

// The socket the accept thread just accepted: cpp-httplib hands the task
// queue an opaque closure; run on the accept thread it only leaves its socket
// here, so that admission can see and close connections.
thread_local int t_accepted = -1;

int PollMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp(left, milliseconds(0), milliseconds(60'000)).count());
}

bool ReadyNow(int fd, short events) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, 0) > 0;
}

void IpAndPort(const sockaddr_storage& a, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

// Answers 503 on a connection it did not admit, and closes it.
void Refuse(int sock) {
  (void)::send(sock, kBusyReply.data(), kBusyReply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  // What the client sent already: closing with it unread would reset the
  // connection, and the client might lose the 503.
  char drain[4096];
  for (int i = 0; i < 16 && ::recv(sock, drain, sizeof(drain), MSG_DONTWAIT) > 0; ++i) {
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// One client connection, from its admission to its close.
struct Connection {
  int fd = -1;
  // Bytes received and not yet consumed: they may begin the next request.
  std::array<char, 4096> buf{};
  size_t off = 0, len = 0;
  // Under GuardedServer::mu_: when it began waiting for its current request,
  // whether it waits for the client now (true from its admission until its
  // thread first looks), and whether it was closed to make room.
  Clock::time_point request_began = Clock::now();
  bool waiting = true;
  bool evicted = false;
};

class GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(const HttpGuardOptions& options);

  // cpp-httplib listens with a backlog of 5: a burst of connections while
  // the accept thread waits for a CPU overflows it, and each dropped SYN
  // costs its client a second. Listening again only raises the backlog. On
  // the binding thread, before the accept thread starts (from the accept
  // thread it would race a stop() that closes the socket, whose number
  // another open may then reuse).
  void RaiseBacklog() { ::listen(svr_sock_, kListenBacklog); }

  // Accept thread: takes the socket that process_and_close_socket was
  // just handed, or -1.
  static int TakeAccepted() { return std::exchange(t_accepted, -1); }
  // Accept thread: registers a new connection, closing the one that has
  // waited longest for its request when full. nullptr when there is no room
  // (it was answered 503 and closed).
  Connection* Admit(int sock);
  // A connection's own thread: serves it until it closes, then deletes it.
  void Serve(Connection* c);
  // Closes and deletes an admitted connection (Serve does it at the end).
  void Close(Connection* c);

  // Waits until the client has sent something (true), the deadline passes or
  // the server stops (false).
  bool WaitForInput(Connection& c, Clock::time_point deadline);
  bool WaitForOutput(int fd);

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool Stopped() const { return svr_sock_ == INVALID_SOCKET; }
  void SetWaiting(Connection& c, bool waiting);
  void BeginRequest(Connection& c);
  bool MakeRoom();  // REQUIRES: mu_ held

  const HttpGuardOptions opt_;
  std::mutex mu_;
  std::vector<Connection*> conns_;  // admitted and not closed; GUARDED_BY(mu_)
  size_t evicted_ = 0;              // of those, closed to make room; GUARDED_BY(mu_)
};

// One request's reads and writes: every read must come before the request's
// deadline; buffered bytes stay with the connection.
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(GuardedServer& server, Connection& c, Clock::time_point deadline)
      : server_(server), c_(c), deadline_(deadline) {}

  bool timed_out() const { return timed_out_; }

  bool is_readable() const override {
    return c_.off < c_.len || server_.WaitForInput(c_, deadline_);
  }
  bool is_writable() const override { return server_.WaitForOutput(c_.fd); }
  ssize_t read(char* ptr, size_t size) override {
    while (c_.off == c_.len) {
      if (!server_.WaitForInput(c_, deadline_)) {
        timed_out_ = Clock::now() >= deadline_;
        return -1;
      }
      ssize_t n = ::recv(c_.fd, c_.buf.data(), c_.buf.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) return n;
      c_.off = 0;
      c_.len = static_cast<size_t>(n);
    }
    size_t n = std::min(size, c_.len - c_.off);
    std::memcpy(ptr, c_.buf.data() + c_.off, n);
    c_.off += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(c_.fd, ptr, size, MSG_NOSIGNAL);  // bounded by SO_SNDTIMEO
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (::getpeername(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) IpAndPort(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (::getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) IpAndPort(a, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

 private:
  GuardedServer& server_;
  Connection& c_;
  const Clock::time_point deadline_;
  bool timed_out_ = false;
};

// A thread per admitted connection; admission runs on the accept thread.
// shutdown() joins them all.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(GuardedServer* server) : server_(server) {}

  void enqueue(std::function<void()> fn) override {
    fn();  // hands over the socket, see t_accepted
    Connection* c = server_->Admit(GuardedServer::TakeAccepted());
    if (c == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    JoinFinished();
    const uint64_t id = next_id_++;
    try {
      threads_.emplace(id, std::thread([this, id, c] {
                         server_->Serve(c);
                         std::lock_guard<std::mutex> l(mu_);
                         finished_.push_back(id);
                         cv_.notify_all();
                       }));
    } catch (const std::system_error&) {
      server_->Close(c);  // no thread to be had
    }
  }

  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    while (!threads_.empty()) {
      cv_.wait(lock, [&] { return !finished_.empty(); });
      JoinFinished();
    }
  }

 private:
  // REQUIRES: mu_ held. A finished thread no longer needs mu_.
  void JoinFinished() {
    for (uint64_t id : finished_) {
      auto it = threads_.find(id);
      it->second.join();
      threads_.erase(it);
    }
    finished_.clear();
  }

  GuardedServer* const server_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 0;                     // GUARDED_BY(mu_)
  std::map<uint64_t, std::thread> threads_;  // GUARDED_BY(mu_)
  std::vector<uint64_t> finished_;           // GUARDED_BY(mu_)
};

GuardedServer::GuardedServer(const HttpGuardOptions& options) : opt_(options) {
  new_task_queue = [this] { return new ConnectionThreads(this); };
  // Only the accepted sockets' SO_RCVTIMEO/SO_SNDTIMEO come from these: the
  // waits above poll against their own deadlines.
  set_read_timeout(opt_.request_timeout);
  set_write_timeout(opt_.write_timeout);
}

Connection* GuardedServer::Admit(int sock) {
  if (sock < 0) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (conns_.size() - evicted_ < opt_.max_connections || MakeRoom()) {
      auto* c = new Connection{.fd = sock};
      conns_.push_back(c);
      return c;
    }
  }
  Refuse(sock);
  return nullptr;
}

// Closes the connection that has waited longest for a request that has not
// (fully) come, unless too many closed ones still hold their threads.
bool GuardedServer::MakeRoom() {
  if (conns_.size() >= kClosingFactor * opt_.max_connections) return false;
  Connection* oldest = nullptr;
  for (Connection* c : conns_) {
    if (c->waiting && !c->evicted && (!oldest || c->request_began < oldest->request_began)) {
      oldest = c;
    }
  }
  if (oldest == nullptr) return false;
  oldest->evicted = true;
  ++evicted_;
  ::shutdown(oldest->fd, SHUT_RDWR);  // wakes its thread, which closes it
  return true;
}

// Unregisters before closing, so that Admit never shuts down a reused fd.
void GuardedServer::Close(Connection* c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(conns_, c);
    if (c->evicted) --evicted_;
  }
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
  delete c;
}

void GuardedServer::SetWaiting(Connection& c, bool waiting) {
  std::lock_guard<std::mutex> lock(mu_);
  c.waiting = waiting;
}

void GuardedServer::BeginRequest(Connection& c) {
  std::lock_guard<std::mutex> lock(mu_);
  c.request_began = Clock::now();
}

bool GuardedServer::WaitForInput(Connection& c, Clock::time_point deadline) {
  if (ReadyNow(c.fd, POLLIN)) return true;
  SetWaiting(c, true);
  bool ready = false;
  while (!ready && Clock::now() < deadline) {
    pollfd p{c.fd, POLLIN, 0};
    int r = ::poll(&p, 1, PollMs(deadline));
    if (r < 0 && errno != EINTR) break;
    ready = r > 0;
  }
  SetWaiting(c, false);
  return ready;
}

bool GuardedServer::WaitForOutput(int fd) {
  const auto deadline = Clock::now() + opt_.write_timeout;
  while (true) {
    pollfd p{fd, POLLOUT, 0};
    int r = ::poll(&p, 1, PollMs(deadline));
    if (r > 0) return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
    if ((r < 0 && errno != EINTR) || Clock::now() >= deadline) return false;
  }
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  t_accepted = sock;
  return true;
}

// Once the server stops, a connection still answers the request it is
// reading or the next one that comes within idle_timeout, as cpp-httplib's
// own server does: a page polling the last state of a job that just ended
// gets it while its controller shuts down.
void GuardedServer::Serve(Connection* c) {
  SetWaiting(*c, false);
  for (size_t left = kRequestsPerConnection; left > 0 && !Stopped(); --left) {
    BeginRequest(*c);
    if (c->off == c->len && !WaitForInput(*c, Clock::now() + opt_.idle_timeout)) break;
    GuardedStream stream(*this, *c, Clock::now() + opt_.request_timeout);
    bool closed = false;
    bool ok = process_request(stream, /*close_connection=*/left == 1, closed, nullptr);
    if (!ok || closed || stream.timed_out()) break;
  }
  Close(c);
}

}  // namespace

std::unique_ptr<httplib::Server> NewGuardedHttpServer(const HttpGuardOptions& options) {
  HttpGuardOptions o = options;
  o.max_connections = std::max<size_t>(o.max_connections, 1);
  for (milliseconds* t : {&o.request_timeout, &o.idle_timeout, &o.write_timeout}) {
    *t = std::max(*t, milliseconds(1));
  }
  return std::make_unique<GuardedServer>(o);
}

int BindGuardedHttpServer(httplib::Server& server, const std::string& host, int port) {
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound > 0) {
    if (auto* g = dynamic_cast<GuardedServer*>(&server)) g->RaiseBacklog();
  }
  return bound;
}

}  // namespace spot::monitor
