// Test support: a real, single-member etcd (Debian etcd-server, /usr/bin/etcd)
// on 127.0.0.1, for tests of EtcdKvStore and of the processes that use it.
//
// Start() picks free client and peer ports, gives etcd a fresh temporary data
// directory and fast election settings, and returns once etcd answers
// a read (within a deadline). The destructor SIGKILLs etcd, reaps it and
// removes the data directory. etcd's output goes to log_path(), which is
// removed with it.
//
//   auto server = EtcdTestServer::Start();
//   if (!server.ok()) GTEST_SKIP() << server.status().ToString();
//   options.endpoint = (*server)->endpoint();
//
// etcd gets PR_SET_PDEATHSIG, so it also dies when the thread that called
// Start() exits (or the test process crashes): call Start() from a thread that
// outlives the server, e.g. the test's main thread.
//
// Thread safety: the accessors may be called from any thread; the destructor
// must not run concurrently with them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/temp_dir.h"

namespace spot::dist {

class EtcdTestServer {
 public:
  // FailedPrecondition (naming scripts/install-deps.sh) when /usr/bin/etcd is
  // not installed; Unavailable when etcd does not start or answer
  // within `ready_timeout` (the message then carries the end of its log).
  static Result<std::unique_ptr<EtcdTestServer>> Start(
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(10));

  // One server for the whole test process, started on first use (the first
  // result, server or error, is kept) and killed when the process exits.
  // Tests sharing it should use distinct key prefixes.
  static Result<EtcdTestServer*> Shared();

  // A cluster of `members` etcd members on 127.0.0.1, each a server as
  // Start()'s (its own ports, data directory and log; Start() is a cluster
  // of one), returned once every member answers a read. With several members
  // elections take ~0.5 s: a member's death is the cluster's business, not a
  // test's.
  static Result<std::vector<std::unique_ptr<EtcdTestServer>>> StartCluster(
      int members, std::chrono::milliseconds ready_timeout = std::chrono::seconds(20));

  // True when /usr/bin/etcd exists and is executable.
  static bool Installed();

  // SIGKILLs etcd now, as a crash would, and reaps it.
  void Kill();

  ~EtcdTestServer();
  EtcdTestServer(const EtcdTestServer&) = delete;
  EtcdTestServer& operator=(const EtcdTestServer&) = delete;

  // Client URL, "http://127.0.0.1:PORT".
  const std::string& endpoint() const { return endpoint_; }
  std::string log_path() const;
  pid_t pid() const { return pid_; }

 private:
  EtcdTestServer(TempDir dir, std::string endpoint, pid_t pid)
      : dir_(std::move(dir)), endpoint_(std::move(endpoint)), pid_(pid) {}
  // Polls with reads until one succeeds or the deadline; fails early if etcd exits.
  Status WaitReady(std::chrono::milliseconds timeout);
  std::string LogTail() const;

  TempDir dir_;
  std::string endpoint_;
  pid_t pid_;
  bool reaped_ = false;
};

}  // namespace spot::dist
