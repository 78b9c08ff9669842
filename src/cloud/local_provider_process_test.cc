// The local provider's processes: exits, termination with escalation,
// adoption after a controller restart, the metadata endpoint a child sees.
#include <gtest/gtest.h>

#include "cloud/local_provider_test_fixture.h"

namespace spot::cloud {
namespace {

using namespace local_test;  // NOLINT: the fixture's helpers

TEST_F(LocalProviderTest, ExitedProcessKeepsInstanceBilledUntilTerminated) {
  LocalProvider& p = Make(Options(Shell("exit 3")));
  const std::string id = "i-00000000000000ex1";
  InstanceView v = MustLaunch(p, OnDemand(id), 5);
  std::vector<ProviderEvent> events;
  ASSERT_TRUE(WaitProcessGone(p, id, 7, &events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kExited);
  EXPECT_EQ(events[0].instance_id, id);
  EXPECT_EQ(events[0].sim_s, 7);
  EXPECT_EQ(events[0].detail, "exit code 3");
  InstanceView seen = *Find(p, id);
  EXPECT_EQ(seen.state, InstanceState::kRunning);  // the VM is still up and billed
  EXPECT_EQ(seen.exit_code, 3);
  EXPECT_EQ(seen.ended_s, -1);
  EXPECT_TRUE(p.Poll(100).value().empty());  // reported once
  EXPECT_TRUE(fs::exists(LocalDir(id)));

  ASSERT_TRUE(p.Terminate(id, 120).ok());
  EXPECT_EQ(Find(p, id)->state, InstanceState::kTerminated);
  EXPECT_EQ(Find(p, id)->ended_s, 120);
  EXPECT_TRUE(p.Poll(130).value().empty());
  EXPECT_FALSE(fs::exists(LocalDir(id)));
  EXPECT_EQ(ImdsGet(Local(v).metadata_port, kAction).first, -1);
}

TEST_F(LocalProviderTest, ProcessKilledBySignalIsReported) {
  LocalProvider& p = Make(Options(Shell("kill -9 $$")));
  const std::string id = "i-00000000000000ex2";
  MustLaunch(p, OnDemand(id), 0);
  std::vector<ProviderEvent> events;
  ASSERT_TRUE(WaitProcessGone(p, id, 1, &events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].detail, "killed by signal 9");
  EXPECT_EQ(Find(p, id)->exit_code, -1);
}

TEST_F(LocalProviderTest, TerminateStopsAnObedientProcessAtOnce) {
  LocalProviderOptions o = Options(Sleep());
  o.terminate_grace_wall_s = 60;  // SIGKILL would come far too late for the wait below
  LocalProvider& p = Make(std::move(o));
  const std::string id = "i-00000000000000tm1";
  MustLaunch(p, Spot(id, 0), 0);
  EXPECT_EQ(p.Terminate("i-nope", 1).code(), StatusCode::kNotFound);
  ASSERT_TRUE(p.Terminate(id, 12.5).ok());
  ASSERT_TRUE(p.Terminate(id, 20).ok());  // a second time changes nothing
  EXPECT_EQ(Find(p, id)->state, InstanceState::kTerminated);
  EXPECT_EQ(Find(p, id)->ended_s, 12.5);
  std::vector<ProviderEvent> events;
  ASSERT_TRUE(WaitProcessGone(p, id, 13, &events));
  EXPECT_TRUE(events.empty());
  // Terminated before its reclaim: no notice, no preemption later.
  EXPECT_TRUE(p.Poll(1000).value().empty());
  EXPECT_EQ(Find(p, id)->state, InstanceState::kTerminated);
  EXPECT_FALSE(fs::exists(LocalDir(id)));
}

TEST_F(LocalProviderTest, TerminateEscalatesToSigkillAfterTheGrace) {
  LocalProviderOptions o = Options(Shell("trap '' TERM; : > LOCAL_DIR/ready; exec /bin/sleep 60"));
  o.terminate_grace_wall_s = 0.3;
  LocalProvider& p = Make(std::move(o));
  const std::string id = "i-00000000000000tm2";
  MustLaunch(p, OnDemand(id), 0);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(LocalDir(id) / "ready"); }));
  const auto sent = steady_clock::now();
  ASSERT_TRUE(p.Terminate(id, 10).ok());
  EXPECT_TRUE(p.Poll(10).value().empty());
  EXPECT_TRUE(Find(p, id)->process_running);  // SIGTERM is ignored
  ASSERT_TRUE(WaitProcessGone(p, id, 10));
  const double waited = std::chrono::duration<double>(steady_clock::now() - sent).count();
  EXPECT_GE(waited, 0.3 - 0.01);  // (the provider reads the system clock, we a steady one)
  EXPECT_EQ(Find(p, id)->state, InstanceState::kTerminated);
  EXPECT_EQ(Find(p, id)->ended_s, 10);
  EXPECT_TRUE(WaitFor([&] {
    p.Poll(10).value();
    return !fs::exists(LocalDir(id));
  }));
}

TEST_F(LocalProviderTest, AdoptAfterRestartServesMetadataOnTheSamePort) {
  const std::string id = "i-00000000000000ad1";
  InstanceView recorded;
  {
    // The first controller process: launches, sees the notice, goes away.
    auto a = std::make_unique<LocalProvider>(Options(SleepNamedAfterInstance()));
    recorded = MustLaunch(*a, Spot(id, 0), 0);
    ASSERT_TRUE(WaitExec(recorded));
    auto events = a->Poll(35).value();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
    recorded = *Find(*a, id);
    EXPECT_EQ(recorded.reclaim_s, 50);
    recorded.reclaim_s = -1;  // the controller keeps the notice's time only
  }
  ASSERT_TRUE(CheckProcess(Local(recorded).pid).running);  // instances outlive their controller
  EXPECT_EQ(ImdsGet(Local(recorded).metadata_port, kAction).first, -1);

  LocalProvider& b = Make(Options(SleepNamedAfterInstance()));
  Status st = b.Adopt(recorded, 40);
  ASSERT_TRUE(st.ok()) << st.ToString();
  InstanceView v = *Find(b, id);
  EXPECT_EQ(v.state, InstanceState::kRunning);
  EXPECT_EQ(Local(v).pid, Local(recorded).pid);
  EXPECT_EQ(Local(v).metadata_port, Local(recorded).metadata_port);
  EXPECT_EQ(v.launched_s, 0);
  EXPECT_EQ(v.notice_s, 30);
  EXPECT_EQ(v.reclaim_s, 50);  // 20 s after its notice
  auto who = ImdsGet(Local(v).metadata_port, "/latest/meta-data/instance-id");
  EXPECT_EQ(who, std::make_pair(200, id));
  auto action = ImdsGet(Local(v).metadata_port, kAction);  // the notice given before the restart
  ASSERT_EQ(action.first, 200) << action.second;
  EXPECT_EQ(json::parse(action.second)["time"], Iso8601Utc(kEpoch + 50 / kCompression));
  EXPECT_TRUE(b.Poll(45).value().empty());  // not given twice

  auto reclaim = b.Poll(52).value();
  ASSERT_EQ(reclaim.size(), 1u);
  EXPECT_EQ(reclaim[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(reclaim[0].sim_s, 50);
  ASSERT_TRUE(WaitProcessGone(b, id, 52));
  EXPECT_FALSE(CheckProcess(Local(recorded).pid).running);
  EXPECT_TRUE(WaitFor([&] {
    b.Poll(52).value();
    return !fs::exists(LocalDir(id));
  }));
}

TEST_F(LocalProviderTest, AdoptGivesTheNoticeThatCameDueWhileNobodyWatched) {
  const std::string id = "i-00000000000000ad2";
  InstanceView recorded;
  {
    auto a = std::make_unique<LocalProvider>(Options(SleepNamedAfterInstance()));
    recorded = MustLaunch(*a, Spot(id, 0), 0);
    ASSERT_TRUE(WaitExec(recorded));
    EXPECT_TRUE(a->Poll(10).value().empty());
  }
  LocalProvider& b = Make(Options(SleepNamedAfterInstance()));
  ASSERT_TRUE(b.Adopt(recorded, 33).ok());
  EXPECT_EQ(ImdsGet(Local(recorded).metadata_port, kAction).first, 404);
  auto events = b.Poll(33).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].sim_s, 30);
  EXPECT_EQ(ImdsGet(Local(recorded).metadata_port, kAction).first, 200);
  ASSERT_TRUE(b.Terminate(id, 34).ok());
  EXPECT_TRUE(WaitProcessGone(b, id, 34));
}

TEST_F(LocalProviderTest, AdoptFindsTheBoundariesOfNoticesGivenAtLaunch) {
  // Zone b: three launched at 0; the first controller gave notices at 0 to b53
  // (for 10 s, room for 2) and b52 (for 20 s, room for 1), both at their launch
  // as their windows opened before it. It kept only the notices' times.
  const std::vector<std::string> ids = {"i-00000000000000b51", "i-00000000000000b52",
                                        "i-00000000000000b53"};
  std::vector<InstanceView> recorded;
  {
    auto a = std::make_unique<LocalProvider>(Options(SleepNamedAfterInstance()));
    for (const std::string& id : ids) recorded.push_back(MustLaunch(*a, Spot(id, 1), 0));
    for (const InstanceView& v : recorded) ASSERT_TRUE(WaitExec(v));
    auto events = a->Poll(0).value();
    ASSERT_EQ(events.size(), 2u);
    recorded = Views(*a, ids);
    EXPECT_EQ(recorded[1].reclaim_s, 20);
    EXPECT_EQ(recorded[2].reclaim_s, 10);
    for (InstanceView& v : recorded) v.reclaim_s = -1;
  }
  LocalProvider& b = Make(Options(SleepNamedAfterInstance()));
  for (const InstanceView& v : recorded) ASSERT_TRUE(b.Adopt(v, 5).ok()) << v.spec.id;
  // A notice at the launch names a boundary up to 20 s later: 10 s or 20 s.
  // On the fleet as adopted the rule takes b53 at 10 s and b52 at 20 s.
  EXPECT_TRUE(b.Poll(5).value().empty());  // not given twice
  std::vector<InstanceView> v = Views(b, ids);
  EXPECT_EQ(v[0].notice_s, -1);
  EXPECT_EQ(v[0].reclaim_s, -1);
  EXPECT_EQ(v[1].reclaim_s, 20);
  EXPECT_EQ(v[2].reclaim_s, 10);
  auto action = ImdsGet(Local(v[2]).metadata_port, kAction);
  ASSERT_EQ(action.first, 200) << action.second;
  EXPECT_EQ(json::parse(action.second)["time"], Iso8601Utc(kEpoch + 10 / kCompression));

  auto events = b.Poll(10).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, ids[2]);
  EXPECT_EQ(events[0].sim_s, 10);
  events = b.Poll(20).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].instance_id, ids[1]);
  EXPECT_EQ(events[0].sim_s, 20);
  EXPECT_EQ(Find(b, ids[0])->state, InstanceState::kRunning);
  EXPECT_TRUE(WaitProcessGone(b, ids[1], 20));  // SIGKILLed at their boundaries
  EXPECT_TRUE(WaitProcessGone(b, ids[2], 20));
  ASSERT_TRUE(b.Terminate(ids[0], 21).ok());
  EXPECT_TRUE(WaitProcessGone(b, ids[0], 21));
}

TEST_F(LocalProviderTest, AdoptOfAGoneProcessIsNotFoundAndEnded) {
  const std::string id = "i-00000000000000ad3";
  InstanceView recorded;
  {
    auto a = std::make_unique<LocalProvider>(Options(Shell("exit 0")));
    recorded = MustLaunch(*a, Spot(id, 0), 0);
    ASSERT_TRUE(WaitProcessGone(*a, id, 1));
  }
  LocalProvider& b = Make(Options(Sleep()));
  Status st = b.Adopt(recorded, 12);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find(id), std::string::npos);
  InstanceView v = *Find(b, id);
  EXPECT_EQ(v.state, InstanceState::kLost);
  EXPECT_EQ(v.ended_s, 12);
  EXPECT_FALSE(v.process_running);
  EXPECT_TRUE(b.Poll(100).value().empty());  // a lost instance is neither reclaimed nor exits
}

TEST_F(LocalProviderTest, AdoptRefusesAProcessThatIsNotTheInstance) {
  // A live pid whose command line does not name the instance (a reused pid).
  LocalProvider& a = Make(Options(Sleep()));
  InstanceView other = MustLaunch(a, OnDemand("i-00000000000000ot1"), 0);
  InstanceView recorded = other;
  recorded.spec = Spot("i-00000000000000ad4", 0);
  LocalProvider& b = Make(Options(Sleep()));
  EXPECT_EQ(b.Adopt(recorded, 5).code(), StatusCode::kNotFound);
  EXPECT_EQ(Find(b, "i-00000000000000ad4")->state, InstanceState::kLost);
  EXPECT_TRUE(CheckProcess(Local(other).pid).running);  // and leaves that process alone
}

TEST_F(LocalProviderTest, ChildSeesItsMetadataEndpoint) {
  const struct {
    const char* flavor;
    const char* variable;
    bool scheme;
  } kCases[] = {{"aws", "AWS_EC2_METADATA_SERVICE_ENDPOINT", true},
                {"gcp", "GCE_METADATA_HOST", false},
                {"azure", "SPOT_AZURE_METADATA_ENDPOINT", true}};
  int n = 0;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.flavor);
    LocalProviderOptions o = Options(Shell(std::string("echo \"$") + c.variable +
                                           "\" > LOCAL_DIR/endpoint.tmp && mv LOCAL_DIR/"
                                           "endpoint.tmp LOCAL_DIR/endpoint; exec /bin/sleep 60"));
    o.metadata_flavor = c.flavor;
    LocalProvider& p = Make(std::move(o));
    const std::string id = "i-00000000000000ev" + std::to_string(++n);
    InstanceView v = MustLaunch(p, Spot(id, 0), 0);
    const fs::path file = LocalDir(id) / "endpoint";
    ASSERT_TRUE(WaitFor([&] { return fs::exists(file); }));
    const std::string host = "127.0.0.1:" + std::to_string(Local(v).metadata_port);
    EXPECT_EQ(Slurp(file), (c.scheme ? "http://" + host : host) + "\n");
    EXPECT_TRUE(fs::exists(dir_->path() / "instances" / (id + ".log")));
    ASSERT_TRUE(p.Terminate(id, 1).ok());
  }
}

}  // namespace
}  // namespace spot::cloud
