// `spot run` with `provider: ec2` for real, against moto's EC2 server on
// loopback (signatures checked). The test plays the cloud: it watches moto
// for the instances the controller launched, reads each one's user data and
// runs that bootstrap script for real inside a network namespace standing in
// for the instance, whose only way out is a veth pair to this host; the
// controller advertises the host's end of it as its rendezvous address. The
// worker the script starts reaches the rendezvous over that link and trains.
// Mid-run the test reclaims the instance behind the controller's back (EC2
// TerminateInstances, and SIGKILL to everything its script started); the
// controller sees it at its next DescribeInstances, launches a replacement,
// whose bootstrap the test runs the same way, and that worker resumes from
// the durable tier. The job succeeds, and no credential is in any of its
// logs or records.
//
// Needs root (network namespaces) and moto (the project's .venv): skips
// loudly without them.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "apps/spot/e2e_support.h"
#include "aws/aws_testing.h"
#include "aws/aws_xml.h"
#include "cloud/ec2_provider.h"
#include "control/job_store.h"
#include "core/base64.h"
#include "core/job_files.h"
#include "core/process.h"
#include "core/process_cpu.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kIp[] = "/usr/sbin/ip";

// Runs `ip ARGS...`; true when it exits 0.
bool Ip(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv = {kIp};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult r = RunProcess(argv, log.string(), 30);
  return r.exit_code == 0;
}

// A network namespace joined to this host by a veth pair: the host's end has
// host_ip, the namespace's ns_ip (a /24 of their own). Deleted on
// destruction (its end of the pair goes with it).
class NetNamespace {
 public:
  NetNamespace(const fs::path& log_dir) : log_(log_dir / "netns") {
    const int n = static_cast<int>(getpid() % 200) + 20;
    name_ = fmt::format("spotec2-{}", getpid());
    host_if_ = fmt::format("se{}h", getpid());
    ns_if_ = fmt::format("se{}n", getpid());
    host_ip_ = fmt::format("10.213.{}.1", n);
    ns_ip_ = fmt::format("10.213.{}.2", n);
    ok_ = Ip({"netns", "add", name_}, log_) &&
          Ip({"link", "add", host_if_, "type", "veth", "peer", "name", ns_if_}, log_) &&
          Ip({"link", "set", ns_if_, "netns", name_}, log_) &&
          Ip({"addr", "add", host_ip_ + "/24", "dev", host_if_}, log_) &&
          Ip({"link", "set", host_if_, "up"}, log_) &&
          Ip({"netns", "exec", name_, kIp, "addr", "add", ns_ip_ + "/24", "dev", ns_if_}, log_) &&
          Ip({"netns", "exec", name_, kIp, "link", "set", ns_if_, "up"}, log_) &&
          Ip({"netns", "exec", name_, kIp, "link", "set", "lo", "up"}, log_);
  }
  ~NetNamespace() {
    Ip({"link", "del", host_if_}, log_);
    Ip({"netns", "del", name_}, log_);
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  const std::string& host_ip() const { return host_ip_; }
  const std::string& ns_ip() const { return ns_ip_; }
  std::string log() const {
    std::ifstream in(log_.string() + ".err");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  fs::path log_;
  std::string name_, host_if_, ns_if_, host_ip_, ns_ip_;
  bool ok_ = false;
};

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One instance as the test runs it: its bootstrap's session in the namespace.
struct Booted {
  std::string ec2_id;
  std::string our_id;  // the spot:instance tag
  std::string script;  // its user data
  fs::path log;
  int64_t session = 0;
};

class Ec2RunTest : public E2eTest {
 protected:
  void TearDown() override {
    for (auto& [id, b] : booted_) {
      if (b.session > 0) {
        SignalSession(b.session, SIGKILL);
        (void)StopProcess(b.session, 1, /*whole_group=*/true);
      }
    }
    E2eTest::TearDown();
  }

  // The running instances of job `job` in EC2 (moto): ec2 id -> our id.
  std::map<std::string, std::string> Running(cloud::Ec2Client& ec2, const std::string& job) {
    std::map<std::string, std::string> out;
    auto xml = ec2.Call("DescribeInstances", {{"Filter.1.Name", "tag:spot:job"},
                                              {"Filter.1.Value.1", job},
                                              {"Filter.2.Name", "instance-state-name"},
                                              {"Filter.2.Value.1", "running"}});
    EXPECT_TRUE(xml.ok()) << xml.status().ToString();
    if (!xml.ok()) return out;
    for (const cloud::Ec2InstanceState& s : cloud::ParseEc2Instances(*xml)) {
      out[s.instance_id] = s.tags.count("spot:instance") ? s.tags.at("spot:instance") : "";
    }
    return out;
  }

  // Reads the instance's user data from EC2 and runs it in the namespace,
  // in a session of its own (what a machine going away ends).
  void Boot(cloud::Ec2Client& ec2, const NetNamespace& ns, const std::string& ec2_id,
            const std::string& our_id) {
    Booted b{.ec2_id = ec2_id, .our_id = our_id};
    auto xml =
        ec2.Call("DescribeInstanceAttribute", {{"InstanceId", ec2_id}, {"Attribute", "userData"}});
    ASSERT_TRUE(xml.ok()) << xml.status().ToString();
    std::optional<std::string> script = Base64Decode(aws::XmlText(*xml, "value"));
    ASSERT_TRUE(script.has_value()) << *xml;
    b.script = *script;
    const fs::path path = dir_ / ("user-data-" + ec2_id + ".sh");
    std::ofstream(path) << b.script;
    b.log = dir_ / ("instance-" + ec2_id + ".log");
    auto pid = Spawn({.argv = {kIp, "netns", "exec", ns.name(), "/bin/bash", path.string()},
                      .log_path = b.log.string(),
                      .group = ProcessGroup::kNewSession});
    ASSERT_TRUE(pid.ok()) << pid.status().ToString();
    b.session = *pid;
    booted_[ec2_id] = std::move(b);
  }

  // Moto as EC2, its images, the namespace standing in for the instances,
  // and a job file of `steps` steps on one always-available zone (or, with
  // `run`, a command workload of `nodes` instances running that program).
  // The test is skipped (loudly) without root or moto; check Ready() after it.
  void SetUpCloud(const std::string& name, int steps, const std::string& run = "", int nodes = 1) {
    if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: creating a network namespace needs root";
    const fs::path venv = aws::VenvDir(SPOT_SOURCE_DIR);
    if (std::string why = aws::MotoSkipReason(venv); !why.empty()) {
      GTEST_SKIP() << "SKIPPED: no EC2 server (moto): " << why;
    }
    auto moto = aws::MotoServer::Start({.venv = venv, .log_path = dir_ / "moto.log"});
    ASSERT_TRUE(moto.ok()) << moto.status().ToString();
    moto_ = std::move(moto).value();
    config_ = moto_->Config();
    ec2_ = std::make_unique<cloud::Ec2Client>(
        config_, cloud::Ec2RetryOptions{
                     .max_attempts = 2, .initial_backoff_s = 0.01, .max_backoff_s = 0.02});
    auto images = ec2_->Call("DescribeImages", {});
    ASSERT_TRUE(images.ok()) << images.status().ToString();
    const std::vector<std::string> amis = aws::XmlTexts(*images, "item", "imageId");
    ASSERT_FALSE(amis.empty());
    ns_ = std::make_unique<NetNamespace>(dir_);
    ASSERT_TRUE(ns_->ok()) << ns_->log();

    // One zone moto offers m5.large in, always available; prices from EC2.
    json trace = {{"metadata", {{"gap_seconds", 60}}}, {"data", std::vector<int>(400, 1)}};
    std::ofstream(dir_ / "us-east-1a_m5.large.json") << trace.dump();
    job_dir_ = dir_ / name;
    const std::string workload =
        run.empty()
            ? fmt::format(
                  "train:\n  model: mlp\n  dataset:\n    path: {data}\n    train_limit: 12000\n"
                  "  batch_size: 32\n  steps: {steps}\n  seed: 7\n  threads: 1\n"
                  "  optimizer:\n    type: adam\n    lr: 0.002\n"
                  "  checkpoint:\n    interval: steps\n    interval_steps: 50\n"
                  "    durable_dir: {durable}\n"
                  "  distributed:\n    collective_timeout_s: 3\n  output_dir: {out}\n",
                  fmt::arg("data", kDataset), fmt::arg("steps", steps),
                  fmt::arg("durable", (dir_ / "durable").string()),
                  fmt::arg("out", job_dir_.string()))
            : fmt::format("run: {run}\nworkdir: {dir}\noutput_dir: {out}\n", fmt::arg("run", run),
                          fmt::arg("dir", dir_.string()), fmt::arg("out", job_dir_.string()));
    const std::string yaml = fmt::format(
        "name: {name}\npolicy: greedy\ncompute_hours: 0.3\ndeadline_hours: 3\n"
        "provider:\n  name: ec2\n  image_id: {ami}\n  region: us-east-1\n  poll_interval_s: 30\n"
        "resources:\n  instance_type: m5.large\n  region: us-east-1\n  nodes: {nodes}\n"
        "  min_nodes: {nodes}\n  ondemand_price: 0.096\n  changeover_hours: 0.02\n"
        "market:\n  traces:\n    - {trace}\n  time_compression: 60\n  notice_seconds: 120\n"
        "controller:\n  reconcile_interval_s: 0.05\n  terminate_grace_s: 1\n"
        "  advertise_host: {host}\n{workload}",
        fmt::arg("name", name), fmt::arg("ami", amis.front()), fmt::arg("nodes", nodes),
        fmt::arg("trace", (dir_ / "us-east-1a_m5.large.json").string()),
        fmt::arg("host", ns_->host_ip()), fmt::arg("workload", workload));
    job_ = WriteJob(name, yaml);
  }
  bool Ready() const { return !IsSkipped() && !HasFatalFailure() && ec2_ && ns_; }

  // `spot run` of the job with moto as EC2 and its credentials: only the
  // controller gets them (the instances' scripts are started without them).
  std::unique_ptr<ChildProcess> StartController(const std::string& log_name) {
    const std::pair<const char*, std::string> env[] = {
        {"AWS_ENDPOINT_URL", config_.endpoint},
        {"AWS_REGION", config_.region},
        {"AWS_ACCESS_KEY_ID", config_.credentials.access_key_id},
        {"AWS_SECRET_ACCESS_KEY", config_.credentials.secret_access_key}};
    for (const auto& [k, v] : env) ::setenv(k, v.c_str(), 1);
    auto controller = std::make_unique<ChildProcess>(
        std::vector<std::string>{SPOT_BIN, "run", job_.string()}, (dir_ / log_name).string());
    for (const auto& [k, v] : env) ::unsetenv(k);
    return controller;
  }

  // Boots every instance of the job running in EC2 that is not booted yet.
  void BootNew(const std::string& job) {
    for (const auto& [ec2_id, our_id] : Running(*ec2_, job)) {
      if (!booted_.count(ec2_id)) Boot(*ec2_, *ns_, ec2_id, our_id);
    }
  }

  // No credential in any log or record of the job, nor in what the test kept.
  void ExpectNoSecretAnywhere(const ProcessResult& r) {
    const std::string& secret = config_.credentials.secret_access_key;
    EXPECT_EQ(r.out.find(secret), std::string::npos);
    EXPECT_EQ(r.err.find(secret), std::string::npos);
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      // The server's own log and key files are the test's, not the job's.
      if (!e.is_regular_file() || e.path().filename().string().starts_with("moto.log")) continue;
      EXPECT_EQ(ReadText(e.path()).find(secret), std::string::npos) << e.path();
    }
  }

  std::unique_ptr<aws::MotoServer> moto_;
  aws::AwsConfig config_;
  std::unique_ptr<cloud::Ec2Client> ec2_;
  std::unique_ptr<NetNamespace> ns_;
  fs::path job_dir_, job_;
  std::map<std::string, Booted> booted_;
};

TEST_F(Ec2RunTest, BootstrapRunsInANamespaceTrainsAndAReplacementResumes) {
  const std::string name = "ec2";
  SetUpCloud(name, 3000);
  if (!Ready()) return;
  cloud::Ec2Client& ec2 = *ec2_;
  const fs::path& job_dir = job_dir_;
  std::unique_ptr<ChildProcess> running = StartController("run");
  ChildProcess& controller = *running;

  const fs::path step_log = JobFiles{job_dir.string()}.step_log();
  std::string reclaimed;  // the ec2 id taken behind the controller's back
  for (int i = 0; i < 6000 && controller.Running(); ++i) {  // 10 minutes at most
    BootNew(name);
    if (reclaimed.empty() && booted_.size() == 1 && LastLoggedStep(step_log) >= 200) {
      reclaimed = booted_.begin()->first;
      auto t = ec2.Call("TerminateInstances", {{"InstanceId.1", reclaimed}});
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      SignalSession(booted_.begin()->second.session, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ProcessResult r = controller.Wait(60);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream summary_in(job_dir / "run-summary.json");
  json s = json::parse(summary_in);
  EXPECT_EQ(s["state"], "SUCCEEDED") << s.dump();
  ASSERT_FALSE(reclaimed.empty()) << "the job ended before the reclaim";
  EXPECT_GE(s["launches"].get<int>(), 2) << s.dump();
  // The controller saw the reclaim in DescribeInstances: a preempt event
  // naming the EC2 instance, and the instance ended as preempted.
  auto store = control::JobStore::Open((job_dir / "controller" / "state.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto events = (*store)->Events(name);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  std::string reclaimed_id;
  for (const control::EventRecord& e : *events) {
    if (e.kind == "preempt" && e.detail.find(reclaimed) != std::string::npos) {
      reclaimed_id = e.instance_id;
    }
  }
  ASSERT_FALSE(reclaimed_id.empty()) << "no preempt event names " << reclaimed;
  EXPECT_EQ(reclaimed_id, booted_.at(reclaimed).our_id);
  auto instances = (*store)->Instances(name, false);
  ASSERT_TRUE(instances.ok()) << instances.status().ToString();
  for (const control::InstanceRecord& i : *instances) {
    if (i.id == reclaimed_id) {
      EXPECT_EQ(i.end_reason, "preempted");
    }
  }

  // Two instances booted from their user data: the first, then the
  // replacement, each told the rendezvous at the namespace link's host end.
  ASSERT_GE(booted_.size(), 2u);
  const std::string rendezvous = "export SPOT_RENDEZVOUS='tcp://" + ns_->host_ip() + ":";
  int resumed = 0;
  for (const auto& [ec2_id, b] : booted_) {
    EXPECT_NE(b.script.find(rendezvous), std::string::npos) << b.script;
    EXPECT_NE(b.script.find("export SPOT_INSTANCE_ID='" + b.our_id + "'"), std::string::npos);
    EXPECT_NE(b.script.find("'--id' '" + b.our_id + "'"), std::string::npos) << b.script;
    if (ec2_id == reclaimed) continue;
    resumed += ReadText(b.log).find("resuming from checkpoint") != std::string::npos;
  }
  EXPECT_GE(resumed, 1) << "no replacement resumed from the durable tier";

  // The monitor scraped the workers where they published their /metrics:
  // the namespace's address (a scrape of 127.0.0.1 on this host reaches
  // nothing there), giving each instance's busy series.
  int scraped = 0;
  for (const auto& [ec2_id, b] : booted_) {
    EXPECT_NE(ReadText(b.log).find("metrics at http://" + ns_->ns_ip() + ":"), std::string::npos)
        << b.log;
    auto busy = (*store)->Samples(name, "busy/" + b.our_id);
    ASSERT_TRUE(busy.ok()) << busy.status().ToString();
    scraped += busy->empty() ? 0 : 1;
    for (const auto& sample : *busy) {
      EXPECT_GE(sample.value, 0);
      EXPECT_LE(sample.value, 1);
    }
  }
  EXPECT_GE(scraped, 1) << "no worker in the namespace was scraped";

  ExpectNoSecretAnywhere(r);
}

// A command workload (`run:`) of two instances in the namespace: each rank
// reports its steps to the controller's API at the address the instances
// were told (advertise_host, with the token from SPOT_TOKEN_FILE), rank 0's
// address is the namespace's, every instance takes all the CPUs it may run
// on (an EC2 instance is a machine of its own: OMP_NUM_THREADS is not this
// machine's CPUs over the job's nodes), and the monitor scrapes the agents
// in the namespace.
TEST_F(Ec2RunTest, ACommandWorkloadsReportsReachTheControllerFromTheNamespace) {
  const std::string name = "ec2cmd";
  const fs::path script = dir_ / "report.sh";
  std::ofstream(script) << R"sh(#!/bin/sh
set -eu
env | grep -E '^(OMP_NUM_THREADS|SPOT_CONTROLLER_URL|MASTER_ADDR)=' > "env.$SPOT_INSTANCE"
step=0
while [ "$step" -lt 40 ]; do
  sleep 0.2
  step=$((step + 1))
  fin=false; [ "$step" -eq 40 ] && fin=true
  if [ "$RANK" -eq 0 ]; then
    curl -sSf -X POST -H "Authorization: Bearer $(cat "$SPOT_TOKEN_FILE")" \
      -H 'Content-Type: application/json' \
      -d "{\"instance\":\"$SPOT_INSTANCE\",\"rank\":0,\"step\":$step,\"total_steps\":40,\"done\":$fin}" \
      "$SPOT_CONTROLLER_URL/api/v1/jobs/$SPOT_JOB/report" > /dev/null
  fi
done
)sh";
  fs::permissions(script, fs::perms::owner_all);
  SetUpCloud(name, 0, "./report.sh", 2);
  if (!Ready()) return;
  std::unique_ptr<ChildProcess> controller = StartController("run");
  for (int i = 0; i < 3000 && controller->Running(); ++i) {  // 5 minutes at most
    BootNew(name);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ProcessResult r = controller->Wait(60);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream summary_in(job_dir_ / "run-summary.json");
  json s = json::parse(summary_in);
  EXPECT_EQ(s["state"], "SUCCEEDED") << s.dump();
  ASSERT_EQ(booted_.size(), 2u);

  // Rank 0's reports (40, more if a gang change restarted it) reached the
  // controller, the last one done.
  std::ifstream reports(job_dir_ / "reports.jsonl");
  std::vector<json> lines;
  for (std::string line; std::getline(reports, line);) lines.push_back(json::parse(line));
  ASSERT_GE(lines.size(), 40u);
  EXPECT_EQ(lines.back()["step"], 40);
  EXPECT_EQ(lines.back()["done"], true);

  const std::string api = "SPOT_CONTROLLER_URL=http://" + ns_->host_ip() + ":";
  const std::string cpus = "OMP_NUM_THREADS=" + std::to_string(AvailableCpus()) + "\n";
  auto store = control::JobStore::Open((job_dir_ / "controller" / "state.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  int scraped = 0;
  for (const auto& [ec2_id, b] : booted_) {
    const std::string env = ReadText(dir_ / ("env." + b.our_id));
    EXPECT_NE(env.find(api), std::string::npos) << env;
    EXPECT_NE(env.find("MASTER_ADDR=" + ns_->ns_ip() + "\n"), std::string::npos) << env;
    EXPECT_NE(env.find(cpus), std::string::npos) << env;
    EXPECT_EQ(b.script.find(ReadText(job_dir_ / "controller" / "api.token").substr(0, 64)),
              std::string::npos)
        << "the API token is in the user data";
    auto busy = (*store)->Samples(name, "busy/" + b.our_id);
    ASSERT_TRUE(busy.ok()) << busy.status().ToString();
    scraped += busy->empty() ? 0 : 1;
  }
  EXPECT_GE(scraped, 1) << "no agent in the namespace was scraped";
  ExpectNoSecretAnywhere(r);
}

// A controller SIGKILLed mid-job: the EC2 instance (and the rendezvous) run
// on; `spot run` again adopts the instance it finds by its tags, launches
// nothing, and the job finishes on the same instance.
TEST_F(Ec2RunTest, AKilledControllerAdoptsItsInstanceAndFinishes) {
  const std::string name = "ec2adopt";
  SetUpCloud(name, 1500);
  if (!Ready()) return;
  const fs::path step_log = JobFiles{job_dir_.string()}.step_log();
  {
    std::unique_ptr<ChildProcess> first = StartController("first");
    for (int i = 0; i < 3000 && first->Running() && LastLoggedStep(step_log) < 200; ++i) {
      BootNew(name);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_GE(LastLoggedStep(step_log), 200) << "the job did not get going";
    first->Kill(SIGKILL);
    first->Wait(10);
  }
  ASSERT_EQ(booted_.size(), 1u);
  const std::string ec2_id = booted_.begin()->first;
  EXPECT_EQ(Running(*ec2_, name).count(ec2_id), 1u) << "the instance should outlive its controller";
  std::unique_ptr<ChildProcess> second = StartController("second");
  for (int i = 0; i < 6000 && second->Running(); ++i) {
    BootNew(name);  // a launch would show here
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ProcessResult r = second->Wait(60);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream summary_in(job_dir_ / "run-summary.json");
  json s = json::parse(summary_in);
  EXPECT_EQ(s["state"], "SUCCEEDED") << s.dump();
  EXPECT_TRUE(s["resumed"].get<bool>()) << s.dump();
  EXPECT_EQ(s["launches"].get<int>(), 0) << "the second controller launched instead of adopting";
  EXPECT_EQ(booted_.size(), 1u) << "a second instance was launched";
  EXPECT_EQ(ReadText(booted_.at(ec2_id).log).find("resuming from checkpoint"), std::string::npos)
      << "the adopted worker should have trained on without a restart";
  EXPECT_EQ(Running(*ec2_, name).count(ec2_id), 0u) << "the instance was not given back";
  ExpectNoSecretAnywhere(r);
}

}  // namespace
}  // namespace spot::testing
