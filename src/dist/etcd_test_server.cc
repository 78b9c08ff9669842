#include "dist/etcd_test_server.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/net.h"
#include "core/process.h"
#include "dist/etcd_kv_store.h"

namespace spot::dist {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";
constexpr int kStartAttempts = 3;  // a picked port can be taken before etcd binds it

// Member `name` of the cluster `initial` ("m0=http://...,m1=...").
std::vector<std::string> EtcdArgs(const std::string& name, const std::string& data_dir,
                                  const std::string& client, const std::string& peer,
                                  const std::string& initial, bool alone) {
  return {kEtcd, "--name=" + name, "--data-dir=" + data_dir, "--listen-client-urls=" + client,
          "--advertise-client-urls=" + client, "--listen-peer-urls=" + peer,
          "--initial-advertise-peer-urls=" + peer, "--initial-cluster=" + initial,
          "--initial-cluster-state=new", "--initial-cluster-token=spot-test",
          // A single member elects itself in ~0.1 s instead of ~1 s; members of
          // a cluster get timings loose enough that busy test machines do not
          // hold spurious elections.
          alone ? "--heartbeat-interval=10" : "--heartbeat-interval=50",
          alone ? "--election-timeout=100" : "--election-timeout=500"};
}

// etcd's output replaces the log; it dies with the thread that started it.
Result<pid_t> SpawnEtcd(const std::vector<std::string>& argv, const std::string& log) {
  SPOT_ASSIGN_OR_RETURN(int64_t pid, Spawn({.argv = argv,
                                            .log_path = log,
                                            .truncate = true,
                                            .group = ProcessGroup::kInherit,
                                            .parent_death_signal = SIGKILL}));
  return static_cast<pid_t>(pid);
}

}  // namespace

bool EtcdTestServer::Installed() { return ::access(kEtcd, X_OK) == 0; }

Result<std::unique_ptr<EtcdTestServer>> EtcdTestServer::Start(
    std::chrono::milliseconds ready_timeout) {
  SPOT_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<EtcdTestServer>> one,
                        StartCluster(1, ready_timeout));
  return std::move(one.front());
}

Result<std::vector<std::unique_ptr<EtcdTestServer>>> EtcdTestServer::StartCluster(
    int members, std::chrono::milliseconds ready_timeout) {
  if (!Installed()) {
    return FailedPreconditionError(fmt::format(
        "{} is not installed: run scripts/install-deps.sh (Debian etcd-server)", kEtcd));
  }
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    struct Planned {
      TempDir dir;
      std::string client, peer;
    };
    std::vector<Planned> plan;
    std::string initial;
    for (int m = 0; m < members; ++m) {
      SPOT_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("spot-etcd"));
      SPOT_ASSIGN_OR_RETURN(int client_port, PickFreePort());
      SPOT_ASSIGN_OR_RETURN(int peer_port, PickFreePort());
      plan.push_back({std::move(dir), fmt::format("http://127.0.0.1:{}", client_port),
                      fmt::format("http://127.0.0.1:{}", peer_port)});
      initial += fmt::format("{}m{}={}", m == 0 ? "" : ",", m, plan.back().peer);
    }
    std::vector<std::unique_ptr<EtcdTestServer>> cluster;
    for (int m = 0; m < members; ++m) {
      Planned& p = plan[m];
      std::string data = (p.dir.path() / "data").string();
      std::string log = (p.dir.path() / "etcd.log").string();
      SPOT_ASSIGN_OR_RETURN(
          pid_t pid, SpawnEtcd(EtcdArgs(fmt::format("m{}", m), data, p.client, p.peer, initial,
                                        /*alone=*/members == 1),
                               log));
      cluster.emplace_back(new EtcdTestServer(std::move(p.dir), p.client, pid));
    }
    bool hung = false;
    last = Status::Ok();
    for (auto& member : cluster) {
      last = member->WaitReady(ready_timeout);
      if (!last.ok()) {
        hung = !member->reaped_;
        break;
      }
    }
    if (last.ok()) return cluster;
    if (hung) break;  // rather than exited (e.g. on a taken port): another try would hang too
  }
  return last;
}

void EtcdTestServer::Kill() {
  if (!reaped_) (void)StopProcess(pid_, /*grace_s=*/0);
  reaped_ = true;
}

Result<EtcdTestServer*> EtcdTestServer::Shared() {
  static std::mutex mu;
  static std::unique_ptr<EtcdTestServer> server;  // destroyed (etcd killed) at exit
  static Status failed;
  static bool tried = false;
  std::lock_guard<std::mutex> l(mu);
  if (!tried) {
    tried = true;
    Result<std::unique_ptr<EtcdTestServer>> started = Start();
    if (started.ok()) server = std::move(started).value();
    if (!started.ok()) failed = started.status();
  }
  if (server) return server.get();
  return failed;
}

EtcdTestServer::~EtcdTestServer() {
  if (!reaped_) (void)StopProcess(pid_, /*grace_s=*/0);
}

std::string EtcdTestServer::log_path() const { return (dir_.path() / "etcd.log").string(); }

Status EtcdTestServer::WaitReady(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // A range answers only once etcd has elected itself leader. (Not httplib
  // here: this file is built without the library's compile definitions.)
  EtcdOptions options;
  options.endpoint = endpoint_;
  options.key_prefix = "/spot-etcd-test-server/";
  options.request_timeout = std::chrono::milliseconds(500);
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<KvStore> probe, NewEtcdKvStore(options));
  while (std::chrono::steady_clock::now() < deadline) {
    if (ProcessStatus s = CheckProcess(pid_); !s.running) {
      reaped_ = true;
      return UnavailableError(fmt::format("etcd {} during start: {}", DescribeExit(s), LogTail()));
    }
    if (probe->Get("ready").ok()) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return UnavailableError(
      fmt::format("etcd at {} not ready after {} ms: {}", endpoint_, timeout.count(), LogTail()));
}

std::string EtcdTestServer::LogTail() const {
  std::ifstream f(log_path(), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string all = ss.str();
  constexpr size_t kTail = 1500;
  return all.size() > kTail ? all.substr(all.size() - kTail) : all;
}

}  // namespace spot::dist
