// The Slurm provider against a real cluster (slurm_testing.h: munged,
// slurmctld and two slurmd nodes in network namespaces), plus its pure parts.
#include "cloud/slurm_provider.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "cloud/provider_registry.h"
#include "cloud/slurm_testing.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::cloud {
namespace {

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double MTime(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
}

// ---- Pure parts ----------------------------------------------------------

TEST(SlurmCliTest, ParsesSqueueLinesAndWaitStatuses) {
  Result<std::vector<SlurmJobState>> jobs = ParseSqueue(
      "9|FAILED|NonZeroExitCode|node1|36608|2026-12-03T13:36:21|2026-12-03T13:36:19|\n"
      "5|CANCELLED|None|node2|15|N/A|2026-12-03T13:35:00|\n"
      "3|PENDING|PartitionConfig||0|N/A|N/A|\n"
      "1|COMPLETED|None|node1|0|N/A|2026-12-03T13:34:50|\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 4u);
  EXPECT_EQ((*jobs)[0].job_id, "9");
  EXPECT_EQ((*jobs)[0].exit_code, 143);  // 36608 = 143 << 8
  EXPECT_EQ((*jobs)[0].preempt_time, "2026-12-03T13:36:21");
  EXPECT_EQ((*jobs)[1].signal, 15);
  EXPECT_EQ((*jobs)[1].exit_code, -1);
  EXPECT_EQ((*jobs)[2].reason, "PartitionConfig");
  EXPECT_EQ((*jobs)[2].exit_code, -1);  // not ended: no exit code yet
  EXPECT_EQ((*jobs)[2].preempt_time, "");
  EXPECT_EQ((*jobs)[3].exit_code, 0);
  EXPECT_EQ(ParseSqueue("9|RUNNING|None|\n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSqueue("9|RUNNING|None|n|x|N/A|N/A|\n").status().code(),
            StatusCode::kInvalidArgument);

  Result<std::vector<SlurmJobState>> acct =
      ParseSacct("12|COMPLETED|0:0\n13|CANCELLED by 0|0:15\n14|FAILED|3:0\n");
  ASSERT_TRUE(acct.ok()) << acct.status().ToString();
  EXPECT_EQ((*acct)[0].exit_code, 0);
  EXPECT_EQ((*acct)[1].state, "CANCELLED");
  EXPECT_EQ((*acct)[1].signal, 15);
  EXPECT_EQ((*acct)[2].exit_code, 3);
  EXPECT_EQ(ParseSacct("12|COMPLETED\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(SlurmCliTest, MapsSubmissionErrorsAndPendingReasons) {
  Status bad = MapSbatchError("sbatch of i-1",
                              "sbatch: error: invalid partition specified: nope\n"
                              "sbatch: error: Batch job submission failed: Invalid partition name "
                              "specified\n");
  EXPECT_EQ(bad.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(bad.message(),
            "sbatch of i-1: Batch job submission failed: Invalid partition name specified");
  EXPECT_EQ(MapSbatchError("x",
                           "sbatch: error: Batch job submission failed: Job violates "
                           "accounting/QOS policy (job submit limit, user's size and/or time "
                           "limits)\n")
                .code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(MapSbatchError("x",
                           "sbatch: error: Batch job submission failed: Unable to contact "
                           "slurm controller (connect failure)\n")
                .code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(MapSbatchError("x", "").message(), "x: sbatch failed and said nothing");

  EXPECT_EQ(ClassifyPendingReason("Resources"), PendingOutlook::kWaits);
  EXPECT_EQ(ClassifyPendingReason("Priority"), PendingOutlook::kWaits);
  EXPECT_EQ(ClassifyPendingReason("None"), PendingOutlook::kWaits);
  EXPECT_EQ(ClassifyPendingReason("PartitionConfig"), PendingOutlook::kNever);
  EXPECT_EQ(ClassifyPendingReason("PartitionDown"), PendingOutlook::kNotNow);
  EXPECT_EQ(ClassifyPendingReason("ReqNodeNotAvail,_UnavailableNodes:node3"),
            PendingOutlook::kNotNow);

  EXPECT_EQ(*ParseSbatchJobId("123\n"), "123");
  EXPECT_EQ(*ParseSbatchJobId("77;cluster\n"), "77");
  EXPECT_FALSE(ParseSbatchJobId("Submitted batch job 5").ok());
  EXPECT_EQ(*DecodeSlurmInstanceData(EncodeSlurmInstanceData("42")), "42");
  EXPECT_EQ(DecodeSlurmInstanceData("{\"pid\": 3}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseSlurmTime("N/A").ok());
  EXPECT_TRUE(ParseSlurmTime("2026-12-03T13:36:21").ok());
}

TEST(SlurmProviderFactoryTest, RefusesBadOptionsNamingTheField) {
  ProviderContext ctx;
  ctx.instances_dir = "/tmp/x";
  ctx.command = [](const InstanceSpec&, const std::string&) {
    return std::vector<std::string>{"/bin/true"};
  };
  Result<std::unique_ptr<Provider>> p = MakeSlurmProvider({}, ctx);
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("partition"), std::string::npos);
  p = MakeSlurmProvider({.partition = "spot", .slurm_conf = "/nonexistent/slurm.conf"}, ctx);
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("slurm_conf"), std::string::npos);
  p = MakeSlurmProvider({.partition = "spot", .bin_dir = "/nonexistent"}, ctx);
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("sbatch"), std::string::npos);
}

bool HasKind(const std::vector<ProviderEvent>& e, ProviderEvent::Kind k) {
  for (const ProviderEvent& x : e) {
    if (x.kind == k) return true;
  }
  return false;
}

TEST(SlurmProviderFactoryTest, ReadsItsJobFileParameters) {
  SlurmProviderOptions o;
  ComponentConfig c{.name = "slurm",
                    .params = {{"partition", "spot"},
                               {"qos", "low"},
                               {"cpus_per_task", "4"},
                               {"signal_before_s", "120"}},
                    .field = "provider",
                    .lists = {{"sbatch_args", {"--gres=gpu:1", "--mem=8G"}}}};
  Status st = ReadParams(c, [&](FieldVisitor& v) { DeclareFields(o, v); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(o.partition, "spot");
  EXPECT_EQ(o.qos, "low");
  EXPECT_EQ(o.cpus_per_task, 4);
  EXPECT_EQ(o.signal_before_s, 120);
  EXPECT_EQ(o.sbatch_args, (std::vector<std::string>{"--gres=gpu:1", "--mem=8G"}));
  EXPECT_EQ(o.poll_interval_s, 10);  // the default
  c.params = {{"cpus_per_task", "0"}};
  c.lists.clear();
  st = ReadParams(c, [&](FieldVisitor& v) { DeclareFields(o, v); });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cpus_per_task"), std::string::npos) << st.ToString();
}

// ---- Against a real cluster ---------------------------------------------

class SlurmProviderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = SlurmCluster::Unsupported();
    if (!skip_.empty()) return;
    Result<std::unique_ptr<SlurmCluster>> c = SlurmCluster::Start({.nodes = 2, .grace_time_s = 5});
    if (c.ok()) {
      cluster_ = std::move(c).value();
    } else {
      start_error_ = c.status().ToString();
    }
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    if (!skip_.empty()) {
      GTEST_SKIP() << "SKIPPED: no Slurm cluster can run here: " << skip_
                   << " (run as root after scripts/install-deps.sh)";
    }
    ASSERT_NE(cluster_, nullptr) << "the Slurm cluster did not start: " << start_error_;
    auto dir = TempDir::Create("spot-slurm-instances");
    ASSERT_TRUE(dir.ok());
    instances_.emplace(std::move(dir).value());
    epoch_ = WallNow();
  }
  void TearDown() override {
    if (cluster_ != nullptr) {
      Status st = cluster_->CancelAll(30);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }

  // A provider whose instances run `/bin/sh -c script` in their directory.
  std::unique_ptr<Provider> MakeProvider(const std::string& script, SlurmProviderOptions o = {}) {
    if (o.partition.empty()) o.partition = "spot";
    o.slurm_conf = cluster_->conf_path();
    o.poll_interval_s = 0;
    o.signal_before_s = 30;
    o.job = "slurm-test";
    ProviderContext ctx;
    ctx.instances_dir = instances_->path().string();
    ctx.command = [script](const InstanceSpec&, const std::string&) {
      return std::vector<std::string>{"/bin/sh", "-c", script};
    };
    ctx.wall_epoch_unix_s = epoch_;
    ctx.time_compression = 1;
    Result<std::unique_ptr<Provider>> p = MakeSlurmProvider(o, ctx);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  double Now() const { return WallNow() - epoch_; }
  std::string Local(const std::string& id, const std::string& file) const {
    return (instances_->path() / id / file).string();
  }
  // Polls (each call one squeue) until `done` holds for what was collected,
  // or 60 s pass.
  std::vector<ProviderEvent> PollUntil(
      Provider& p, const std::function<bool(const std::vector<ProviderEvent>&)>& done) {
    std::vector<ProviderEvent> all;
    for (double until = WallNow() + 60; WallNow() < until;) {
      std::vector<ProviderEvent> polled = p.Poll(Now()).value();
      for (ProviderEvent& e : polled) all.push_back(std::move(e));
      if (done(all)) return all;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "no expected event within 60 s; Slurm logs:\n" << cluster_->LogTail();
    return all;
  }
  // Waits until the instance's program has written `file` in its directory.
  bool WaitForFile(const std::string& path) {
    for (double until = WallNow() + 60; WallNow() < until;) {
      if (std::filesystem::exists(path)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << path << " not written within 60 s; Slurm logs:\n" << cluster_->LogTail();
    return false;
  }
  InstanceView ViewOf(const Provider& p, const std::string& id) {
    for (const InstanceView& v : p.List()) {
      if (v.spec.id == id) return v;
    }
    ADD_FAILURE() << "no instance " << id;
    return {};
  }
  std::string JobState(const std::string& job_id) {
    Result<CliOutput> r = cluster_->Tool(
        "squeue", {"--states=all", "--noheader", "--jobs=" + job_id, "--Format=State"});
    return r.ok() ? std::string(r->out.substr(0, r->out.find_first_of(" \n"))) : "";
  }

  // Submits an urgent job for the node the instance's program said it runs
  // on: it preempts the instance's job.
  Status PreemptNodeOf(const std::string& id) {
    SPOT_ASSIGN_OR_RETURN(std::string node, ReadFile(Local(id, "node")));
    node = node.substr(0, node.find('\n'));
    SPOT_ASSIGN_OR_RETURN(
        CliOutput r,
        cluster_->Tool("sbatch", {"--parsable", "--partition=urgent", "--nodelist=" + node,
                                  "--output=/dev/null", "--wrap=sleep 1"}));
    if (r.exit_code != 0) return InternalError("urgent sbatch: " + r.err);
    return Status::Ok();
  }

  // The job's state once it is `want`, or its last state after 30 s.
  std::string WaitForJobState(const std::string& job_id, const std::string& want) {
    std::string state = JobState(job_id);
    for (double until = WallNow() + 30; state != want && WallNow() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      state = JobState(job_id);
    }
    return state;
  }

  static inline std::string skip_;
  static inline std::string start_error_;
  static inline std::unique_ptr<SlurmCluster> cluster_;
  std::optional<TempDir> instances_;
  double epoch_ = 0;
};

// The program says where it runs, then waits to be ended.
constexpr char kNodeThenWait[] =
    "echo \"$SLURMD_NODENAME\" > node.tmp && mv node.tmp node; "
    "while :; do sleep 0.2; done";

TEST_F(SlurmProviderTest, LaunchesTwoInstancesOnTwoNodesListsAndTerminates) {
  std::unique_ptr<Provider> p = MakeProvider(kNodeThenWait);
  ASSERT_NE(p, nullptr);
  Result<InstanceView> a = p->Launch({.id = "i-a"}, Now());
  Result<InstanceView> b = p->Launch({.id = "i-b"}, Now());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->state, InstanceState::kRunning);
  EXPECT_NE(a->provider_data, b->provider_data);
  EXPECT_EQ(p->Launch({.id = "i-a"}, Now()).status().code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(WaitForFile(Local("i-a", "node")));
  ASSERT_TRUE(WaitForFile(Local("i-b", "node")));
  Result<std::string> node_a = ReadFile(Local("i-a", "node"));
  Result<std::string> node_b = ReadFile(Local("i-b", "node"));
  ASSERT_TRUE(node_a.ok() && node_b.ok());
  EXPECT_NE(*node_a, *node_b) << "both jobs ran on " << *node_a;
  EXPECT_TRUE(*node_a == "node1\n" || *node_a == "node2\n") << *node_a;

  std::vector<ProviderEvent> none = p->Poll(Now()).value();
  EXPECT_TRUE(none.empty()) << none.front().detail;
  std::vector<InstanceView> list = p->List();
  ASSERT_EQ(list.size(), 2u);
  for (const InstanceView& v : list) {
    EXPECT_EQ(v.state, InstanceState::kRunning) << v.spec.id;
    EXPECT_TRUE(v.process_running) << v.spec.id;
  }

  const std::string job_a = *DecodeSlurmInstanceData(a->provider_data);
  ASSERT_TRUE(p->Terminate("i-a", Now()).ok());
  EXPECT_EQ(ViewOf(*p, "i-a").state, InstanceState::kTerminated);
  EXPECT_GE(ViewOf(*p, "i-a").ended_s, 0);
  EXPECT_TRUE(p->Terminate("i-a", Now()).ok());  // again: nothing to do
  EXPECT_EQ(p->Terminate("i-zz", Now()).code(), StatusCode::kNotFound);
  EXPECT_EQ(WaitForJobState(job_a, "CANCELLED"), "CANCELLED");
  // Our own cancellation is no event; the other instance still runs.
  std::vector<ProviderEvent> after = p->Poll(Now()).value();
  EXPECT_TRUE(after.empty()) << after.front().detail;
  EXPECT_EQ(ViewOf(*p, "i-b").state, InstanceState::kRunning);
}

TEST_F(SlurmProviderTest, OnDemandInstancesGoToTheOnDemandPartition) {
  std::unique_ptr<Provider> p = MakeProvider(kNodeThenWait, {.ondemand_partition = "spotlong"});
  ASSERT_NE(p, nullptr);
  Result<InstanceView> od = p->Launch({.id = "i-od", .spot = false}, Now());
  Result<InstanceView> sp = p->Launch({.id = "i-sp"}, Now());
  ASSERT_TRUE(od.ok()) << od.status().ToString();
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  auto partition_of = [&](const InstanceView& v) {
    Result<CliOutput> r =
        cluster_->Tool("squeue", {"--states=all", "--noheader", "--format=%P",
                                  "--jobs=" + *DecodeSlurmInstanceData(v.provider_data)});
    return r.ok() ? r->out.substr(0, r->out.find_first_of(" \n")) : r.status().ToString();
  };
  EXPECT_EQ(partition_of(*od), "spotlong");
  EXPECT_EQ(partition_of(*sp), "spot");
  // Without ondemand_partition, on-demand instances share `partition`.
  std::unique_ptr<Provider> same = MakeProvider(kNodeThenWait);
  ASSERT_NE(same, nullptr);
  ASSERT_TRUE(p->Terminate("i-od", Now()).ok());
  Result<InstanceView> od2 = same->Launch({.id = "i-od2", .spot = false}, Now());
  ASSERT_TRUE(od2.ok()) << od2.status().ToString();
  EXPECT_EQ(partition_of(*od2), "spot");
}

TEST_F(SlurmProviderTest, ReportsTheProgramsExitCode) {
  std::unique_ptr<Provider> p = MakeProvider("echo \"$SPOT_INSTANCE_ID\" > id; exit 7");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Launch({.id = "i-7"}, Now()).ok());
  std::vector<ProviderEvent> ev =
      PollUntil(*p, [](const std::vector<ProviderEvent>& e) { return !e.empty(); });
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kExited) << ev[0].detail;
  EXPECT_EQ(ev[0].instance_id, "i-7");
  EXPECT_NE(ev[0].detail.find("FAILED"), std::string::npos) << ev[0].detail;
  InstanceView v = ViewOf(*p, "i-7");
  EXPECT_EQ(v.exit_code, 7);
  EXPECT_FALSE(v.process_running);
  EXPECT_EQ(v.state, InstanceState::kTerminated);
  EXPECT_EQ(*ReadFile(Local("i-7", "id")), "i-7\n");
  EXPECT_TRUE(p->Terminate("i-7", Now()).ok());

  // A program that succeeds: exit code 0, COMPLETED.
  std::unique_ptr<Provider> ok = MakeProvider("exit 0");
  ASSERT_NE(ok, nullptr);
  ASSERT_TRUE(ok->Launch({.id = "i-ok"}, Now()).ok());
  ev = PollUntil(*ok, [](const std::vector<ProviderEvent>& e) { return !e.empty(); });
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kExited);
  EXPECT_NE(ev[0].detail.find("COMPLETED"), std::string::npos) << ev[0].detail;
  EXPECT_EQ(ViewOf(*ok, "i-ok").exit_code, 0);
}

TEST_F(SlurmProviderTest, AdoptsAfterARestartAndFindsEndedJobsGone) {
  std::unique_ptr<Provider> first = MakeProvider(kNodeThenWait);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Launch({.id = "i-keep"}, Now()).ok());
  ASSERT_TRUE(WaitForFile(Local("i-keep", "node")));
  ASSERT_TRUE(first->Poll(Now()).value().empty());
  const InstanceView recorded = ViewOf(*first, "i-keep");
  first.reset();  // the controller "restarts": the job runs on

  std::unique_ptr<Provider> second = MakeProvider(kNodeThenWait);
  Status st = second->Adopt(recorded, Now());
  ASSERT_TRUE(st.ok()) << st.ToString();
  InstanceView v = ViewOf(*second, "i-keep");
  EXPECT_EQ(v.state, InstanceState::kRunning);
  EXPECT_TRUE(v.process_running);
  EXPECT_EQ(v.launched_s, recorded.launched_s);
  EXPECT_TRUE(second->Poll(Now()).value().empty());
  ASSERT_TRUE(second->Terminate("i-keep", Now()).ok());
  const std::string job = *DecodeSlurmInstanceData(recorded.provider_data);
  ASSERT_EQ(WaitForJobState(job, "CANCELLED"), "CANCELLED");

  // A third controller finds it gone (cancelled), as it does an unknown job.
  std::unique_ptr<Provider> third = MakeProvider(kNodeThenWait);
  st = third->Adopt(recorded, Now());
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("CANCELLED"), std::string::npos) << st.ToString();
  EXPECT_EQ(ViewOf(*third, "i-keep").state, InstanceState::kLost);
  InstanceView unknown = recorded;
  unknown.spec.id = "i-unknown";
  unknown.provider_data = EncodeSlurmInstanceData("999999");
  st = third->Adopt(unknown, Now());
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  unknown.provider_data = "{}";
  EXPECT_EQ(third->Adopt(unknown, Now()).code(), StatusCode::kInvalidArgument);
}

TEST_F(SlurmProviderTest, AJobThatCannotStartIsReportedWithSlurmsReason) {
  // sbatch refuses: a partition that does not exist.
  std::unique_ptr<Provider> nope = MakeProvider(kNodeThenWait, {.partition = "nope"});
  Result<InstanceView> r = nope->Launch({.id = "i-nope"}, Now());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("Invalid partition name specified"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(nope->List().empty());

  // Accepted, but larger than any node: PartitionConfig, never.
  std::unique_ptr<Provider> big = MakeProvider(kNodeThenWait, {.cpus_per_task = 64});
  r = big->Launch({.id = "i-big"}, Now());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("PartitionConfig"), std::string::npos)
      << r.status().ToString();

  // Accepted into a partition that is down: not now.
  std::unique_ptr<Provider> down = MakeProvider(kNodeThenWait, {.partition = "closed"});
  r = down->Launch({.id = "i-down"}, Now());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("PartitionDown"), std::string::npos) << r.status().ToString();

  // Waiting for resources beyond the start timeout: cancelled and reported.
  std::unique_ptr<Provider> p = MakeProvider(kNodeThenWait, {.start_timeout_s = 1000});
  ASSERT_TRUE(p->Launch({.id = "i-1"}, Now()).ok());
  ASSERT_TRUE(p->Launch({.id = "i-2"}, Now()).ok());
  Result<InstanceView> waiting = p->Launch({.id = "i-3"}, Now());
  ASSERT_TRUE(waiting.ok()) << waiting.status().ToString();
  const std::string job = *DecodeSlurmInstanceData(waiting->provider_data);
  ASSERT_TRUE(WaitForFile(Local("i-1", "node")));
  ASSERT_TRUE(WaitForFile(Local("i-2", "node")));
  // The scheduler has looked at it once its Reason is Resources.
  std::string reason;
  for (double until = WallNow() + 30; reason != "Resources" && WallNow() < until;) {
    Result<CliOutput> q = cluster_->Tool("squeue", {"--noheader", "--jobs=" + job, "--format=%r"});
    if (q.ok()) reason = q->out.substr(0, q->out.find('\n'));
  }
  ASSERT_EQ(reason, "Resources");
  EXPECT_TRUE(p->Poll(Now()).value().empty());
  EXPECT_FALSE(ViewOf(*p, "i-3").process_running);
  std::vector<ProviderEvent> ev = p->Poll(Now() + 1001).value();  // past the start timeout
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(ev[0].instance_id, "i-3");
  EXPECT_NE(ev[0].detail.find("did not start within 1000 s: PENDING (Resources)"),
            std::string::npos)
      << ev[0].detail;
  EXPECT_EQ(WaitForJobState(job, "CANCELLED"), "CANCELLED");
}

TEST_F(SlurmProviderTest, PreemptionSendsSigtermWithGraceAndIsReported) {
  // The program saves on SIGTERM (the marker), then leaves.
  std::unique_ptr<Provider> p =
      MakeProvider("trap 'echo saved > marker.tmp && mv marker.tmp marker; exit 0' TERM; " +
                   std::string(kNodeThenWait));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Launch({.id = "i-victim"}, Now()).ok());
  ASSERT_TRUE(p->Launch({.id = "i-other"}, Now()).ok());
  ASSERT_TRUE(WaitForFile(Local("i-victim", "node")));
  ASSERT_TRUE(WaitForFile(Local("i-other", "node")));
  // An urgent job for the victim's node preempts it.
  const double submitted = WallNow();
  Status st = PreemptNodeOf("i-victim");
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<ProviderEvent> ev = PollUntil(*p, [](const std::vector<ProviderEvent>& e) {
    return HasKind(e, ProviderEvent::Kind::kPreempted);
  });
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(ev[0].instance_id, "i-victim");
  EXPECT_EQ(ev[1].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(ev[1].instance_id, "i-victim");
  EXPECT_NE(ev[1].detail.find("preempted"), std::string::npos) << ev[1].detail;
  // The program got SIGTERM and saved within the grace (it exited 0 itself,
  // before any SIGKILL).
  EXPECT_EQ(*ReadFile(Local("i-victim", "marker")), "saved\n");
  std::cout << "preemption: urgent job submitted to marker written "
            << MTime(Local("i-victim", "marker")) - submitted << " s (GraceTime 5 s)\n";
  InstanceView v = ViewOf(*p, "i-victim");
  EXPECT_EQ(v.state, InstanceState::kPreempted);
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_FALSE(v.process_running);
  EXPECT_GE(v.notice_s, v.launched_s);
  EXPECT_LE(v.notice_s, v.ended_s);
  EXPECT_EQ(ViewOf(*p, "i-other").state, InstanceState::kRunning);
  EXPECT_FALSE(std::filesystem::exists(Local("i-other", "marker")));
}

TEST_F(SlurmProviderTest, ANoticeIsSeenWhileTheProgramSaves) {
  // spotlong's GraceTime (120 s) outlasts the test: the program saves until
  // the test lets it finish, so the poll sees the job running with its notice.
  std::unique_ptr<Provider> p = MakeProvider(
      "trap 'touch got-term; while [ ! -e release ]; do sleep 0.1; done; exit 0' TERM; " +
          std::string(kNodeThenWait),
      {.partition = "spotlong"});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Launch({.id = "i-saver"}, Now()).ok());
  ASSERT_TRUE(WaitForFile(Local("i-saver", "node")));
  Status st = PreemptNodeOf("i-saver");
  ASSERT_TRUE(st.ok()) << st.ToString();

  std::vector<ProviderEvent> ev = PollUntil(*p, [](const std::vector<ProviderEvent>& e) {
    return HasKind(e, ProviderEvent::Kind::kNotice);
  });
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_NE(ev[0].detail.find("being preempted"), std::string::npos) << ev[0].detail;
  InstanceView v = ViewOf(*p, "i-saver");
  EXPECT_EQ(v.state, InstanceState::kRunning);
  EXPECT_TRUE(v.process_running);
  EXPECT_GE(v.notice_s, 0);
  ASSERT_TRUE(WaitForFile(Local("i-saver", "got-term")));  // SIGTERM came with the notice

  ASSERT_TRUE(WriteFileAtomically(Local("i-saver", "release"), "").ok());
  ev = PollUntil(*p, [](const std::vector<ProviderEvent>& e) { return !e.empty(); });
  ASSERT_EQ(ev.size(), 1u);  // the notice is not given twice
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kPreempted) << ev[0].detail;
  v = ViewOf(*p, "i-saver");
  EXPECT_EQ(v.state, InstanceState::kPreempted);
  EXPECT_EQ(v.exit_code, 0);
}

TEST_F(SlurmProviderTest, AProgramThatIgnoresTheNoticeIsKilledAfterTheGrace) {
  std::unique_ptr<Provider> p = MakeProvider("trap '' TERM; " + std::string(kNodeThenWait));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Launch({.id = "i-deaf"}, Now()).ok());
  ASSERT_TRUE(WaitForFile(Local("i-deaf", "node")));
  Status st = PreemptNodeOf("i-deaf");
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<ProviderEvent> ev = PollUntil(*p, [](const std::vector<ProviderEvent>& e) {
    return HasKind(e, ProviderEvent::Kind::kPreempted);
  });
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(ev[1].kind, ProviderEvent::Kind::kPreempted);
  // Slurm ended it itself after the GraceTime: PREEMPTED, by a signal.
  EXPECT_NE(ev[1].detail.find("PREEMPTED (killed by signal"), std::string::npos) << ev[1].detail;
  InstanceView v = ViewOf(*p, "i-deaf");
  EXPECT_EQ(v.state, InstanceState::kPreempted);
  EXPECT_EQ(v.exit_code, -1);
  EXPECT_FALSE(v.process_running);
}

}  // namespace
}  // namespace spot::cloud
