// End-to-end tests of `spot worker --rendezvous tcp://...` pointed at
// listeners that are not a rendezvous store (issue 20): a socket that accepts
// and never answers, an HTTP server, a socket that sends garbage, a store
// that stops answering. The worker
// must give up within distributed.rendezvous_timeout_s with an error naming
// the address, and SIGTERM must end it at once while it waits.
#include <signal.h>

#include <chrono>
#include <thread>
#include <vector>

#include "apps/spot/elastic_e2e_support.h"
#include "dist/fake_listener_testing.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class WorkerTest : public E2eTest {
 protected:
  std::vector<std::string> WorkerArgs(const std::string& url, double rendezvous_timeout_s) {
    fs::path job = WriteJob(
        "job", ElasticJobYaml(dir_ / "run", 1, 320,
                              fmt::format("  rendezvous_timeout_s: {}\n", rendezvous_timeout_s)));
    return {SPOT_BIN, "worker", job.string(), "--rendezvous", url, "--id", "w1", "--plain"};
  }
};

// `spot rendezvous --port 0 --port-file F` (how `spot run` starts it): F
// names the port it listens on, written once listening, and a worker joins
// there.
TEST_F(WorkerTest, TheRendezvousWritesThePortItGotToItsPortFile) {
  const fs::path port_file = dir_ / "rendezvous.port";
  ChildProcess store({SPOT_BIN, "rendezvous", "--port", "0", "--port-file", port_file.string()},
                     (dir_ / "store").string());
  std::string url = StartRendezvous(store, dir_ / "store.out");
  ASSERT_FALSE(url.empty()) << "spot rendezvous did not start";
  auto text = ReadFile(port_file.string());
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ("tcp://127.0.0.1:" + *text, url + "\n");
  ChildProcess worker(WorkerArgs(url, 30), (dir_ / "worker").string());
  ProcessResult r = worker.Wait(/*timeout_s=*/120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A port file that cannot be written ends it at once, naming the option.
TEST_F(WorkerTest, AnUnwritablePortFileEndsTheRendezvous) {
  ProcessResult r =
      Spot({"rendezvous", "--port", "0", "--port-file", (dir_ / "no" / "such" / "port").string()},
           "bad-port-file");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--port-file"), std::string::npos) << r.err;
}

class WorkerRendezvousTest : public WorkerTest, public ::testing::WithParamInterface<Listener> {};

// Before the fix the worker blocked in c10d::TCPStore::check forever.
TEST_P(WorkerRendezvousTest, GivesUpWithinTheRendezvousTimeoutNamingTheAddress) {
  FakeListener listener(GetParam());
  const auto t0 = Clock::now();
  ChildProcess worker(WorkerArgs(listener.url(), 3), (dir_ / "worker").string());
  ProcessResult r = worker.Wait(/*timeout_s=*/60);  // killed (and failed) if it hangs
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.term_signal, 0) << "still waiting after 60 s; stderr:\n" << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("rendezvous " + listener.url() + " did not answer as a rendezvous"),
            std::string::npos)
      << r.err;
  EXPECT_GE(listener.accepted(), 1);
  // 3 s of waiting at most, plus the start of a LibTorch binary on a busy machine.
  EXPECT_LT(took, 30) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Listeners, WorkerRendezvousTest,
                         ::testing::Values(Listener::kSilent, Listener::kHttp, Listener::kGarbage),
                         [](const ::testing::TestParamInfo<Listener>& p) {
                           switch (p.param) {
                             case Listener::kSilent:
                               return "Silent";
                             case Listener::kHttp:
                               return "Http";
                             case Listener::kGarbage:
                               return "Garbage";
                             case Listener::kStoreThenSilent:
                               return "StoreThenSilent";
                           }
                           return "Unknown";
                         });

// A store that answers the probe and the client's first wait, then nothing:
// every later call gives up at the rendezvous timeout instead of hanging.
TEST_F(WorkerTest, AStoreThatStopsAnsweringEndsTheWorkerWithinTheTimeout) {
  FakeListener listener(Listener::kStoreThenSilent);
  ChildProcess worker(WorkerArgs(listener.url(), 3), (dir_ / "worker").string());
  ProcessResult r = worker.Wait(/*timeout_s=*/60);
  EXPECT_EQ(r.term_signal, 0) << "still waiting after 60 s; stderr:\n" << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("rendezvous"), std::string::npos) << r.err;
  EXPECT_GE(listener.swallowed(), 1) << r.err;
}

// Waiting on a silent listener for up to 120 s, the worker still ends at once
// on SIGTERM, non-zero, saying what it was waiting for.
TEST_F(WorkerTest, SigtermEndsAWorkerWaitingForASilentListener) {
  FakeListener listener(Listener::kSilent);
  ChildProcess worker(WorkerArgs(listener.url(), 120), (dir_ / "worker").string());
  const auto connect_deadline = Clock::now() + std::chrono::seconds(60);
  while (listener.accepted() == 0 && worker.Running() && Clock::now() < connect_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(listener.accepted(), 1) << "the worker never connected";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the wait for a reply
  ASSERT_TRUE(worker.Running());
  // A peer's death must reach Gloo's writev as EPIPE, not end the worker by
  // SIGPIPE: the worker ignores it.
  worker.Kill(SIGPIPE);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(worker.Running()) << "SIGPIPE ended the worker";
  const auto t0 = Clock::now();
  worker.Kill(SIGTERM);
  ProcessResult r = worker.Wait(/*timeout_s=*/30);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.term_signal, 0) << "SIGTERM did not end it within 30 s; stderr:\n" << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("while waiting for rendezvous " + listener.url()), std::string::npos)
      << r.err;
  EXPECT_LT(took, 5) << r.err;  // promptly: it polls for the signal every 50 ms
}

}  // namespace
}  // namespace spot::testing
