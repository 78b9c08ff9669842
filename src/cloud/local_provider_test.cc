// The local provider follows the fleet model's market rule: launches up to
// capacity, partial reclaims newest first, bids, notices as commitments.
#include <gtest/gtest.h>

#include "cloud/local_provider_test_fixture.h"

namespace spot::cloud {
namespace {

using namespace local_test;  // NOLINT: the fixture's helpers

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
  for (double now : {60.0, 100.0, 1e6}) EXPECT_TRUE(p.Poll(now).value().empty()) << now;
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
  EXPECT_TRUE(p.Poll(29.5).value().empty());
  auto notice = p.Poll(31).value();
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
  EXPECT_TRUE(p.Poll(49.9).value().empty());
  EXPECT_EQ(Find(p, id)->state, InstanceState::kRunning);

  auto reclaim = p.Poll(57).value();
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
    p.Poll(60).value();
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
  auto events = p.Poll(1000).value();
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
  EXPECT_TRUE(p.Poll(0).value().empty());
  InstanceView second = MustLaunch(p, Spot("i-00000000000000b12", 1), 5);  // 1 held < 3
  // At 20 s (room for 1) the newer goes. Its window opened at 0, before its
  // launch: the notice is at the launch.
  auto events = p.Poll(5).value();
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
  EXPECT_TRUE(p.Poll(19.9).value().empty());

  events = p.Poll(20).value();
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
  events = p.Poll(30).value();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].instance_id, first.spec.id);
  EXPECT_EQ(events[1].instance_id, fourth.spec.id);
  for (const ProviderEvent& e : events) {
    EXPECT_EQ(e.kind, ProviderEvent::Kind::kNotice);
    EXPECT_EQ(e.sim_s, 30);
  }
  events = p.Poll(50).value();
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
  auto events = p.Poll(5).value();
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

  events = p.Poll(10).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, ids[2]);
  EXPECT_EQ(events[0].sim_s, 10);
  full = p.Launch(Spot("i-00000000000000b25", 1), 12);  // 2 held fill the room for 2
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);
  events = p.Poll(20).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, ids[1]);
  EXPECT_EQ(events[0].sim_s, 20);
  EXPECT_TRUE(p.Poll(29).value().empty());  // room for 3 at 30 s and 40 s

  // The survivor runs on, billed (not ended), without a notice; the others'
  // processes are killed and their disks go.
  ASSERT_TRUE(WaitProcessGone(p, ids[1], 29));
  ASSERT_TRUE(WaitProcessGone(p, ids[2], 29));
  EXPECT_TRUE(WaitFor([&] {
    EXPECT_TRUE(p.Poll(29).value().empty());
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
  EXPECT_TRUE(p.Poll(9.9).value().empty());
  auto events = p.Poll(10).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, low.spec.id);
  EXPECT_EQ(events[0].sim_s, 10);
  EXPECT_EQ(Find(p, low.spec.id)->reclaim_s, 30);
  // A bid of 1.0 at 25 s is accepted (0.9 $/h then), and noticed at once.
  InstanceView late = MustLaunch(p, Spot("i-00000000000000d03", 3, 1.0), 25);
  events = p.Poll(25).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, late.spec.id);
  EXPECT_EQ(events[0].sim_s, 25);

  events = p.Poll(30).value();
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
  EXPECT_TRUE(p.Poll(60).value().empty());  // 1.5 $/h up to the traces' end
  EXPECT_EQ(Find(p, "i-00000000000000d05")->state, InstanceState::kRunning);
  EXPECT_EQ(Find(p, none.spec.id)->state, InstanceState::kRunning);
}

TEST_F(LocalProviderTest, NoticedInstanceIsReclaimedEvenAfterAnotherWasTerminated) {
  // Zone b: room for 3, 2 at 10 s, 1 at 20 s, 3 at 30 s.
  LocalProvider& p = Make(Options(Sleep()));
  InstanceView older = MustLaunch(p, Spot("i-00000000000000b31", 1), 0);
  InstanceView newer = MustLaunch(p, Spot("i-00000000000000b32", 1), 0);
  // 10 s holds both; at 20 s the newer is above the room for 1: noticed at 0.
  auto events = p.Poll(0).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].instance_id, newer.spec.id);
  EXPECT_EQ(events[0].sim_s, 0);

  // The older one is given back: alone, the newer would now fit at 20 s, but
  // its notice stands. A third, launched at 6, is the only one the rule sees
  // at 20 s (the noticed one counts as gone): it fits the room for 1.
  ASSERT_TRUE(p.Terminate(older.spec.id, 5).ok());
  InstanceView third = MustLaunch(p, Spot("i-00000000000000b33", 1), 6);
  EXPECT_TRUE(p.Poll(19).value().empty());  // 10 s: 2 held, room for 2
  EXPECT_EQ(ImdsGet(Local(newer).metadata_port, kAction).first, 200);
  events = p.Poll(20).value();
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
  auto events = p.Poll(1000).value();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kNotice);
  EXPECT_EQ(events[0].sim_s, 100);
  EXPECT_EQ(events[1].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[1].sim_s, 120);
  EXPECT_EQ(Find(p, v.spec.id)->ended_s, 120);
  auto none = p.Launch(Spot("i-00000000000000b42", 1), 1000);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace spot::cloud
