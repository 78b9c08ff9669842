// End-to-end tests of elastic training: real `spot` worker processes, killed
// with SIGKILL, joining mid-run, over the embedded store and over a real etcd.
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <random>
#include <regex>
#include <thread>

#include "apps/spot/elastic_e2e_support.h"
#include "core/file_io.h"
#include "dist/etcd_test_server.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ElasticTest : public E2eTest {
 protected:
  // Waits until the step log (written by rank 0) reaches `step`.
  bool WaitForStep(const fs::path& step_log, int64_t step, double timeout_s = 120) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (LastLoggedStep(step_log) < step) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      ::usleep(2000);
    }
    return true;
  }
  // pid of each worker id, from the event logs.
  std::map<std::string, int> Pids(const fs::path& dir) {
    std::map<std::string, int> pids;
    for (const json& e : ReadEvents(FilesEndingWith(dir, ".events.jsonl"))) {
      pids[e["id"]] = e["pid"];
    }
    return pids;
  }
  json Summary(const fs::path& out) {
    auto text = ReadFile((out / "summary.json").string());
    EXPECT_TRUE(text.ok());
    return text.ok() ? json::parse(*text) : json{};
  }
};

TEST_F(ElasticTest, KilledWorkersNeverSkipOrRepeatASampleAndSurvivorsFinish) {
  // 4 workers, 3 epochs of 3,200 images (300 steps); SIGKILL a random worker
  // at two random steps. The launcher declares each dead at once.
  fs::path out = dir_ / "run";
  // The first generation waits for all four, however slowly they start.
  fs::path job =
      WriteJob("job", ElasticJobYaml(out, 3, 3200, "  max_workers: 4\n  join_window_s: 60\n"));
  fs::path steps = dir_ / "steps.csv";
  fs::path logs = dir_ / "workers";
  ChildProcess launcher({SPOT_BIN, "train", job.string(), "--nproc", "4", "--plain", "--step-log",
                         steps.string(), "--log-dir", logs.string()},
                        (dir_ / "launcher").string());
  std::mt19937 rng(20261130);
  std::vector<int64_t> kill_at = {std::uniform_int_distribution<int64_t>(30, 120)(rng),
                                  std::uniform_int_distribution<int64_t>(150, 240)(rng)};
  std::set<std::string> killed;
  std::vector<int64_t> kill_ms;
  for (int64_t at : kill_at) {
    ASSERT_TRUE(WaitForStep(steps, at)) << "training did not reach step " << at;
    std::vector<std::pair<std::string, int>> alive;
    for (const auto& [id, pid] : Pids(logs)) {
      if (!killed.count(id)) alive.push_back({id, pid});
    }
    ASSERT_FALSE(alive.empty());
    auto victim = alive[std::uniform_int_distribution<size_t>(0, alive.size() - 1)(rng)];
    ::usleep(std::uniform_int_distribution<int>(0, 20000)(rng));  // anywhere in a step
    ASSERT_EQ(::kill(victim.second, SIGKILL), 0);
    kill_ms.push_back(NowMs());
    killed.insert(victim.first);
    std::cerr << fmt::format("  killed {} after step {}\n", victim.first, at);
  }
  ProcessResult r = launcher.Wait(300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("finished by 2 workers (2 lost)"), std::string::npos) << r.out;
  ExpectEverySampleOnce(ReadSampleLogs(FilesEndingWith(logs, ".samples.csv")), 3200, 300, 2);
  // Survivors re-formed well within the collective timeout after each kill.
  std::vector<json> events = ReadEvents(FilesEndingWith(logs, ".events.jsonl"));
  for (int64_t k : kill_ms) {
    int64_t first_after = std::numeric_limits<int64_t>::max();
    for (const json& e : events) {
      if (e["unix_ms"].get<int64_t>() >= k)
        first_after = std::min(first_after, e["unix_ms"].get<int64_t>());
    }
    ASSERT_NE(first_after, std::numeric_limits<int64_t>::max()) << "no generation after a kill";
    EXPECT_LT(first_after - k, 5000) << "re-forming took longer than the collective timeout";
    std::cerr << fmt::format("  re-formed {} ms after a kill\n", first_after - k);
  }
  // Members of a generation hold bitwise the same state once it is formed.
  std::map<int64_t, std::set<std::string>> hashes;
  for (const json& e : events) hashes[e["generation"]].insert(e["state_hash"].get<std::string>());
  for (const auto& [gen, hs] : hashes) EXPECT_EQ(hs.size(), 1u) << "generation " << gen;
  json s = Summary(out);
  EXPECT_EQ(s["steps"], 300);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.6);
}

TEST_F(ElasticTest, AJoinerGetsBitwiseTheSurvivorsStateWithoutARestart) {
  fs::path out = dir_ / "run";
  fs::path job = WriteJob("job", ElasticJobYaml(out, 4, 3200, "  max_workers: 3\n"));
  ChildProcess store({SPOT_BIN, "rendezvous", "--port", "0"}, (dir_ / "store").string());
  std::string url = StartRendezvous(store, dir_ / "store.out");
  ASSERT_FALSE(url.empty()) << "spot rendezvous did not start";
  fs::path steps = dir_ / "steps.csv";
  // The first two run slowed down, so the job is still running when the
  // third has started up.
  auto worker = [&](const std::string& id) {
    return std::vector<std::string>{SPOT_BIN,
                                    "worker",
                                    job.string(),
                                    "--rendezvous",
                                    url,
                                    "--id",
                                    id,
                                    "--threads",
                                    "1",
                                    "--step-log",
                                    steps.string(),
                                    "--slowdown",
                                    id == "c" ? "0" : "3",
                                    "--event-log",
                                    (dir_ / (id + ".events.jsonl")).string(),
                                    "--sample-log",
                                    (dir_ / (id + ".samples.csv")).string()};
  };
  ChildProcess a(worker("a"), (dir_ / "a").string());
  ChildProcess b(worker("b"), (dir_ / "b").string());
  ASSERT_TRUE(WaitForStep(steps, 60));
  ChildProcess c(worker("c"), (dir_ / "c").string());
  for (ChildProcess* p : {&a, &b, &c}) {
    ProcessResult r = p->Wait(300);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  std::vector<json> events = ReadEvents(FilesEndingWith(dir_, ".events.jsonl"));
  json joined;
  for (const json& e : events) {
    if (e["id"] == "c") joined = e;
    if (e["id"] == "c") break;
  }
  ASSERT_FALSE(joined.is_null()) << "the joiner never joined";
  EXPECT_GT(joined["step"].get<int64_t>(), 60) << "it joined the running job, not a fresh one";
  EXPECT_EQ(joined["world"], 3);
  EXPECT_GT(joined["bytes"].get<int64_t>(), 0) << "it received the state by broadcast";
  for (const json& e : events) {
    if (e["generation"] == joined["generation"]) {
      EXPECT_EQ(e["state_hash"], joined["state_hash"]) << e["id"] << " differs from the joiner";
      EXPECT_EQ(e["step"], joined["step"]);
    }
  }
  ExpectEverySampleOnce(ReadSampleLogs(FilesEndingWith(dir_, ".samples.csv")), 3200, 400, 0);
  EXPECT_EQ(Summary(out)["world"], 3);
  store.Kill(SIGTERM);
  EXPECT_EQ(store.Wait(30).exit_code, 0);
}

TEST_F(ElasticTest, EtcdBackendReformsWhenAKilledWorkersLeaseExpires) {
  auto etcd = dist::EtcdTestServer::Start();
  if (!etcd.ok()) GTEST_SKIP() << etcd.status().message();
  std::string url = "etcd://" + (*etcd)->endpoint().substr(std::string("http://").size());
  fs::path out = dir_ / "run";
  // All three in the first generation (it waits for max_workers however slowly
  // they start); last_call far away: the survivors can only go on once etcd
  // expires the dead worker's lease (2 s).
  fs::path job = WriteJob("job", ElasticJobYaml(out, 2, 3200,
                                                "  max_workers: 3\n  join_window_s: 60\n"
                                                "  last_call_s: 60\n"));
  fs::path steps = dir_ / "steps.csv";
  std::vector<std::unique_ptr<ChildProcess>> ws;
  for (std::string id : {"a", "b", "c"}) {
    ws.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{SPOT_BIN, "worker", job.string(), "--rendezvous", url, "--id", id,
                                 "--threads", "1", "--step-log", steps.string(), "--event-log",
                                 (dir_ / (id + ".events.jsonl")).string(), "--sample-log",
                                 (dir_ / (id + ".samples.csv")).string()},
        (dir_ / id).string()));
  }
  ASSERT_TRUE(WaitForStep(steps, 80));
  ws[1]->Kill(SIGKILL);
  int64_t killed_ms = NowMs();
  EXPECT_EQ(ws[1]->Wait().term_signal, SIGKILL);
  for (int i : {0, 2}) {
    ProcessResult r = ws[i]->Wait(300);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  int64_t reformed_ms = 0;
  for (const json& e : ReadEvents({dir_ / "a.events.jsonl"})) {
    if (e["world"] == 2) reformed_ms = e["unix_ms"];
  }
  ASSERT_GT(reformed_ms, 0) << "no two-worker generation";
  std::cerr << fmt::format("  re-formed {} ms after the kill\n", reformed_ms - killed_ms);
  EXPECT_GT(reformed_ms - killed_ms, 500) << "cannot be faster than the lease";
  EXPECT_LT(reformed_ms - killed_ms, 6000) << "lease TTL 2 s (+ etcd's rounding) exceeded";
  ExpectEverySampleOnce(ReadSampleLogs(FilesEndingWith(dir_, ".samples.csv")), 3200, 200, 1);
}

TEST_F(ElasticTest, ASlowerWorkerGetsASmallerShareOfTheBatch) {
  fs::path out = dir_ / "run";
  fs::path job = WriteJob(
      "job", ElasticJobYaml(out, 3, 3200,
                            "  min_workers: 2\n  balance: true\n  straggler_seconds: 0.3\n"));
  ChildProcess store({SPOT_BIN, "rendezvous", "--port", "0"}, (dir_ / "store").string());
  std::string url = StartRendezvous(store, dir_ / "store.out");
  ASSERT_FALSE(url.empty());
  auto worker = [&](const std::string& id, const char* slowdown) {
    return std::vector<std::string>{SPOT_BIN,
                                    "worker",
                                    job.string(),
                                    "--rendezvous",
                                    url,
                                    "--id",
                                    id,
                                    "--threads",
                                    "1",
                                    "--slowdown",
                                    slowdown,
                                    "--sample-log",
                                    (dir_ / (id + ".samples.csv")).string()};
  };
  ChildProcess fast(worker("fast", "0"), (dir_ / "fast").string());
  ChildProcess slow(worker("slow", "2"), (dir_ / "slow").string());
  ProcessResult fast_done = fast.Wait(300), slow_done = slow.Wait(300);
  EXPECT_EQ(fast_done.exit_code, 0);
  EXPECT_EQ(slow_done.exit_code, 0);
  // Rank 0, whichever it is, flags the slow worker as a straggler: more than
  // 2x slower than the other for 0.3 s (the run takes a few seconds).
  const std::string said = fast_done.err + slow_done.err;
  EXPECT_NE(said.find("straggler: rank"), std::string::npos) << said;
  EXPECT_NE(said.find("(slow) computes"), std::string::npos) << said;
  EXPECT_GE(Summary(out)["stragglers"].get<int>(), 1);
  // The split converges to equal step times. The slow worker takes 3x as
  // long for everything, including the fixed cost of a step, which for this
  // small model is much of it: its share ends well under a half (and may
  // shrink to a sample or two), while it still takes part.
  std::vector<SampleRecord> rs = ReadSampleLogs({dir_ / "slow.samples.csv"});
  ASSERT_GE(rs.size(), 100u);
  double share = 0;
  for (size_t i = rs.size() - 40; i < rs.size(); ++i) {
    share += static_cast<double>(rs[i].end - rs[i].begin) / (rs[i].batch_end - rs[i].batch_begin);
  }
  share /= 40;
  std::cerr << fmt::format("  slow worker's share of the batch: {:.3f}\n", share);
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 0.35);
  store.Kill(SIGTERM);
}

// Two "hosts" in network namespaces this test creates, joined by a veth pair.
class NetnsHosts {
 public:
  // `ip` commands log under `log_prefix`.
  explicit NetnsHosts(std::string log_prefix)
      : a_(fmt::format("spota{}", ::getpid())),
        b_(fmt::format("spotb{}", ::getpid())),
        log_(std::move(log_prefix)) {}
  ~NetnsHosts() {
    for (const std::string& ns : {a_, b_}) Ip({"netns", "del", ns});
  }
  // "" on success, else why the namespaces could not be made.
  std::string Create() {
    if (::geteuid() != 0) return "not root";
    if (::access(kIp, X_OK) != 0) return std::string(kIp) + " is missing (iproute2)";
    std::string va = "v" + a_, vb = "v" + b_;
    for (std::vector<std::string> cmd : std::vector<std::vector<std::string>>{
             {"netns", "add", a_},
             {"netns", "add", b_},
             {"link", "add", va, "type", "veth", "peer", "name", vb},
             {"link", "set", va, "netns", a_},
             {"link", "set", vb, "netns", b_},
             {"-n", a_, "addr", "add", "10.231.0.1/24", "dev", va},
             {"-n", b_, "addr", "add", "10.231.0.2/24", "dev", vb},
             {"-n", a_, "link", "set", va, "up"},
             {"-n", b_, "link", "set", vb, "up"},
             {"-n", a_, "link", "set", "lo", "up"},
             {"-n", b_, "link", "set", "lo", "up"}}) {
      if (int rc = Ip(cmd); rc != 0) {
        return fmt::format("`ip {}` failed ({})", fmt::join(cmd, " "), rc);
      }
    }
    return "";
  }
  // Takes host B's end of the link down.
  bool Cut() { return Ip({"-n", b_, "link", "set", "v" + b_, "down"}) == 0; }
  std::vector<std::string> In(bool host_a, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {kIp, "netns", "exec", host_a ? a_ : b_});
    return argv;
  }

 private:
  static constexpr const char* kIp = "/usr/sbin/ip";
  int Ip(std::vector<std::string> args) const {
    args.insert(args.begin(), kIp);
    return RunProcess(args, log_, 30).exit_code;
  }
  std::string a_, b_, log_;
};

TEST_F(ElasticTest, TwoHostsInNetworkNamespacesOneLinkCutTheOtherContinues) {
  NetnsHosts hosts((dir_ / "ip").string());
  if (std::string why = hosts.Create(); !why.empty()) {
    GTEST_SKIP() << "cannot create network namespaces here: " << why;
  }
  fs::path out = dir_ / "run";
  fs::path job = WriteJob("job", ElasticJobYaml(out, 6, 3200,
                                                "  collective_timeout_s: 3\n"
                                                "  rendezvous_timeout_s: 10\n"));
  ChildProcess store(
      hosts.In(true, {SPOT_BIN, "rendezvous", "--host", "10.231.0.1", "--port", "29411"}),
      (dir_ / "store").string());
  std::string url = StartRendezvous(store, dir_ / "store.out");
  ASSERT_EQ(url, "tcp://10.231.0.1:29411") << "spot rendezvous did not start in host A";
  fs::path steps = dir_ / "steps.csv";
  auto worker = [&](const std::string& id, const char* host) {
    return std::vector<std::string>{SPOT_BIN,
                                    "worker",
                                    job.string(),
                                    "--rendezvous",
                                    url,
                                    "--id",
                                    id,
                                    "--host",
                                    host,
                                    "--threads",
                                    "1",
                                    "--slowdown",
                                    "1",
                                    "--step-log",
                                    steps.string(),
                                    "--event-log",
                                    (dir_ / (id + ".events.jsonl")).string()};
  };
  ChildProcess a(hosts.In(true, worker("a", "10.231.0.1")), (dir_ / "a").string());
  ChildProcess b(hosts.In(false, worker("b", "10.231.0.2")), (dir_ / "b").string());
  ASSERT_TRUE(WaitForStep(steps, 60));
  ASSERT_TRUE(hosts.Cut());
  int64_t cut_ms = NowMs();
  ProcessResult ra = a.Wait(300);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  ProcessResult rb = b.Wait(120);
  EXPECT_NE(rb.exit_code, 0) << "host B cannot reach the rendezvous: it must give up";
  int64_t alone_ms = 0;
  for (const json& e : ReadEvents({dir_ / "a.events.jsonl"})) {
    if (e["world"] == 1 && e["unix_ms"].get<int64_t>() > cut_ms) alone_ms = e["unix_ms"];
  }
  ASSERT_GT(alone_ms, 0) << "host A never went on alone";
  std::cerr << fmt::format("  host A went on alone {} ms after the cut\n", alone_ms - cut_ms);
  // Collective timeout (3 s) + liveness (2 s) + slack.
  EXPECT_LT(alone_ms - cut_ms, 9000);
  EXPECT_EQ(Summary(out)["steps"], 600);
  store.Kill(SIGTERM);
}

TEST_F(ElasticTest, WhenNoWorkerSurvivesTheJobResumesFromItsCheckpoint) {
  fs::path out = dir_ / "run";
  // The first generation waits for both workers, however slowly they start
  // (on a loaded machine the second started after a 0.3 s join window, the
  // first trained alone, and only it was killed).
  fs::path job =
      WriteJob("job", ElasticJobYaml(out, 3, 3200, "  max_workers: 2\n  join_window_s: 60\n"));
  fs::path steps = dir_ / "steps.csv";
  fs::path logs = dir_ / "workers";
  {
    ChildProcess first({SPOT_BIN, "train", job.string(), "--nproc", "2", "--plain", "--step-log",
                        steps.string(), "--log-dir", logs.string()},
                       (dir_ / "first").string());
    ASSERT_TRUE(WaitForStep(steps, 130));
    const std::map<std::string, int> pids = Pids(logs);
    ASSERT_EQ(pids.size(), 2u) << "both workers train by step 130";
    for (const auto& [id, pid] : pids) ::kill(pid, SIGKILL);  // both at once
    ProcessResult r = first.Wait(60);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("no worker finished"), std::string::npos) << r.err;
  }
  ProcessResult again = Spot(
      {"train", job.string(), "--nproc", "2", "--plain", "--log-dir", (dir_ / "workers2").string()},
      "again");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  // Checkpoints every 50 steps: the newest complete one is at 100 or later.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      again.err, m, std::regex("resuming from checkpoint \\d+ \\(\\w+ tier; step (\\d+),")))
      << again.err;
  int64_t from = std::stoll(m[1]);
  EXPECT_GE(from, 100);
  EXPECT_EQ(from % 50, 0);
  std::vector<SampleRecord> rs = ReadSampleLogs(FilesEndingWith(dir_ / "workers2", ".samples.csv"));
  ASSERT_FALSE(rs.empty());
  int64_t first_step = rs.front().step;
  for (const SampleRecord& r : rs) first_step = std::min(first_step, r.step);
  EXPECT_EQ(first_step, from + 1) << "the second run continued where the checkpoint was";
  EXPECT_EQ(Summary(out)["steps"], 300);
}

// Every compression choice trains: a short run (2 workers, 2 epochs of
// 12,000 images) lands near the uncompressed run's accuracy, with the bytes
// each choice promises. Runs are repeatable (no balancing), so compression
// is the only difference; PowerSGD and top-k start after 100 plain steps, as
// PyTorch advises for PowerSGD. (The 1-point comparison on the full data set is in
// `spot_bench --workloads elastic`.)
TEST_F(ElasticTest, EveryCompressionChoiceTrainsAndSendsWhatItPromises) {
  std::map<std::string, json> s;
  for (std::string c : {"none", "fp16", "bf16", "powersgd", "topk"}) {
    fs::path out = dir_ / c;
    fs::path job = WriteJob(
        c, ElasticJobYaml(
               out, 2, 12000,
               "  compression: " + c + "\n  max_workers: 2\n  join_window_s: 60\n" +
                   (c == "powersgd" || c == "topk" ? "  compression_warmup_steps: 100\n" : "")));
    ProcessResult r = Spot({"train", job.string(), "--nproc", "2", "--plain", "--log-dir",
                            (dir_ / (c + "_logs")).string()},
                           c);
    ASSERT_EQ(r.exit_code, 0) << c << ": " << r.err;
    s[c] = Summary(out);
    std::cerr << fmt::format("  {}: accuracy {:.4f}, {} gradient bytes per step\n", c,
                             s[c]["test_accuracy"].get<double>(),
                             s[c]["bytes_sent_per_step"].get<int64_t>());
  }
  const double none_acc = s["none"]["test_accuracy"];
  const double none_bytes = s["none"]["bytes_sent_per_step"];
  EXPECT_EQ(none_bytes, 235146 * 4);
  // The lossless-ish casts stay within 4 points of the uncompressed run; the
  // sparse ones (1% of the entries, or rank 4) trail it this early in training
  // by more on some CPUs: on an AMD EPYC here none 0.805, topk 0.759 (the same
  // with the code of the first slice), within 6 points.
  for (const auto& [c, j] : s) {
    const double tolerance = c == "topk" || c == "powersgd" ? 0.06 : 0.04;
    EXPECT_NEAR(j["test_accuracy"].get<double>(), none_acc, tolerance) << c;
  }
  EXPECT_EQ(s["fp16"]["bytes_sent_per_step"].get<double>(), none_bytes / 2 + 8);  // + the scale
  EXPECT_EQ(s["bf16"]["bytes_sent_per_step"].get<double>(), none_bytes / 2);
  EXPECT_LT(s["powersgd"]["bytes_sent_per_step"].get<double>(), none_bytes / 10);
  EXPECT_EQ(s["topk"]["bytes_sent_per_step"].get<double>(), 8 * 2352);  // ceil(1% of 235,146)
}

// The anomaly guard of the one training loop, across workers: both judge the
// same global loss, rank 0 restores the checkpoint before it and broadcasts
// it, and the diverged batch is skipped by both for good.
TEST_F(ElasticTest, ADivergedLossRollsBackEveryWorkerTogether) {
  fs::path out = dir_ / "run";
  fs::path job =
      WriteJob("job", ElasticJobYaml(out, 1, 3200, "  max_workers: 2\n  join_window_s: 60\n") +
                          "faults: {nan_loss_at_step: 70}\n");
  fs::path logs = dir_ / "logs";
  ProcessResult r = Spot({"train", job.string(), "--nproc", "2", "--plain", "--log-dir",
                          logs.string(), "--step-log", (dir_ / "steps.csv").string()},
                         "run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("loss is nan at step 70: rolled back to checkpoint"), std::string::npos)
      << r.err;
  EXPECT_EQ(Summary(out)["steps"], 99);  // 100 batches of the epoch, one skipped
  EXPECT_GT(Summary(out)["test_accuracy"].get<double>(), 0.6);
  // Both workers passed over the batch: no sample of it was trained on after the rollback.
  std::vector<SampleRecord> rs = ReadSampleLogs(FilesEndingWith(logs, ".samples.csv"));
  ASSERT_FALSE(rs.empty());
  int64_t after_rollback = 0;
  for (const SampleRecord& s : rs) {
    if (s.step > 50) ++after_rollback;
    EXPECT_NE(s.batch_begin, 69 * 32) << "step " << s.step;
  }
  EXPECT_GT(after_rollback, 0);
  std::ifstream events(out / "events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(events, line));
  EXPECT_EQ(json::parse(line)["restored_step"], 50);
}

// A stop while a peer is leaving, on a starved CPU: rank 0 must save the step
// it holds at once, not re-form a generation of one and train on first (which
// took the notice's whole time in the demo under load, and the durable tier
// was hundreds of steps behind). Periodic saves are off, so only the stop's
// save can hold the last step; its flush is allowed 2 s.
TEST_F(ElasticTest, AStopWhileAPeerLeavesSavesTheLastStepOnAStarvedCpu) {
  fs::path out = dir_ / "run";
  // The first generation waits for both workers, however slowly they start.
  std::string yaml = ElasticJobYaml(out, 20, 3200, "  max_workers: 2\n  join_window_s: 60\n");
  auto at = yaml.find("interval_steps: 50");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, std::string("interval_steps: 50").size(),
               "interval_steps: 1000000\n  flush_deadline_s: 2");
  fs::path job = WriteJob("job", yaml);
  fs::path steps = dir_ / "steps.csv";
  fs::path logs = dir_ / "workers";
  ChildProcess train({SPOT_BIN, "train", job.string(), "--nproc", "2", "--plain", "--step-log",
                      steps.string(), "--log-dir", logs.string()},
                     (dir_ / "train").string());
  ASSERT_TRUE(WaitForStep(steps, 40));
  // Rank of each worker in the newest generation, once it holds both (on a
  // loaded machine the second worker may start after the first generation
  // formed without it; it joins the next).
  std::map<int, int> pid_of_rank;
  int64_t newest = -1;
  for (int i = 0; i < 6000 && pid_of_rank.size() < 2; ++i) {
    if (i > 0) ::usleep(10000);
    pid_of_rank.clear();
    newest = -1;
    for (const json& e : ReadEvents(FilesEndingWith(logs, ".events.jsonl"))) {
      if (e["generation"].get<int64_t>() > newest) pid_of_rank.clear();
      newest = std::max(newest, e["generation"].get<int64_t>());
      if (e["generation"].get<int64_t>() == newest) pid_of_rank[e["rank"]] = e["pid"];
    }
  }
  ASSERT_EQ(pid_of_rank.size(), 2u);
  // Six busy loops against two workers (the CI machine has 2 cores).
  std::vector<std::unique_ptr<ChildProcess>> hogs;
  for (int i = 0; i < 6; ++i) {
    hogs.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c", "while :; do :; done"},
        (dir_ / fmt::format("hog{}", i)).string()));
  }
  ::usleep(300000);
  ::kill(pid_of_rank[1], SIGTERM);  // the peer leaves
  ::usleep(20000);
  ::kill(pid_of_rank[0], SIGTERM);  // and then the writer is told to stop
  const int64_t stop_sent_ms = NowMs();
  ProcessResult r = train.Wait(120);
  hogs.clear();
  const int64_t last = LastLoggedStep(steps);
  ASSERT_GT(last, 40);
  // The newest checkpoint holds the last step anyone trained.
  int64_t saved = -1;
  for (const auto& e : fs::recursive_directory_iterator(out / "checkpoints")) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("ckpt-") || !name.ends_with(".json")) continue;
    auto text = ReadFile(e.path().string());
    ASSERT_TRUE(text.ok());
    saved = std::max(saved, json::parse(*text)["step"].get<int64_t>());
  }
  EXPECT_EQ(saved, last) << "the last trained step was not saved\n" << r.err;
  // No generation began forming after the writer was told to stop. (The
  // survivor may re-form before the stop reaches it: on a starved CPU the
  // test's own 20 ms pause can last longer than the peer's leaving.)
  for (const json& e : ReadEvents(FilesEndingWith(logs, ".events.jsonl"))) {
    if (e["generation"].get<int64_t>() <= newest) continue;
    const double began_ms = e["unix_ms"].get<double>() - 1000 * e["formed_s"].get<double>();
    EXPECT_LT(began_ms, stop_sent_ms) << "generation " << e["generation"] << " of " << e["id"]
                                      << " began forming after the stop\n"
                                      << r.err;
  }
}

// Every worker writes a step profile; `spot profile` merges them into one
// Chrome trace (each worker a process, its phases as complete events in the
// order they ran) and prints where the time went.
TEST_F(ElasticTest, SpotProfileMergesTheWorkersStepPhasesIntoOneChromeTrace) {
  fs::path out = dir_ / "run";
  fs::path job = WriteJob("job", ElasticJobYaml(out, 1, 1600, ""));
  ProcessResult r = Spot({"train", job.string(), "--nproc", "2", "--plain"}, "train");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::path trace = dir_ / "trace.json";
  ProcessResult p = Spot({"profile", job.string(), "-o", trace.string()}, "profile");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  for (const char* phase : {"data", "forward", "backward", "sync", "optimizer", "save"}) {
    EXPECT_NE(p.out.find(phase), std::string::npos) << phase << "\n" << p.out;
  }
  auto text = ReadFile(trace.string());
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text);
  std::map<int, std::string> processes;
  std::map<int, std::map<int64_t, std::vector<json>>> steps;  // pid -> step -> phases
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "X" && e["tid"] == 0) steps[e["pid"]][e["args"]["step"]].push_back(e);
  }
  ASSERT_EQ(processes.size(), 2u);
  for (const auto& [pid, by_step] : steps) {
    // 1,600 images at batch 32: 50 steps, each with its five phases in order.
    ASSERT_EQ(by_step.size(), 50u) << processes[pid];
    for (const auto& [step, phases] : by_step) {
      std::vector<std::string> names;
      int64_t end = 0;
      for (const json& e : phases) {
        names.push_back(e["name"]);
        EXPECT_GE(e["ts"].get<int64_t>() + 1, end) << "phases overlap at step " << step;
        end = e["ts"].get<int64_t>() + e["dur"].get<int64_t>();
      }
      EXPECT_EQ(names,
                (std::vector<std::string>{"data", "forward", "backward", "sync", "optimizer"}))
          << "step " << step;
    }
  }
  // A run directory works as well as the job file; nothing there is an error.
  EXPECT_EQ(Spot({"profile", out.string(), "-o", trace.string()}, "by-dir").exit_code, 0);
  ProcessResult none = Spot({"profile", dir_.string()}, "none");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no step profiles"), std::string::npos) << none.err;
}

TEST_F(ElasticTest, BadRendezvousAddressesAreClearErrors) {
  fs::path job = WriteJob("job", ElasticJobYaml(dir_ / "run", 1, 320, ""));
  ProcessResult bad = Spot({"worker", job.string(), "--rendezvous", "redis://x:1"}, "bad");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("rendezvous address 'redis://x:1'"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("tcp://HOST:PORT"), std::string::npos) << bad.err;
  fs::path quick =
      WriteJob("quick", ElasticJobYaml(dir_ / "run", 1, 320, "  rendezvous_timeout_s: 1\n"));
  ProcessResult down =
      Spot({"worker", quick.string(), "--rendezvous", "tcp://127.0.0.1:1"}, "down");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("tcp://127.0.0.1:1"), std::string::npos) << down.err;
  fs::path inverted = WriteJob(
      "inverted", ElasticJobYaml(dir_ / "run", 1, 320, "  min_workers: 4\n  max_workers: 2\n"));
  ProcessResult inv = Spot({"train", inverted.string(), "--nproc", "2"}, "inverted");
  EXPECT_EQ(inv.exit_code, 2);
  EXPECT_NE(inv.err.find("max_workers"), std::string::npos) << inv.err;
}

}  // namespace
}  // namespace spot::testing
