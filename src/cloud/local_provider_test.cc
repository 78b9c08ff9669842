#include "cloud/local_provider.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cloud/process.h"
#include "core/temp_dir.h"

namespace spot::cloud {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr double kGap = 10;            // simulated seconds per tick
constexpr double kEpoch = 1796032800;  // wall time of simulated 0: 2026-11-30T10:00:00Z
constexpr double kCompression = 4;     // simulated seconds per wall second
constexpr char kAction[] = "/latest/meta-data/spot/instance-action";

market::Trace MakeTrace(const std::string& zone, std::vector<int32_t> available) {
  market::Trace t;
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = zone, .instance_type = "p3.2xlarge"};
  t.name = zone;
  t.gap_seconds = kGap;
  t.price.assign(available.size(), 0.9);
  t.available = std::move(available);
  return t;
}

InstanceSpec Spot(const std::string& id, int zone) {
  return {.id = id,
          .zone = zone,
          .spot = true,
          .zone_name = "us-east-1" + std::string(1, static_cast<char>('a' + zone)),
          .region = "us-east-1",
          .instance_type = "p3.2xlarge"};
}

InstanceSpec OnDemand(const std::string& id) {
  return {.id = id,
          .zone = -1,
          .spot = false,
          .zone_name = "on-demand",
          .region = "us-east-1",
          .instance_type = "p3.2xlarge"};
}

template <typename Pred>
bool WaitFor(Pred pred, milliseconds timeout = milliseconds(5000)) {
  auto deadline = steady_clock::now() + timeout;
  while (!pred()) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::optional<InstanceView> Find(const LocalProvider& p, const std::string& id) {
  for (const InstanceView& v : p.List()) {
    if (v.spec.id == id) return v;
  }
  return std::nullopt;
}

// IMDSv2: a token, then a GET. Status and body; -1 when nothing answers.
std::pair<int, std::string> ImdsGet(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(std::chrono::seconds(2));
  c.set_read_timeout(std::chrono::seconds(2));
  auto tok = c.Put("/latest/api/token", {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}}, "",
                   "text/plain");
  if (!tok) return {-1, httplib::to_string(tok.error())};
  if (tok->status != 200) return {tok->status, tok->body};
  auto res = c.Get(path, {{"X-aws-ec2-metadata-token", tok->body}});
  if (!res) return {-1, httplib::to_string(res.error())};
  return {res->status, res->body};
}

using Command = std::function<std::vector<std::string>(const InstanceSpec&, const std::string&)>;

// `/bin/sleep 60`.
Command Sleep() {
  return [](const InstanceSpec&, const std::string&) {
    return std::vector<std::string>{"/bin/sleep", "60"};
  };
}

// `/bin/sh -c SCRIPT`, with LOCAL_DIR in SCRIPT replaced by the instance's local disk.
Command Shell(const std::string& script) {
  return [script](const InstanceSpec&, const std::string& local_dir) {
    std::string s = script;
    for (size_t at; (at = s.find("LOCAL_DIR")) != std::string::npos;) {
      s.replace(at, 9, "'" + local_dir + "'");
    }
    return std::vector<std::string>{"/bin/sh", "-c", s};
  };
}

// A sleep whose command line names the instance, as a worker's does (`spot
// worker --instance-id ...`): Adopt() recognizes a process by it. The
// executable is a link to /bin/sleep inside the instance's local disk.
Command SleepNamedAfterInstance() {
  return [](const InstanceSpec&, const std::string& local_dir) {
    const std::string exe = local_dir + "/sleep";
    std::error_code ec;
    fs::create_symlink("/bin/sleep", exe, ec);
    return std::vector<std::string>{exe, "60"};
  };
}

class LocalProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("spot_local_provider_test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    // Zone a: the gang (2) fits for ticks 0..4, then not. Zone b: 3, 2, 1, 3, 3, 0, 3...
    // Zone c: never enough for the gang.
    traces_.push_back(MakeTrace("us-east-1a", {3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1}));
    traces_.push_back(MakeTrace("us-east-1b", {3, 2, 1, 3, 3, 0, 3, 3, 3, 3, 3, 3}));
    traces_.push_back(MakeTrace("us-east-1c", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  }

  void TearDown() override {
    providers_.clear();
    // Kill and reap what is still our running child; a pid already reaped is
    // not touched (it may belong to someone else by now).
    for (int64_t pid : pids_) {
      int status = 0;
      if (::waitpid(static_cast<pid_t>(pid), &status, WNOHANG) == 0) {
        SignalProcess(pid, SIGKILL);
        ::waitpid(static_cast<pid_t>(pid), &status, 0);
      }
    }
  }

  LocalProviderOptions Options(Command command, int nodes = 2) {
    LocalProviderOptions o;
    for (const market::Trace& t : traces_) o.zones.push_back(&t);
    o.nodes = nodes;
    o.notice_s = 20;
    o.wall_epoch_unix_s = kEpoch;
    o.time_compression = kCompression;
    o.instances_dir = (dir_->path() / "instances").string();
    o.command = std::move(command);
    return o;
  }

  LocalProvider& Make(LocalProviderOptions o) {
    providers_.push_back(std::make_unique<LocalProvider>(std::move(o)));
    return *providers_.back();
  }

  InstanceView MustLaunch(LocalProvider& p, const InstanceSpec& spec, double now_s) {
    auto v = p.Launch(spec, now_s);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (!v.ok()) return {};
    pids_.push_back(v->pid);
    return *v;
  }

  // Polls at `now_s` until the instance's process is seen gone.
  bool WaitProcessGone(LocalProvider& p, const std::string& id, double now_s,
                       std::vector<ProviderEvent>* events = nullptr) {
    return WaitFor([&] {
      for (ProviderEvent& e : p.Poll(now_s)) {
        if (events) events->push_back(std::move(e));
      }
      auto v = Find(p, id);
      return v && !v->process_running;
    });
  }

  // Until the child runs its command (before, its command line is ours and
  // Adopt would not recognize it).
  static bool WaitExec(const InstanceView& v) {
    return WaitFor([&] { return ProcessMatches(v.pid, v.spec.id); });
  }

  fs::path LocalDir(const std::string& id) const { return dir_->path() / "instances" / id; }

  std::optional<TempDir> dir_;
  std::vector<market::Trace> traces_;
  std::vector<std::unique_ptr<LocalProvider>> providers_;
  std::vector<int64_t> pids_;
};

TEST_F(LocalProviderTest, SpotLaunchWithoutCapacityIsUnavailable) {
  LocalProvider& p = Make(Options(Sleep()));
  auto none = p.Launch(Spot("i-0000000000000000c", 2), 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("InsufficientInstanceCapacity"), std::string::npos)
      << none.status().ToString();
  // Zone a has capacity until tick 5 (simulated 50 s), none after.
  auto late = p.Launch(Spot("i-000000000000000a1", 0), 55);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(p.List().empty());

  auto bad_zone = p.Launch(Spot("i-000000000000000z", 7), 0);
  EXPECT_EQ(bad_zone.status().code(), StatusCode::kInvalidArgument);

  InstanceView v = MustLaunch(p, Spot("i-000000000000000a2", 0), 0);
  EXPECT_EQ(v.state, InstanceState::kRunning);
  EXPECT_GT(v.pid, 0);
  EXPECT_GT(v.metadata_port, 0);
  EXPECT_TRUE(fs::is_directory(LocalDir(v.spec.id)));
  auto again = p.Launch(Spot("i-000000000000000a2", 0), 0);
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LocalProviderTest, OnDemandIsNeverReclaimed) {
  LocalProvider& p = Make(Options(Sleep()));
  InstanceView v = MustLaunch(p, OnDemand("i-00000000000000od1"), 55);
  EXPECT_EQ(v.reclaim_s, -1);
  for (double now : {60.0, 100.0, 1e6}) EXPECT_TRUE(p.Poll(now).empty()) << now;
  auto seen = Find(p, v.spec.id);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->state, InstanceState::kRunning);
  EXPECT_TRUE(seen->process_running);
  EXPECT_EQ(seen->notice_s, -1);
  EXPECT_EQ(ImdsGet(v.metadata_port, kAction).first, 404);
  auto life = ImdsGet(v.metadata_port, "/latest/meta-data/instance-life-cycle");
  EXPECT_EQ(life, std::make_pair(200, std::string("on-demand")));
}

TEST_F(LocalProviderTest, SpotGetsNoticeThenIsReclaimedAtTheBoundary) {
  LocalProvider& p = Make(Options(Sleep()));
  const std::string id = "i-00000000000000sp1";
  InstanceView v = MustLaunch(p, Spot(id, 0), 3);
  EXPECT_DOUBLE_EQ(v.launched_s, 3);
  EXPECT_EQ(v.reclaim_s, 50);  // tick 5 is the first with fewer than 2
  EXPECT_EQ(p.NextReclaimS(0, 3), 50);
  auto before = ImdsGet(v.metadata_port, kAction);
  EXPECT_EQ(before.first, 404) << before.second;

  EXPECT_TRUE(p.Poll(29.5).empty());
  auto notice = p.Poll(31);
  ASSERT_EQ(notice.size(), 1u);
  EXPECT_EQ(notice[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(notice[0].instance_id, id);
  EXPECT_EQ(notice[0].sim_s, 30);  // reclaim - notice, not when it was polled
  auto after = ImdsGet(v.metadata_port, kAction);
  ASSERT_EQ(after.first, 200) << after.second;
  json doc = json::parse(after.second);
  EXPECT_EQ(doc["action"], "terminate");
  EXPECT_EQ(doc["time"], Iso8601Utc(p.WallUnixS(50)));
  EXPECT_EQ(doc["time"], Iso8601Utc(kEpoch + 50 / kCompression));
  ASSERT_TRUE(Find(p, id));
  EXPECT_EQ(Find(p, id)->notice_s, 30);
  EXPECT_TRUE(p.Poll(49.9).empty());
  EXPECT_EQ(Find(p, id)->state, InstanceState::kRunning);

  auto reclaim = p.Poll(57);
  ASSERT_EQ(reclaim.size(), 1u);
  EXPECT_EQ(reclaim[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(reclaim[0].sim_s, 50);
  InstanceView ended = *Find(p, id);
  EXPECT_EQ(ended.state, InstanceState::kPreempted);
  EXPECT_EQ(ended.ended_s, 50);  // billing stops at the boundary, not at the poll

  std::vector<ProviderEvent> later;
  ASSERT_TRUE(WaitProcessGone(p, id, 60, &later));
  EXPECT_TRUE(later.empty());  // a reclaimed instance's death is no exit event
  EXPECT_FALSE(CheckProcess(v.pid).running);
  EXPECT_TRUE(WaitFor([&] {
    p.Poll(60);
    return !fs::exists(LocalDir(id));
  }));
  EXPECT_EQ(ImdsGet(v.metadata_port, kAction).first, -1);  // its endpoint is gone too
  EXPECT_EQ(Find(p, id)->ended_s, 50);
}

TEST_F(LocalProviderTest, OnePollPastBothGivesNoticeThenReclaimInOrder) {
  LocalProvider& p = Make(Options(Sleep()));
  MustLaunch(p, OnDemand("i-00000000000000od2"), 0);
  MustLaunch(p, Spot("i-00000000000000sp2", 0), 0);
  auto events = p.Poll(1000);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].sim_s, 30);
  EXPECT_EQ(events[1].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[1].sim_s, 50);
  EXPECT_EQ(Find(p, "i-00000000000000od2")->state, InstanceState::kRunning);
}

TEST_F(LocalProviderTest, ReclaimAtFirstBoundaryBelowTheGang) {
  // Zone b: 3, 2, 1, 3, 3, 0, ... with a gang of 2.
  LocalProvider& p = Make(Options(Sleep()));
  EXPECT_EQ(p.NextReclaimS(1, 0), 20);
  EXPECT_EQ(p.NextReclaimS(1, 19.9), 20);
  EXPECT_EQ(p.NextReclaimS(1, 30), 50);
  EXPECT_EQ(p.NextReclaimS(1, 60), -1);  // up to the end of the trace
  InstanceView first = MustLaunch(p, Spot("i-00000000000000b01", 1), 0);
  InstanceView second = MustLaunch(p, Spot("i-00000000000000b02", 1), 15);  // 2 == gang
  EXPECT_EQ(first.reclaim_s, 20);
  EXPECT_EQ(second.reclaim_s, 20);
  auto none = p.Launch(Spot("i-00000000000000b03", 1), 25);  // 1 < gang
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  InstanceView third = MustLaunch(p, Spot("i-00000000000000b04", 1), 30);
  EXPECT_EQ(third.reclaim_s, 50);

  // The second was launched inside its notice window: notice at its launch.
  auto events = p.Poll(20);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, first.spec.id);
  EXPECT_EQ(events[0].sim_s, 0);
  EXPECT_EQ(events[1].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[1].instance_id, second.spec.id);
  EXPECT_EQ(events[1].sim_s, 15);
  EXPECT_EQ(events[2].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[3].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(Find(p, first.spec.id)->ended_s, 20);
  EXPECT_EQ(Find(p, second.spec.id)->ended_s, 20);
  EXPECT_EQ(Find(p, third.spec.id)->state, InstanceState::kRunning);
}

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
  EXPECT_TRUE(p.Poll(100).empty());  // reported once
  EXPECT_TRUE(fs::exists(LocalDir(id)));

  ASSERT_TRUE(p.Terminate(id, 120).ok());
  EXPECT_EQ(Find(p, id)->state, InstanceState::kTerminated);
  EXPECT_EQ(Find(p, id)->ended_s, 120);
  EXPECT_TRUE(p.Poll(130).empty());
  EXPECT_FALSE(fs::exists(LocalDir(id)));
  EXPECT_EQ(ImdsGet(v.metadata_port, kAction).first, -1);
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
  EXPECT_TRUE(p.Poll(1000).empty());
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
  EXPECT_TRUE(p.Poll(10).empty());
  EXPECT_TRUE(Find(p, id)->process_running);  // SIGTERM is ignored
  ASSERT_TRUE(WaitProcessGone(p, id, 10));
  const double waited = std::chrono::duration<double>(steady_clock::now() - sent).count();
  EXPECT_GE(waited, 0.3 - 0.01);  // (the provider reads the system clock, we a steady one)
  EXPECT_EQ(Find(p, id)->state, InstanceState::kTerminated);
  EXPECT_EQ(Find(p, id)->ended_s, 10);
  EXPECT_TRUE(WaitFor([&] {
    p.Poll(10);
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
    auto events = a->Poll(35);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
    recorded = *Find(*a, id);
  }
  ASSERT_TRUE(CheckProcess(recorded.pid).running);  // instances outlive their controller
  EXPECT_EQ(ImdsGet(recorded.metadata_port, kAction).first, -1);

  LocalProvider& b = Make(Options(SleepNamedAfterInstance()));
  Status st = b.Adopt(recorded, 40);
  ASSERT_TRUE(st.ok()) << st.ToString();
  InstanceView v = *Find(b, id);
  EXPECT_EQ(v.state, InstanceState::kRunning);
  EXPECT_EQ(v.pid, recorded.pid);
  EXPECT_EQ(v.metadata_port, recorded.metadata_port);
  EXPECT_EQ(v.launched_s, 0);
  EXPECT_EQ(v.reclaim_s, 50);
  auto who = ImdsGet(v.metadata_port, "/latest/meta-data/instance-id");
  EXPECT_EQ(who, std::make_pair(200, id));
  auto action = ImdsGet(v.metadata_port, kAction);  // the notice given before the restart
  ASSERT_EQ(action.first, 200) << action.second;
  EXPECT_EQ(json::parse(action.second)["time"], Iso8601Utc(kEpoch + 50 / kCompression));
  EXPECT_TRUE(b.Poll(45).empty());  // not given twice

  auto reclaim = b.Poll(52);
  ASSERT_EQ(reclaim.size(), 1u);
  EXPECT_EQ(reclaim[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(reclaim[0].sim_s, 50);
  ASSERT_TRUE(WaitProcessGone(b, id, 52));
  EXPECT_FALSE(CheckProcess(recorded.pid).running);
  EXPECT_TRUE(WaitFor([&] {
    b.Poll(52);
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
    EXPECT_TRUE(a->Poll(10).empty());
  }
  LocalProvider& b = Make(Options(SleepNamedAfterInstance()));
  ASSERT_TRUE(b.Adopt(recorded, 33).ok());
  EXPECT_EQ(ImdsGet(recorded.metadata_port, kAction).first, 404);
  auto events = b.Poll(33);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].sim_s, 30);
  EXPECT_EQ(ImdsGet(recorded.metadata_port, kAction).first, 200);
  ASSERT_TRUE(b.Terminate(id, 34).ok());
  EXPECT_TRUE(WaitProcessGone(b, id, 34));
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
  EXPECT_TRUE(b.Poll(100).empty());  // a lost instance is neither reclaimed nor exits
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
  EXPECT_TRUE(CheckProcess(other.pid).running);  // and leaves that process alone
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
    const std::string host = "127.0.0.1:" + std::to_string(v.metadata_port);
    EXPECT_EQ(Slurp(file), (c.scheme ? "http://" + host : host) + "\n");
    EXPECT_TRUE(fs::exists(dir_->path() / "instances" / (id + ".log")));
    ASSERT_TRUE(p.Terminate(id, 1).ok());
  }
}

}  // namespace
}  // namespace spot::cloud
