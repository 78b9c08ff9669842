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
#include <string_view>
#include <thread>
#include <vector>

#include "core/process.h"
#include "core/temp_dir.h"

namespace spot::cloud {
namespace {

// The local provider's own data about an instance (its process and port).
LocalInstanceData Local(const InstanceView& v) {
  auto d = DecodeLocalInstanceData(v.provider_data);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : LocalInstanceData{};
}

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

// A spot instance in zone `zone` (0: us-east-1a), bidding `max_price` (0: no bid).
InstanceSpec Spot(const std::string& id, int zone, double max_price = 0) {
  return {.id = id,
          .zone = zone,
          .spot = true,
          .zone_name = "us-east-1" + std::string(1, static_cast<char>('a' + zone)),
          .region = "us-east-1",
          .instance_type = "p3.2xlarge",
          .max_price = max_price};
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
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
    // How many instances each zone holds (ours included), tick by tick (10 s):
    //   zone a: 3 for ticks 0..4, none from tick 5 (50 s);
    //   zone b: 3, 2, 1, 3, 3, 0, 3, 3, ...: room for 2 at 10 s, 1 at 20 s, none at 50 s;
    //   zone c: 1 throughout;
    //   zone d: 3 throughout, at 0.9 $/h for ticks 0..2 and 1.5 $/h from tick 3 (30 s).
    // Past the traces (tick 12, 120 s) no zone has room. Prices are 0.9 $/h elsewhere.
    traces_.push_back(MakeTrace("us-east-1a", {3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0}));
    traces_.push_back(MakeTrace("us-east-1b", {3, 2, 1, 3, 3, 0, 3, 3, 3, 3, 3, 3}));
    traces_.push_back(MakeTrace("us-east-1c", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
    traces_.push_back(MakeTrace("us-east-1d", {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}));
    for (int i = 3; i < 12; ++i) traces_.back().price[i] = 1.5;
  }

  void TearDown() override {
    providers_.clear();
    // Kill and reap what is still our running child; a pid already reaped is
    // not touched (it may belong to someone else by now).
    for (int64_t pid : pids_) {
      if (::waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG) == 0) (void)StopProcess(pid, 0);
    }
  }

  LocalProviderOptions Options(Command command) {
    LocalProviderOptions o;
    for (const market::Trace& t : traces_) o.zones.push_back(&t);
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
    pids_.push_back(Local(*v).pid);
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
    return WaitFor([&] { return ProcessMatches(Local(v).pid, v.spec.id); });
  }

  // The instances' views, in the order of `ids`.
  std::vector<InstanceView> Views(const LocalProvider& p, const std::vector<std::string>& ids) {
    std::vector<InstanceView> out;
    for (const std::string& id : ids) {
      auto v = Find(p, id);
      EXPECT_TRUE(v) << id;
      out.push_back(v ? *v : InstanceView{});
    }
    return out;
  }

  fs::path LocalDir(const std::string& id) const { return dir_->path() / "instances" / id; }

  std::optional<TempDir> dir_;
  std::vector<market::Trace> traces_;
  std::vector<std::unique_ptr<LocalProvider>> providers_;
  std::vector<int64_t> pids_;
};

TEST_F(LocalProviderTest, SpotLaunchIsRefusedWhenTheZoneIsFull) {
  LocalProvider& p = Make(Options(Sleep()));
  // Zone c holds one instance: the first launch takes the room, the second finds none.
  InstanceView v = MustLaunch(p, Spot("i-00000000000000c01", 2), 0);
  EXPECT_EQ(v.state, InstanceState::kRunning);
  EXPECT_GT(Local(v).pid, 0);
  EXPECT_GT(Local(v).metadata_port, 0);
  EXPECT_TRUE(fs::is_directory(LocalDir(v.spec.id)));
  EXPECT_EQ(v.reclaim_s, -1);  // nothing is foreseen at the launch: it depends on the fleet
  EXPECT_EQ(v.notice_s, -1);
  auto full = p.Launch(Spot("i-00000000000000c02", 2), 1);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(StartsWith(full.status().message(), "InsufficientInstanceCapacity"))
      << full.status().ToString();
  // Zone a holds 3 until tick 5 (50 s), none after.
  auto late = p.Launch(Spot("i-000000000000000a1", 0), 55);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(StartsWith(late.status().message(), "InsufficientInstanceCapacity"))
      << late.status().ToString();
  EXPECT_EQ(p.List().size(), 1u);

  auto bad_zone = p.Launch(Spot("i-000000000000000z", 7), 0);
  EXPECT_EQ(bad_zone.status().code(), StatusCode::kInvalidArgument);
  auto again = p.Launch(Spot("i-00000000000000c01", 2), 0);
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);

  // Giving the one in zone c back makes room there again.
  ASSERT_TRUE(p.Terminate(v.spec.id, 2).ok());
  MustLaunch(p, Spot("i-00000000000000c03", 2), 3);
  EXPECT_EQ(Find(p, "i-00000000000000c03")->state, InstanceState::kRunning);
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
  EXPECT_EQ(ImdsGet(Local(v).metadata_port, kAction).first, 404);
  auto life = ImdsGet(Local(v).metadata_port, "/latest/meta-data/instance-life-cycle");
  EXPECT_EQ(life, std::make_pair(200, std::string("on-demand")));
}

TEST_F(LocalProviderTest, SpotGetsNoticeThenIsReclaimedAtTheBoundary) {
  LocalProvider& p = Make(Options(Sleep()));
  const std::string id = "i-00000000000000sp1";
  InstanceView v = MustLaunch(p, Spot(id, 0), 3);
  EXPECT_DOUBLE_EQ(v.launched_s, 3);
  EXPECT_EQ(v.reclaim_s, -1);  // not foreseen before the notice
  auto before = ImdsGet(Local(v).metadata_port, kAction);
  EXPECT_EQ(before.first, 404) << before.second;

  // Zone a has no room from tick 5 (50 s): the notice comes 20 s before.
  EXPECT_TRUE(p.Poll(29.5).empty());
  auto notice = p.Poll(31);
  ASSERT_EQ(notice.size(), 1u);
  EXPECT_EQ(notice[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(notice[0].instance_id, id);
  EXPECT_EQ(notice[0].sim_s, 30);  // reclaim - notice, not when it was polled
  auto after = ImdsGet(Local(v).metadata_port, kAction);
  ASSERT_EQ(after.first, 200) << after.second;
  json doc = json::parse(after.second);
  EXPECT_EQ(doc["action"], "terminate");
  EXPECT_EQ(doc["time"], Iso8601Utc(p.WallUnixS(50)));
  EXPECT_EQ(doc["time"], Iso8601Utc(kEpoch + 50 / kCompression));
  ASSERT_TRUE(Find(p, id));
  EXPECT_EQ(Find(p, id)->notice_s, 30);
  EXPECT_EQ(Find(p, id)->reclaim_s, 50);
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
  EXPECT_FALSE(CheckProcess(Local(v).pid).running);
  EXPECT_TRUE(WaitFor([&] {
    p.Poll(60);
    return !fs::exists(LocalDir(id));
  }));
  EXPECT_EQ(ImdsGet(Local(v).metadata_port, kAction).first, -1);  // its endpoint is gone too
  EXPECT_EQ(Find(p, id)->ended_s, 50);
}

TEST_F(LocalProviderTest, OnePollFarAheadGivesEveryNoticeAndReclaimInOrder) {
  // Three in zone b (3, 2, 1, 3, 3, 0, ...), launched at 0, and one on demand:
  //   10 s, room for 2: the newest (b03) goes; its notice window opened at -10 s,
  //         before its launch, so the notice is at 0;
  //   20 s, room for 1: the next newest (b02) goes, noticed at 20 - 20 = 0;
  //   30 s, 40 s, room for 3: b01 stays;
  //   50 s, no room: b01 goes, noticed at 30.
  // b02's notice comes first: the launch of b03 advanced the market to 0,
  // when the window of 20 s had opened on b01 and b02 (2 above room for 1).
  LocalProvider& p = Make(Options(Sleep()));
  MustLaunch(p, OnDemand("i-00000000000000od2"), 0);
  const std::vector<std::string> ids = {"i-00000000000000b01", "i-00000000000000b02",
                                        "i-00000000000000b03"};
  for (const std::string& id : ids) MustLaunch(p, Spot(id, 1), 0);
  auto events = p.Poll(1000);
  const struct {
    ProviderEvent::Kind kind;
    const std::string& id;
    double sim_s;
  } kWant[] = {
      {ProviderEvent::Kind::kNotice, ids[1], 0},     {ProviderEvent::Kind::kNotice, ids[2], 0},
      {ProviderEvent::Kind::kPreempted, ids[2], 10}, {ProviderEvent::Kind::kPreempted, ids[1], 20},
      {ProviderEvent::Kind::kNotice, ids[0], 30},    {ProviderEvent::Kind::kPreempted, ids[0], 50}};
  ASSERT_EQ(events.size(), std::size(kWant));
  for (size_t k = 0; k < events.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(events[k].kind, kWant[k].kind);
    EXPECT_EQ(events[k].instance_id, kWant[k].id);
    EXPECT_EQ(events[k].sim_s, kWant[k].sim_s);
  }
  std::vector<InstanceView> v = Views(p, ids);
  EXPECT_EQ(v[0].ended_s, 50);
  EXPECT_EQ(v[1].ended_s, 20);
  EXPECT_EQ(v[2].ended_s, 10);
  for (const InstanceView& x : v) EXPECT_EQ(x.state, InstanceState::kPreempted);
  EXPECT_EQ(Find(p, "i-00000000000000od2")->state, InstanceState::kRunning);
}

TEST_F(LocalProviderTest, LaunchInsideTheNoticeWindowIsNoticedAtLaunch) {
  // Zone b: 3, 2, 1, 3, 3, 0, ... with 20 s of notice.
  LocalProvider& p = Make(Options(Sleep()));
  InstanceView first = MustLaunch(p, Spot("i-00000000000000b11", 1), 0);
  // Alone, it fits the room for 2 at 10 s and for 1 at 20 s.
  EXPECT_TRUE(p.Poll(0).empty());
  InstanceView second = MustLaunch(p, Spot("i-00000000000000b12", 1), 5);  // 1 held < 3
  // At 20 s (room for 1) the newer goes. Its window opened at 0, before its
  // launch: the notice is at the launch.
  auto events = p.Poll(5);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, second.spec.id);
  EXPECT_EQ(events[0].sim_s, 5);
  EXPECT_EQ(Find(p, second.spec.id)->notice_s, 5);
  EXPECT_EQ(Find(p, second.spec.id)->reclaim_s, 20);
  EXPECT_EQ(Find(p, first.spec.id)->notice_s, -1);
  EXPECT_EQ(Find(p, first.spec.id)->reclaim_s, -1);
  auto full = p.Launch(Spot("i-00000000000000b13", 1), 15);  // 2 held fill the room for 2
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(p.Poll(19.9).empty());

  events = p.Poll(20);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, second.spec.id);
  EXPECT_EQ(events[0].sim_s, 20);
  EXPECT_EQ(Find(p, second.spec.id)->ended_s, 20);
  EXPECT_EQ(Find(p, first.spec.id)->state, InstanceState::kRunning);
  full = p.Launch(Spot("i-00000000000000b14", 1), 25);  // 1 held fills the room for 1
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);

  // At 30 s there is room for 3 again, and none at 50 s: the notices of the
  // boundary at 50 s are due at 30 s, the one launched then gets it at once.
  InstanceView fourth = MustLaunch(p, Spot("i-00000000000000b15", 1), 30);
  events = p.Poll(30);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].instance_id, first.spec.id);
  EXPECT_EQ(events[1].instance_id, fourth.spec.id);
  for (const ProviderEvent& e : events) {
    EXPECT_EQ(e.kind, ProviderEvent::Kind::kNotice);
    EXPECT_EQ(e.sim_s, 30);
  }
  events = p.Poll(50);
  ASSERT_EQ(events.size(), 2u);
  for (const ProviderEvent& e : events) {
    EXPECT_EQ(e.kind, ProviderEvent::Kind::kPreempted);
    EXPECT_EQ(e.sim_s, 50);
  }
}

TEST_F(LocalProviderTest, PartialReclaimTakesOnlyTheNewestAndTheRestStayBilled) {
  // Zone b: room for 3, then 2 at 10 s, 1 at 20 s, 3 at 30 s and 40 s.
  LocalProvider& p = Make(Options(Sleep()));
  const std::vector<std::string> ids = {"i-00000000000000b21", "i-00000000000000b22",
                                        "i-00000000000000b23"};
  std::vector<InstanceView> launched;
  for (int k = 0; k < 3; ++k) launched.push_back(MustLaunch(p, Spot(ids[k], 1), k));  // at 0, 1, 2
  auto full = p.Launch(Spot("i-00000000000000b24", 1), 3);  // 3 held fill the room for 3
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(StartsWith(full.status().message(), "InsufficientInstanceCapacity"))
      << full.status().ToString();

  // At 10 s one of the 3 is above the room for 2: the newest, b23 (noticed at
  // its launch, 2, since 10 - 20 < 2); at 20 s one of the 2 left is above the
  // room for 1: b22 (noticed at max(1, 20 - 20) = 1). b21 is never taken.
  auto events = p.Poll(5);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, ids[1]);
  EXPECT_EQ(events[0].sim_s, 1);
  EXPECT_EQ(events[1].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[1].instance_id, ids[2]);
  EXPECT_EQ(events[1].sim_s, 2);
  std::vector<InstanceView> v = Views(p, ids);
  EXPECT_EQ(v[0].reclaim_s, -1);
  EXPECT_EQ(v[1].reclaim_s, 20);
  EXPECT_EQ(v[2].reclaim_s, 10);
  EXPECT_EQ(ImdsGet(Local(launched[0]).metadata_port, kAction).first, 404);
  EXPECT_EQ(ImdsGet(Local(launched[1]).metadata_port, kAction).first, 200);
  EXPECT_EQ(ImdsGet(Local(launched[2]).metadata_port, kAction).first, 200);

  events = p.Poll(10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, ids[2]);
  EXPECT_EQ(events[0].sim_s, 10);
  full = p.Launch(Spot("i-00000000000000b25", 1), 12);  // 2 held fill the room for 2
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);
  events = p.Poll(20);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, ids[1]);
  EXPECT_EQ(events[0].sim_s, 20);
  EXPECT_TRUE(p.Poll(29).empty());  // room for 3 at 30 s and 40 s

  // The survivor runs on, billed (not ended), without a notice; the others'
  // processes are killed and their disks go.
  ASSERT_TRUE(WaitProcessGone(p, ids[1], 29));
  ASSERT_TRUE(WaitProcessGone(p, ids[2], 29));
  EXPECT_TRUE(WaitFor([&] {
    EXPECT_TRUE(p.Poll(29).empty());
    return !fs::exists(LocalDir(ids[1])) && !fs::exists(LocalDir(ids[2]));
  }));
  v = Views(p, ids);
  EXPECT_EQ(v[0].state, InstanceState::kRunning);
  EXPECT_TRUE(v[0].process_running);
  EXPECT_TRUE(CheckProcess(Local(launched[0]).pid).running);
  EXPECT_EQ(v[0].ended_s, -1);
  EXPECT_EQ(v[0].notice_s, -1);
  EXPECT_TRUE(fs::exists(LocalDir(ids[0])));
  EXPECT_EQ(v[1].ended_s, 20);
  EXPECT_EQ(v[2].ended_s, 10);
}

TEST_F(LocalProviderTest, BidBelowThePriceIsReclaimedAndALowBidIsRefused) {
  // Zone d: room for 3; 0.9 $/h until 30 s, 1.5 $/h from then on.
  LocalProvider& p = Make(Options(Sleep()));
  InstanceView low = MustLaunch(p, Spot("i-00000000000000d01", 3, 1.0), 0);
  InstanceView none = MustLaunch(p, Spot("i-00000000000000d02", 3), 0);  // no bid
  // At 30 s the price (1.5) is above the bid of 1.0: noticed at 30 - 20 = 10.
  EXPECT_TRUE(p.Poll(9.9).empty());
  auto events = p.Poll(10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, low.spec.id);
  EXPECT_EQ(events[0].sim_s, 10);
  EXPECT_EQ(Find(p, low.spec.id)->reclaim_s, 30);
  // A bid of 1.0 at 25 s is accepted (0.9 $/h then), and noticed at once.
  InstanceView late = MustLaunch(p, Spot("i-00000000000000d03", 3, 1.0), 25);
  events = p.Poll(25);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, late.spec.id);
  EXPECT_EQ(events[0].sim_s, 25);

  events = p.Poll(30);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, low.spec.id);
  EXPECT_EQ(events[0].sim_s, 30);
  EXPECT_EQ(events[1].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[1].instance_id, late.spec.id);
  EXPECT_EQ(events[1].sim_s, 30);
  EXPECT_EQ(Find(p, none.spec.id)->state, InstanceState::kRunning);

  // From 30 s a bid below 1.5 is refused; one of 1.5 (not below) is not.
  auto refused = p.Launch(Spot("i-00000000000000d04", 3, 1.0), 35);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(StartsWith(refused.status().message(), "SpotMaxPriceTooLow"))
      << refused.status().ToString();
  EXPECT_FALSE(Find(p, "i-00000000000000d04"));
  MustLaunch(p, Spot("i-00000000000000d05", 3, 1.5), 35);
  EXPECT_TRUE(p.Poll(60).empty());  // 1.5 $/h up to the traces' end
  EXPECT_EQ(Find(p, "i-00000000000000d05")->state, InstanceState::kRunning);
  EXPECT_EQ(Find(p, none.spec.id)->state, InstanceState::kRunning);
}

TEST_F(LocalProviderTest, NoticedInstanceIsReclaimedEvenAfterAnotherWasTerminated) {
  // Zone b: room for 3, 2 at 10 s, 1 at 20 s, 3 at 30 s.
  LocalProvider& p = Make(Options(Sleep()));
  InstanceView older = MustLaunch(p, Spot("i-00000000000000b31", 1), 0);
  InstanceView newer = MustLaunch(p, Spot("i-00000000000000b32", 1), 0);
  // 10 s holds both; at 20 s the newer is above the room for 1: noticed at 0.
  auto events = p.Poll(0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, newer.spec.id);
  EXPECT_EQ(events[0].sim_s, 0);

  // The older one is given back: alone, the newer would now fit at 20 s, but
  // its notice stands. A third, launched at 6, is the only one the rule sees
  // at 20 s (the noticed one counts as gone): it fits the room for 1.
  ASSERT_TRUE(p.Terminate(older.spec.id, 5).ok());
  InstanceView third = MustLaunch(p, Spot("i-00000000000000b33", 1), 6);
  EXPECT_TRUE(p.Poll(19).empty());  // 10 s: 2 held, room for 2
  EXPECT_EQ(ImdsGet(Local(newer).metadata_port, kAction).first, 200);
  events = p.Poll(20);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, newer.spec.id);
  EXPECT_EQ(events[0].sim_s, 20);
  EXPECT_EQ(Find(p, newer.spec.id)->ended_s, 20);
  EXPECT_EQ(Find(p, older.spec.id)->state, InstanceState::kTerminated);
  EXPECT_EQ(Find(p, older.spec.id)->ended_s, 5);
  EXPECT_EQ(Find(p, third.spec.id)->state, InstanceState::kRunning);
  EXPECT_EQ(Find(p, third.spec.id)->notice_s, -1);
  EXPECT_EQ(ImdsGet(Local(third).metadata_port, kAction).first, 404);
}

TEST_F(LocalProviderTest, SpotIsReclaimedWhenTheTracesEnd) {
  // Zone b has room for 3 up to tick 11; past the traces (120 s) none.
  LocalProvider& p = Make(Options(Sleep()));
  InstanceView v = MustLaunch(p, Spot("i-00000000000000b41", 1), 60);
  auto events = p.Poll(1000);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].sim_s, 100);
  EXPECT_EQ(events[1].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[1].sim_s, 120);
  EXPECT_EQ(Find(p, v.spec.id)->ended_s, 120);
  auto none = p.Launch(Spot("i-00000000000000b42", 1), 1000);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
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
  EXPECT_TRUE(b.Poll(45).empty());  // not given twice

  auto reclaim = b.Poll(52);
  ASSERT_EQ(reclaim.size(), 1u);
  EXPECT_EQ(reclaim[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(reclaim[0].sim_s, 50);
  ASSERT_TRUE(WaitProcessGone(b, id, 52));
  EXPECT_FALSE(CheckProcess(Local(recorded).pid).running);
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
  EXPECT_EQ(ImdsGet(Local(recorded).metadata_port, kAction).first, 404);
  auto events = b.Poll(33);
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
    auto events = a->Poll(0);
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
  EXPECT_TRUE(b.Poll(5).empty());  // not given twice
  std::vector<InstanceView> v = Views(b, ids);
  EXPECT_EQ(v[0].notice_s, -1);
  EXPECT_EQ(v[0].reclaim_s, -1);
  EXPECT_EQ(v[1].reclaim_s, 20);
  EXPECT_EQ(v[2].reclaim_s, 10);
  auto action = ImdsGet(Local(v[2]).metadata_port, kAction);
  ASSERT_EQ(action.first, 200) << action.second;
  EXPECT_EQ(json::parse(action.second)["time"], Iso8601Utc(kEpoch + 10 / kCompression));

  auto events = b.Poll(10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, ids[2]);
  EXPECT_EQ(events[0].sim_s, 10);
  events = b.Poll(20);
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
