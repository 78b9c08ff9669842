// End-to-end tests of `spot run`: the real controller, real `spot worker`
// processes preempted by a replayed market through their metadata endpoints,
// the real SQLite state and rendezvous. Markets are small hand-made traces
// (one tick = one wall second), so every preemption happens at a known tick.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/spot/e2e_support.h"
#include "aws/aws_testing.h"
#include "ckpt/s3_blob_store.h"
#include "cloud/local_provider.h"
#include "control/job_store.h"
#include "core/file_io.h"
#include "dist/etcd_kv_store.h"
#include "dist/etcd_test_server.h"
#include "dist/rendezvous.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Zone A: up, down at ticks 4-5, up again. Zone B: down until 5, up 5-9,
// down 10-11, up. Greedy: A, lost at 4, B at 5, lost at 10, A to the end.
constexpr int kTicks = 400;
std::vector<int> Pattern(std::initializer_list<std::pair<int, int>> down) {
  std::vector<int> a(kTicks, 1);
  for (auto [from, to] : down) {
    for (int t = from; t <= to; ++t) a[t] = 0;
  }
  return a;
}

class RunTest : public E2eTest {
 protected:
  void WriteTrace(const std::string& zone, const std::vector<int>& counts) {
    json j = {{"metadata", {{"gap_seconds", 60}}}, {"data", counts}};
    std::ofstream(dir_ / (zone + "_gpu_1.json")) << j.dump();
  }
  void TwoZoneMarket() {
    WriteTrace("zone-a", Pattern({{4, 5}}));
    WriteTrace("zone-b", Pattern({{0, 4}, {10, 11}}));
  }
  // A `spot run` job over the traces written so far; `extra_*` append YAML
  // to the top level, the market, the controller and the train sections.
  std::filesystem::path RunJob(const std::string& name, const std::string& market_extra,
                               const std::string& train_extra, int64_t steps,
                               const std::string& top_extra = "",
                               const std::string& controller_extra = "") {
    std::string traces;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().string().ends_with("_gpu_1.json")) traces += "    - " + e.path().string() + "\n";
    }
    std::string yaml = fmt::format(
        "name: {name}\n{policy}compute_hours: 0.3\ndeadline_hours: 3\n{top}"
        "resources:\n  nodes: 2\n  min_nodes: 1\n  ondemand_price: 3.0\n  changeover_hours: 0.02\n"
        "market:\n  traces:\n{traces}  time_compression: 60\n  notice_seconds: 120\n"
        "  when_missing: error\n{market}"
        "controller:\n  reconcile_interval_s: 0.02\n  terminate_grace_s: 1\n{controller}"
        "train:\n  model: mlp\n  dataset:\n    path: {data}\n    train_limit: 12000\n"
        "  batch_size: 32\n  steps: {steps}\n  seed: 7\n  threads: 1\n"
        "  optimizer:\n    type: adam\n    lr: 0.002\n  schedule:\n    type: cosine\n"
        "  checkpoint:\n    interval: steps\n"
        "    interval_steps: 50\n  distributed:\n    collective_timeout_s: 3\n"
        "  output_dir: {out}\n{train}",
        fmt::arg("name", name),
        fmt::arg("policy", top_extra.starts_with("policy:") ? "" : "policy: greedy\n"),
        fmt::arg("top", top_extra), fmt::arg("traces", traces), fmt::arg("market", market_extra),
        fmt::arg("controller", controller_extra), fmt::arg("data", kDataset),
        fmt::arg("steps", steps), fmt::arg("out", (dir_ / name).string()),
        fmt::arg("train", train_extra));
    return WriteJob(name, yaml);
  }
  static std::string ReadText(const fs::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // Replaces the first `from` in the file by `to`.
  static void Edit(const fs::path& path, const std::string& from, const std::string& to) {
    std::string text = ReadText(path);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << path;
    text.replace(at, from.size(), to);
    std::ofstream(path) << text;
  }
  // Waits (at most 60 s) until the job's progress, as the controller has it,
  // reaches `step`; returns the last step seen.
  int64_t WaitForStep(const std::string& name, int64_t step) {
    int64_t seen = 0;
    for (int i = 0; i < 600 && seen < step; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto store = control::JobStore::Open((dir_ / name / "controller" / "state.db").string());
      if (!store.ok()) continue;
      auto p = (*store)->GetValue(name, "progress");
      if (p.ok() && *p) seen = json::parse(**p).value("step", int64_t{0});
    }
    return seen;
  }
  json Summary(const std::string& name) {
    std::ifstream in(dir_ / name / "run-summary.json");
    return json::parse(in);
  }
  std::vector<json> JsonLines(const fs::path& path) {
    std::vector<json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
  }
  std::unique_ptr<control::JobStore> Store(const std::string& name) {
    auto s = control::JobStore::Open((dir_ / name / "controller" / "state.db").string());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // Every instance is billed over exactly its lifetime: contiguous rows from
  // launch to end, no gap, no overlap, and the total is the rows' sum.
  void ExpectLedgerMatchesLifetimes(const std::string& name) {
    auto store = Store(name);
    ASSERT_NE(store, nullptr);
    auto instances = store->Instances(name, false);
    auto ledger = store->Ledger(name);
    ASSERT_TRUE(instances.ok() && ledger.ok());
    std::map<std::string, std::vector<control::LedgerEntry>> rows;
    double sum = 0;
    for (const control::LedgerEntry& e : *ledger) {
      rows[e.instance_id].push_back(e);
      sum += e.usd;
    }
    for (const control::InstanceRecord& r : *instances) {
      ASSERT_TRUE(r.ended_s.has_value()) << r.id << " still running after the job ended";
      const auto& mine = rows[r.id];
      double at = r.launched_s;
      for (const control::LedgerEntry& e : mine) {
        EXPECT_NEAR(e.from_s, at, 1e-6) << r.id << ": gap or overlap in the ledger";
        EXPECT_GT(e.to_s, e.from_s);
        at = e.to_s;
      }
      EXPECT_NEAR(at, *r.ended_s, 1e-6)
          << r.id << " billed to " << at << ", ended at " << *r.ended_s;
    }
    auto total = store->TotalCost(name);
    ASSERT_TRUE(total.ok());
    EXPECT_NEAR(*total, sum, 1e-9);
    EXPECT_GT(sum, 0);
  }
};

// Preemptions with notice: the workers save and leave before the kill, so no
// completed step is redone; the job finishes with the accuracy of an
// uninterrupted run; and SpotSim, given the same market segment and policy,
// takes the same decisions tick by tick.
TEST_F(RunTest, NoticesLoseNoStepAndSimAgrees) {
  TwoZoneMarket();
  auto job = RunJob("noticed", "", "", 3000);
  ProcessResult r = Spot({"run", job.string(), "--status-interval", "2"}, "noticed");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("noticed");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["steps"], 3000);
  EXPECT_EQ(s["preemptions"], 2) << r.out;
  EXPECT_GE(s["notices"].get<int>(), 2);
  EXPECT_EQ(s["steps_redone"], 0) << "a noticed preemption lost completed steps\n" << r.out;
  ExpectLedgerMatchesLifetimes("noticed");
  // The workers' job file has room for a second gang of 2 beside the first
  // (a policy's make before break: the newcomers join and take the state).
  const std::string train_yaml = ReadText(dir_ / "noticed" / "train.yaml");
  EXPECT_NE(train_yaml.find("max_workers: 4"), std::string::npos) << train_yaml;
  EXPECT_NE(train_yaml.find("min_workers: 1"), std::string::npos) << train_yaml;

  // Workers flushed their checkpoints on notices (on a loaded machine a
  // notice that comes during start-up may leave too little time for one; the
  // step log above is what says nothing was lost).
  int flushed = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "noticed" / "instances")) {
    if (e.path().extension() != ".log") continue;
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("flushed") != std::string::npos) ++flushed;
  }
  EXPECT_GE(flushed, 1);

  // SpotSim on the same segment: the same decision at every tick both ran.
  auto live = JsonLines(dir_ / "noticed" / "decisions.jsonl");
  ProcessResult sim = Spot({"sim",
                            "run",
                            "--trace",
                            (dir_ / "zone-a_gpu_1.json").string(),
                            "--trace",
                            (dir_ / "zone-b_gpu_1.json").string(),
                            "--multi-zone",
                            "--policy",
                            "greedy",
                            "--start-tick",
                            "0",
                            "--compute-hours",
                            "0.3",
                            "--deadline-hours",
                            "3",
                            "--changeover-hours",
                            "0.02",
                            "--nodes",
                            "1",
                            "--ondemand-price",
                            "3",
                            "--decision-log",
                            (dir_ / "sim-decisions.jsonl").string()},
                           "sim");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  auto simulated = JsonLines(dir_ / "sim-decisions.jsonl");
  const size_t common = std::min(live.size(), simulated.size());
  ASSERT_GE(common, 12u) << "the runs overlap too little to compare";
  for (size_t t = 0; t < common; ++t) {
    EXPECT_EQ(live[t]["target"], simulated[t]["target"]) << "tick " << t;
    EXPECT_EQ(live[t]["preempted"], simulated[t]["preempted"]) << "tick " << t;
    EXPECT_EQ(live[t]["current"], simulated[t]["current"]) << "tick " << t;
  }

  // The same job where capacity never goes: the accuracy is the same.
  fs::create_directories(dir_ / "calm");
  std::ofstream(dir_ / "calm" / "zone-a_gpu_1.json")
      << json({{"metadata", {{"gap_seconds", 60}}}, {"data", std::vector<int>(kTicks, 1)}}).dump();
  std::string calm_yaml;
  {
    std::ifstream in(job);
    calm_yaml.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t at; (at = calm_yaml.find(from)) != std::string::npos;)
      calm_yaml.replace(at, from.size(), to);
  };
  replace("    - " + (dir_ / "zone-b_gpu_1.json").string() + "\n", "");
  replace((dir_ / "zone-a_gpu_1.json").string(), (dir_ / "calm" / "zone-a_gpu_1.json").string());
  replace("name: noticed", "name: calm");
  replace((dir_ / "noticed").string(), (dir_ / "calm").string());
  auto calm_job = WriteJob("calm", calm_yaml);
  ProcessResult c = Spot({"run", calm_job.string()}, "calm");
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  json cs = Summary("calm");
  EXPECT_EQ(cs["preemptions"], 0);
  std::cout << "accuracy: preempted twice " << s["test_accuracy"] << ", uninterrupted "
            << cs["test_accuracy"] << "\n";
  EXPECT_NEAR(s["test_accuracy"].get<double>(), cs["test_accuracy"].get<double>(), 0.005)
      << "interrupted vs uninterrupted accuracy";
}

// Without a notice the instances die mid-step: at most the work since the
// last checkpoint is redone (two intervals: a save may still be in flight).
TEST_F(RunTest, UnnoticedPreemptionsLoseAtMostSinceCheckpoint) {
  TwoZoneMarket();
  auto job = RunJob("unnoticed", "  notice_seconds: 0\n", "", 3000);
  // notice_seconds appears twice otherwise: drop the default line.
  std::string yaml;
  {
    std::ifstream in(job);
    yaml.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  yaml.erase(yaml.find("  notice_seconds: 120\n"), std::string("  notice_seconds: 120\n").size());
  std::ofstream(job) << yaml;
  ProcessResult r = Spot({"run", job.string()}, "unnoticed");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("unnoticed");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["preemptions"], 2);
  EXPECT_EQ(s["notices"], 0);
  EXPECT_LE(s["steps_redone"].get<int>(), 2 * 2 * 50) << r.out;
  ExpectLedgerMatchesLifetimes("unnoticed");
}

// An S3 durable tier (moto's S3 server, signatures checked): every instance
// the market takes loses its local disk, and its replacement resumes from S3.
TEST_F(RunTest, ReplacementsResumeFromAnS3DurableTier) {
  const fs::path venv = aws::VenvDir(SPOT_SOURCE_DIR);
  if (std::string why = aws::MotoSkipReason(venv); !why.empty()) {
    GTEST_SKIP() << "SKIPPED: no S3 server (moto): " << why;
  }
  auto moto = aws::MotoServer::Start({.venv = venv, .log_path = dir_ / "moto.log"});
  ASSERT_TRUE(moto.ok()) << moto.status().ToString();
  ASSERT_TRUE((*moto)->CreateBucket("spot-e2e").ok());
  const aws::AwsConfig c = (*moto)->Config();
  const std::pair<const char*, std::string> env[] = {
      {"AWS_ENDPOINT_URL", c.endpoint},
      {"AWS_REGION", c.region},
      {"AWS_ACCESS_KEY_ID", c.credentials.access_key_id},
      {"AWS_SECRET_ACCESS_KEY", c.credentials.secret_access_key}};
  for (const auto& [k, v] : env) ::setenv(k, v.c_str(), 1);
  TwoZoneMarket();
  auto job = RunJob("s3", "", "", 3000);
  Edit(job, "    interval_steps: 50\n",
       "    interval_steps: 50\n    durable_dir: s3://spot-e2e/run\n");
  ProcessResult r = Spot({"run", job.string()}, "s3");
  for (const auto& [k, v] : env) ::unsetenv(k);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("s3");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["preemptions"], 2);
  EXPECT_EQ(s["steps_redone"], 0) << r.out;
  // The replacements read S3: no local disk survives an instance.
  int from_s3 = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "s3" / "instances")) {
    if (e.path().extension() != ".log") continue;
    const std::string text = ReadText(e.path());
    if (text.find("durable tier") != std::string::npos &&
        text.find("resuming from checkpoint") != std::string::npos) {
      ++from_s3;
    }
  }
  EXPECT_GE(from_s3, 1) << "no worker resumed from the S3 tier";
  auto store = ckpt::S3BlobStore::Open("s3://spot-e2e/run", c);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto names = (*store)->List();
  ASSERT_TRUE(names.ok());
  EXPECT_FALSE(names->empty());
  EXPECT_EQ(r.out.find(c.credentials.secret_access_key), std::string::npos);
  EXPECT_EQ(r.err.find(c.credentials.secret_access_key), std::string::npos);
}

// SIGKILL of the controller mid-job: the instances and the rendezvous run on;
// the same command resumes the job, which finishes with a ledger without gap
// or double count.
TEST_F(RunTest, KilledControllerResumes) {
  TwoZoneMarket();
  auto job = RunJob("killed", "", "", 4000);
  {
    ChildProcess first({SPOT_BIN, "run", job.string()}, (dir_ / "first").string());
    const fs::path decisions = dir_ / "killed" / "decisions.jsonl";
    for (int i = 0; i < 600 && JsonLines(decisions).size() < 7; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_GE(JsonLines(decisions).size(), 7u) << "the job did not get going";
    first.Kill(SIGKILL);
    first.Wait(10);
  }
  // The store bound a free port itself and the record names the port it
  // listens on (one picked ahead could be taken by another process first).
  auto record = ReadFile((dir_ / "killed" / "controller" / "rendezvous.json").string());
  ASSERT_TRUE(record.ok()) << record.status().message();
  auto rdzv_log = ReadFile((dir_ / "killed" / "rendezvous.log").string());
  ASSERT_TRUE(rdzv_log.ok()) << rdzv_log.status().message();
  const int rdzv_port = json::parse(*record)["port"].get<int>();
  EXPECT_GT(rdzv_port, 0);
  EXPECT_NE(rdzv_log->find(fmt::format("listening on tcp://127.0.0.1:{}", rdzv_port)),
            std::string::npos)
      << *record << *rdzv_log;
  EXPECT_FALSE(fs::exists(dir_ / "killed" / "controller" / "rendezvous.port"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the fleet runs unwatched
  ProcessResult r = Spot({"run", job.string()}, "second");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("killed");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_TRUE(s["resumed"].get<bool>());
  EXPECT_NE(r.out.find("resumed"), std::string::npos);
  ExpectLedgerMatchesLifetimes("killed");
  // Every tick was decided once: the restarted controller went on from the log.
  auto decisions = JsonLines(dir_ / "killed" / "decisions.jsonl");
  for (size_t t = 0; t < decisions.size(); ++t) EXPECT_EQ(decisions[t]["tick"], t);
}

// The member of `cluster` that leads it (its index), or -1.
int EtcdLeader(const std::vector<std::unique_ptr<dist::EtcdTestServer>>& cluster) {
  for (size_t i = 0; i < cluster.size(); ++i) {
    httplib::Client c(cluster[i]->endpoint());
    auto r = c.Post("/v3/maintenance/status", "{}", "application/json");
    if (!r || r->status != 200) continue;
    json status = json::parse(r->body, nullptr, false);
    if (status.is_object() && status.value("leader", "") != "" &&
        status["leader"] == status["header"]["member_id"]) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// controller.rendezvous names an etcd cluster (three members on loopback):
// the controller hosts no rendezvous of its own and the workers meet in etcd.
// When the member every request goes to, the cluster's leader, is SIGKILLed
// mid-training (the two others elect a leader; the requests go to them), a
// preemption after it is handled as usual: the survivor re-forms from its
// memory, the replacement joins, and no step is redone. (A `spot rendezvous` the
// controller hosts is one process: its death fails the workers, which are
// replaced and resume from the durable checkpoint.)
TEST_F(RunTest, AnEtcdClusterRendezvousOutlivesAKilledMember) {
  auto cluster = dist::EtcdTestServer::StartCluster(3);
  if (cluster.status().code() == StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << cluster.status().ToString();
  }
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  // The leader first: the member every request goes to, the one killed.
  const int leader = EtcdLeader(*cluster);
  ASSERT_GE(leader, 0) << "no member leads the cluster";
  std::string members;
  for (int k = 0; k < 3; ++k) {
    members += (members.empty() ? "" : ",") +
               (*cluster)[(leader + k) % 3]->endpoint().substr(std::string("http://").size());
  }
  // Room for both instances but at ticks 12-13 (seconds, at x60): one is
  // preempted after the kill, so the survivor re-forms, and the replacement
  // joins, through the two members left.
  std::vector<int> counts(kTicks, 2);
  counts[12] = counts[13] = 1;
  WriteTrace("zone-a", counts);
  auto job = RunJob("etcd", "", "", 3000, "", "  rendezvous: etcd://" + members + "\n");
  ChildProcess run({SPOT_BIN, "run", job.string()}, (dir_ / "etcd-run").string());
  ASSERT_GE(WaitForStep("etcd", 300), 300) << "the job did not get going";
  (*cluster)[leader]->Kill();
  ProcessResult r = run.Wait(300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("etcd");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_GE(s["preemptions"].get<int>(), 1) << r.out;
  EXPECT_EQ(s["steps_redone"], 0) << "the survivor did not re-form from its memory\n" << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "etcd" / "controller" / "rendezvous.json"))
      << "the controller hosted a rendezvous of its own";
  dist::EtcdOptions o;
  o.endpoint = (*cluster)[(leader + 1) % 3]->endpoint();
  o.key_prefix = "/spot/etcd/";
  auto kv = dist::NewEtcdKvStore(o);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  auto membership = dist::ReadMembership(kv->get(), "etcd");
  ASSERT_TRUE(membership.ok()) << membership.status().ToString();
  EXPECT_GE(membership->generation, 2) << "the workers re-formed in etcd after the kill";
  ExpectLedgerMatchesLifetimes("etcd");
}

// A worker that stops answering (SIGSTOP) is found by its missing heartbeat
// and replaced; the job still finishes.
TEST_F(RunTest, UnreachableWorkerIsReplaced) {
  WriteTrace("zone-a", std::vector<int>(kTicks, 1));
  auto job = RunJob("hung", "", "", 6000, "", "  unreachable_after_s: 2\n");
  ChildProcess run({SPOT_BIN, "run", job.string()}, (dir_ / "hung").string());
  ASSERT_GE(WaitForStep("hung", 200), 200) << "the job did not get going";
  int64_t victim = 0;
  {
    auto store = Store("hung");
    ASSERT_NE(store, nullptr);
    auto live = store->Instances("hung", true);
    ASSERT_TRUE(live.ok() && !live->empty());
    auto data = cloud::DecodeLocalInstanceData(live->front().provider_data);
    victim = data.ok() ? data->pid : 0;
  }
  ASSERT_GT(victim, 0);
  ::kill(static_cast<pid_t>(victim), SIGSTOP);
  ProcessResult r = run.Wait(300);
  ::kill(static_cast<pid_t>(victim), SIGKILL);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto store = Store("hung");
  ASSERT_NE(store, nullptr);
  auto events = store->Events("hung");
  ASSERT_TRUE(events.ok());
  int unreachable = 0;
  for (const control::EventRecord& e : *events) unreachable += e.kind == "unreachable";
  EXPECT_GE(unreachable, 1);
  ExpectLedgerMatchesLifetimes("hung");
}

// A make-before-break handover with real workers: `mdp` (acting as `up` in
// this young market, but leaving on-demand for spot make before break) runs
// on-demand while zone-a is down, and when it comes back at tick 20 starts
// the spot gang beside it. The model counts the gang ready 0.02 h (0.6 wall
// s at x120) after its launch and lets on-demand go; a worker takes longer
// than that to start and join. On-demand is kept until the newcomers are in
// the training group, which takes the state from it: nothing is redone.
TEST_F(RunTest, AHandoverKeepsOnDemandUntilTheSpotWorkersJoin) {
  std::vector<int> a(kTicks, 1);
  for (int t = 0; t < 20; ++t) a[t] = 0;
  WriteTrace("zone-a", a);
  auto job = RunJob("handover", "", "", 3000, "policy: mdp\n");
  Edit(job, "time_compression: 60", "time_compression: 120");
  ProcessResult r = Spot({"run", job.string()}, "handover");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("handover");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["steps_redone"], 0) << r.out;
  auto store = Store("handover");
  ASSERT_NE(store, nullptr);
  auto events = store->Events("handover");
  auto instances = store->Instances("handover", false);
  ASSERT_TRUE(events.ok() && instances.ok());
  std::map<std::string, double> handed_over;  // on-demand instance -> when
  std::map<std::string, int> kinds;
  for (const control::EventRecord& e : *events) {
    ++kinds[e.kind];
    if (e.kind == "handover") handed_over[e.instance_id] = e.sim_s;
  }
  EXPECT_EQ(kinds["handover-wait"], 2) << r.out;
  EXPECT_EQ(kinds["handover-timeout"], 0) << r.out;
  int on_demand = 0;
  for (const control::InstanceRecord& i : *instances) {
    if (i.spot) continue;
    ++on_demand;
    ASSERT_TRUE(handed_over.count(i.id)) << i.id << " was let go without waiting for the gang";
    EXPECT_EQ(i.end_reason, "terminated");
    EXPECT_NEAR(*i.ended_s, handed_over[i.id], 1e-6);
  }
  EXPECT_EQ(on_demand, 2);
  ExpectLedgerMatchesLifetimes("handover");
  // The summary says what the wait cost: the on-demand ledger from the wait on.
  EXPECT_EQ(s["handover_kept_instances"], 2);
  EXPECT_EQ(s["handover_timeouts"], 0);
  EXPECT_GT(s["handover_kept_usd"].get<double>(), 0);
  EXPECT_LT(s["handover_kept_usd"].get<double>(), s["ondemand_usd"].get<double>());
  EXPECT_NE(r.out.find("handovers             2 instances kept"), std::string::npos) << r.out;
  // The spend splits the whole bill between the two kinds.
  EXPECT_GT(s["spot_usd"].get<double>(), 0);
  EXPECT_NEAR(s["spot_usd"].get<double>() + s["ondemand_usd"].get<double>(),
              s["cost_usd"].get<double>(), 1e-6 * s["cost_usd"].get<double>());
}

// Bad job files: exit 2 and a message naming the file and the field, before
// any file is written or any process started (the leak check of
// e2e_leak_check.cc finds a rendezvous left running).
TEST_F(RunTest, BadJobFilesAreRefused) {
  TwoZoneMarket();
  struct Case {
    std::string top, market, expect, controller;
  };
  const std::string file = (dir_ / "zone-a_gpu_1.json").string();
  const std::vector<Case> cases = {
      {"policy: nosuch\n", "", "policy"},
      {"budget_usd: -1\n", "", "budget_usd"},
      {"policy: omniscient\n", "", "needs to know the future"},
      {"policy: {name: hazard-up, min_runs: 0}\n", "", "policy.min_runs: must be >= 1"},
      {"provider: ec9\n", "", "unknown provider 'ec9' (known: ec2, local, slurm)"},
      {"", "  start_tick: 100000\n", "start_tick"},
      {"", "  time_compression: 0\n", "market.time_compression"},
      {"", "  metadata: ibm\n", "market.metadata"},
      {"resourcez: {}\n", "", "resourcez: unknown field"},
      {"", "  prices: /nonexistent/prices.csv\n",
       "market.prices: /nonexistent/prices.csv: no such file"},
      {"", "",
       "controller.state_dir: cannot create directory " + file + "/state: " + file +
           " is not a directory",
       "  state_dir: " + file + "/state\n"},
      {"", "", "controller.rendezvous: rendezvous address 'redis://127.0.0.1:6379': expected",
       "  rendezvous: redis://127.0.0.1:6379\n"},
      {"", "", "controller.rendezvous: rendezvous address 'etcd://127.0.0.1:2379,'",
       "  rendezvous: etcd://127.0.0.1:2379,\n"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = fmt::format("bad{}", i);
    auto job = RunJob(name, cases[i].market, "", 100, cases[i].top, cases[i].controller);
    ProcessResult r = Spot({"run", job.string()}, name);
    EXPECT_EQ(r.exit_code, 2) << cases[i].expect << "\n" << r.err;
    EXPECT_NE(r.err.find(cases[i].expect), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(job.filename().string()), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / name)) << cases[i].expect << ": the job's directory was made";
  }
  // An empty name is the job file's error, not the workers' job file's.
  auto job = RunJob("noname", "", "", 100);
  Edit(job, "name: noname\n", "name: \"\"\n");
  ProcessResult r = Spot({"run", job.string()}, "noname");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("noname.yaml:1:7: name: must be a non-empty name"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "noname"));
  // A missing train section and a zone the market lacks.
  job = WriteJob("notrain", "name: x\nmarket:\n  traces: [" + file + "]\n");
  r = Spot({"run", job.string()}, "notrain");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("train: required section is missing"), std::string::npos) << r.err;
  job = RunJob("nozone", "", "", 100, "");
  Edit(job, "resources:\n", "resources:\n  zones: [zone-z]\n");
  r = Spot({"run", job.string()}, "nozone");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no zone 'zone-z'"), std::string::npos) << r.err;
}

// `when_missing: synthetic` with a missing trace and a missing price file:
// synthetic data stands in for those files only (a trace for the zone the
// missing file names, fitted to the present one; prices for both zones), the
// job runs in the zones it names, and the run says so.
TEST_F(RunTest, MissingFilesStandInOnlyForThemselves) {
  WriteTrace("zone-a", std::vector<int>(kTicks, 1));
  auto job = RunJob("standin", "", "", 200);
  const std::string absent = (dir_ / "zone-b_gpu_1.json").string();
  const std::string prices = (dir_ / "absent-prices.csv").string();
  Edit(job, "  when_missing: error\n", "  when_missing: synthetic\n  prices: " + prices + "\n");
  Edit(job, "  traces:\n", "  traces:\n    - " + absent + "\n");
  Edit(job, "resources:\n", "resources:\n  zones: [zone-b, zone-a]\n");
  ProcessResult r = Spot({"run", job.string()}, "standin");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string said = r.out + r.err;
  EXPECT_NE(said.find("market.traces: " + absent +
                      ": no such file; a synthetic trace of zone "
                      "zone-b fitted to " +
                      (dir_ / "zone-a_gpu_1.json").string()),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("market.prices: " + prices + ": no such file; synthetic spot prices"),
            std::string::npos)
      << said;
  json s = Summary("standin");
  EXPECT_EQ(s["market_stand_ins"].size(), 2u);
  EXPECT_NE(s["market"].get<std::string>().find("SYNTHETIC"), std::string::npos) << s["market"];
  auto store = Store("standin");
  ASSERT_NE(store, nullptr);
  auto instances = store->Instances("standin", false);
  ASSERT_TRUE(instances.ok());
  ASSERT_FALSE(instances->empty());
  for (const control::InstanceRecord& i : *instances) {
    EXPECT_TRUE(i.zone_name == "zone-a" || i.zone_name == "zone-b" || !i.spot)
        << i.id << " ran in zone " << i.zone_name << ", which the job does not name";
  }
}

// SkyNomad's trace files (data are preempted flags, metadata.price_info holds
// the prices) read as they mean: zones flagged preempted at every tick have
// no spot, and a job file without resources.ondemand_price is priced at the
// on-demand price the traces record. zone-b's file has no price_info, which
// `auto` would read as counts (spot at every tick): market.trace_convention
// names how its flags read. Its spot prices, from a price file that is
// missing, are synthetic stand-ins scaled to that recorded price, not to the
// field's default.
TEST_F(RunTest, SkyNomadTracesRunAtTheirRecordedPrice) {
  std::string traces;
  for (const std::string zone : {"zone-a", "zone-b"}) {
    fs::create_directories(dir_ / (zone + "_v100_1"));
    const fs::path trace = dir_ / (zone + "_v100_1") / "full.json";
    json sky = {{"metadata", {{"gap_seconds", 60}}}, {"data", std::vector<int>(kTicks, 1)}};
    if (zone == "zone-a") {
      sky["metadata"]["price_info"] = {{"price", 1.0}, {"on_demand_price", 6.0}};
    }
    std::ofstream(trace) << sky.dump();
    traces += "    - " + trace.string() + "\n";
  }
  auto job = RunJob("sky", "  trace_convention: preempted\n", "", 100);
  Edit(job, "  ondemand_price: 3.0\n", "");
  Edit(job, "  when_missing: error\n",
       "  when_missing: synthetic\n  prices: " + (dir_ / "absent.csv").string() + "\n");
  Edit(job, "  traces:\n", "  traces:\n" + traces);
  // A deadline that soon puts the job on on-demand: 3 h would be idle waits.
  Edit(job, "deadline_hours: 3\n", "deadline_hours: 0.45\n");
  ProcessResult r = Spot({"run", job.string()}, "sky");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("sky");
  EXPECT_NE(s["market"].get<std::string>().find("on-demand $6/h, as the traces record"),
            std::string::npos)
      << s["market"];
  ASSERT_EQ(s["market_stand_ins"].size(), 1u) << s["market_stand_ins"];
  EXPECT_NE(s["market_stand_ins"][0].get<std::string>().find(
                "scaled to the on-demand price $6.00) stand in for it in zones zone-b"),
            std::string::npos)
      << s["market_stand_ins"];
  auto store = Store("sky");
  ASSERT_NE(store, nullptr);
  auto instances = store->Instances("sky", false);
  auto ledger = store->Ledger("sky");
  ASSERT_TRUE(instances.ok() && ledger.ok());
  ASSERT_FALSE(instances->empty());
  for (const control::InstanceRecord& i : *instances) {
    EXPECT_FALSE(i.spot) << i.id << " ran on spot in " << i.zone_name
                         << ", flagged preempted at every tick";
  }
  ASSERT_FALSE(ledger->empty());
  for (const control::LedgerEntry& e : *ledger) {
    EXPECT_DOUBLE_EQ(e.usd_per_hour, 6.0) << e.instance_id;
  }
}

// The summary's SpotSim prediction runs the job at the speed the run measured,
// not at the job file's compute_hours (here 2.5 h for a few minutes of work):
// so it is comparable with what the run cost; the estimate's is shown beside it.
TEST_F(RunTest, PredictionUsesMeasuredSpeed) {
  WriteTrace("zone-a", std::vector<int>(kTicks, 1));
  auto job = RunJob("speed", "", "", 300);
  Edit(job, "compute_hours: 0.3\n", "compute_hours: 2.5\n");
  ProcessResult r = Spot({"run", job.string()}, "speed");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("speed");
  ASSERT_TRUE(s.contains("compute_hours_measured")) << s.dump(2);
  const double measured = s["compute_hours_measured"].get<double>();
  EXPECT_GT(measured, 0);
  EXPECT_LT(measured, 1.0) << "300 steps take minutes of market time, not hours";
  EXPECT_EQ(s["compute_hours_estimated"].get<double>(), 2.5);
  const double cost = s["cost_usd"].get<double>();
  const double predicted = s["predicted_usd"].get<double>();
  EXPECT_GT(predicted, cost / 3) << r.out;
  EXPECT_LT(predicted, cost * 3) << r.out;
  EXPECT_GT(s["predicted_usd_at_estimate"].get<double>(), 2 * predicted) << r.out;
  EXPECT_NE(r.out.find("at the measured speed"), std::string::npos) << r.out;
}

// A trace file's name names its zone: "<zone>_<kind>.json", or "<zone>.json"
// as a whole; a name without a zone is refused clearly.
TEST_F(RunTest, TraceFileNamesItsZone) {
  json trace = {{"metadata", {{"gap_seconds", 60}}}, {"data", std::vector<int>(kTicks, 1)}};
  std::ofstream(dir_ / "plain.json") << trace.dump();
  std::ofstream(dir_ / "_v100.json") << trace.dump();
  std::ofstream(dir_ / "prices.csv") << "availability_zone,offset_seconds,spot_usd_per_hour\n"
                                        "plain,0,0.9\n";
  auto sim = [&](const std::string& trace_file) {
    return Spot({"sim", "run", "--trace", (dir_ / trace_file).string(), "--prices",
                 (dir_ / "prices.csv").string(), "--policy", "greedy", "--compute-hours", "0.3",
                 "--deadline-hours", "3"},
                trace_file);
  };
  ProcessResult r = sim("plain.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("greedy on plain"), std::string::npos) << r.out;
  r = sim("_v100.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("_v100.json: the file name names no zone"), std::string::npos) << r.err;
}

// `spot train --nproc`: a log directory that cannot be made is bad input
// (exit 2) naming the field or flag that names it.
TEST_F(RunTest, LaunchDirectoryErrorsNameTheField) {
  std::ofstream(dir_ / "afile") << "not a directory";
  auto job = WriteJob("launch", SmallJobYaml(dir_ / "afile" / "out", 10, ""));
  ProcessResult r = Spot({"train", "--nproc", "2", job.string()}, "launch");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("launch.yaml: output_dir"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((dir_ / "afile" / "out" / "workers").string()), std::string::npos) << r.err;
  r = Spot({"train", "--nproc", "2", job.string(), "--log-dir", (dir_ / "afile" / "logs").string()},
           "launch-logs");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--log-dir: "), std::string::npos) << r.err;
}

// Checkpoints on a full disk: the workers fail with the disk's error, the
// controller gives up with that error instead of relaunching forever, and the
// job's state (kept on another disk) says FAILED and why.
TEST_F(RunTest, FullCheckpointDiskFailsTheJobClearly) {
  TwoZoneMarket();
  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1536k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  }
  // The job's directory (instances' local disks, durable tier, logs) on a
  // 1.5 MB disk: room for logs, none for a checkpoint (~2.5 MB of model and
  // Adam state). The controller's state is elsewhere.
  auto job = RunJob("full", "", "", 3000, "", "  state_dir: " + (dir_ / "state").string() + "\n");
  std::string yaml;
  {
    std::ifstream in(job);
    yaml.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const std::string out = "output_dir: " + (dir_ / "full").string();
  yaml.replace(yaml.find(out), out.size(), "output_dir: " + (small / "full").string());
  std::ofstream(job) << yaml;
  ProcessResult r = Spot({"run", job.string()}, "full");
  ::umount2(small.c_str(), MNT_DETACH);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto store = control::JobStore::Open((dir_ / "state" / "state.db").string());
  ASSERT_TRUE(store.ok());
  auto rec = (*store)->GetJob("full");
  ASSERT_TRUE(rec.ok() && *rec);
  EXPECT_EQ((*rec)->state, control::JobState::kFailed);
  EXPECT_NE((*rec)->message.find("No space left on device"), std::string::npos) << (*rec)->message;
}

}  // namespace
}  // namespace spot::testing
