// End-to-end tests of `spot sim`: the real binary on small hand-written traces.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/spot/test_process.h"
#include "core/temp_dir.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::RunProcess;

class SimCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.emplace(TempDir::Create(std::string("spot_sim_e2e_") +
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name())
                     .value());
    dir_ = tmp_->path();
  }
  void TearDown() override {
    if (HasFailure()) {
      tmp_->Keep();
      std::cerr << "kept for inspection: " << dir_ << "\n";
    }
  }
  // A 1-hour-tick trace named like the shared records.
  fs::path Trace(const std::string& stem, const std::string& data) {
    fs::path p = dir_ / (stem + ".json");
    std::ofstream(p) << R"({"metadata": {"gap_seconds": 3600}, "data": [)" << data << "]}";
    return p;
  }
  ProcessResult Spot(std::vector<std::string> args) {
    args.insert(args.begin(), {SPOT_BIN, "sim"});
    return RunProcess(args, (dir_ / "out").string(), 120);
  }
  std::optional<TempDir> tmp_;
  fs::path dir_;
};

TEST_F(SimCliTest, ListsPolicies) {
  ProcessResult r = Spot({"policies"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "fleet-up\nforecast-up\ngreedy\nhazard-up\nmdp\nmdp-zones\nod\nomniscient\nup\n");
}

// The hand-made trace of spot_sim_test's PreemptionCostsASecondChangeover,
// repeated: C = 2, D = 6, d = 0.5, k = 3, sample 0 starts at tick 0.
TEST_F(SimCliTest, EvalJsonHasTheIssuesShape) {
  fs::path t = Trace("us-east-1a_v100_1", "1,0,1,1,1,1,1,1,1,1,1,1");
  ProcessResult r = Spot({"eval", "--trace", t.string(), "--policies", "od,up,omniscient",
                          "--compute-hours", "2", "--deadline-hours", "6", "--changeover-hours",
                          "0.5", "--ondemand-price", "3", "--samples", "1", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& m = j["traces"]["us-east-1a_v100_1"];
  EXPECT_NEAR(m["od"]["mean_cost"].get<double>(), 7.5, 1e-9);
  EXPECT_NEAR(m["up"]["mean_cost"].get<double>(), 3.0, 1e-9);
  EXPECT_NEAR(m["omniscient"]["mean_cost"].get<double>(), 2.5, 1e-9);
  for (const char* key :
       {"p50_cost", "p95_cost", "deadline_misses", "mean_spot_hours", "mean_od_hours"}) {
    EXPECT_TRUE(m["up"].contains(key)) << key;
  }
}

TEST_F(SimCliTest, MultiZoneTableAndRunSvg) {
  fs::path a = Trace("us-west-2a_v100_1", "0,0,0,0,1,1,1,1,1,1,1,1");
  fs::path b = Trace("us-west-2b_v100_1", "1,1,1,1,0,0,0,0,1,1,1,1");
  ProcessResult r = Spot({"eval", "--trace", a.string(), "--trace", b.string(), "--multi-zone",
                          "--policies", "od,up", "--compute-hours", "3", "--deadline-hours", "5",
                          "--changeover-hours", "0.5", "--samples", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("multi-zone"), std::string::npos);
  EXPECT_NE(r.out.find("vs od"), std::string::npos);
  fs::path svg = dir_ / "run.svg";
  r = Spot({"run", "--trace", a.string(), "--trace", b.string(), "--multi-zone", "--policy", "up",
            "--compute-hours", "3", "--deadline-hours", "5", "--changeover-hours", "0.5", "--svg",
            svg.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("deadline met"), std::string::npos) << r.out;
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
}

TEST_F(SimCliTest, BadInputExitsTwoNamingTheCulprit) {
  ProcessResult r = Spot({"eval", "--trace", (dir_ / "missing.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--trace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  fs::path t = Trace("z_v100_1", "1,1,1");
  r = Spot({"eval", "--trace", t.string(), "--policies", "up,nope", "--compute-hours", "1",
            "--deadline-hours", "2", "--samples", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  r = Spot({"eval", "--trace", t.string(), "--deadline-hours", "100"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("shorter than the deadline"), std::string::npos) << r.err;
  r = Spot({"eval", "--samples", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--samples"), std::string::npos) << r.err;
  r = Spot({"eval", "--trace", t.string(), "--prices", (dir_ / "no.csv").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--prices"), std::string::npos) << r.err;
}

TEST_F(SimCliTest, SyntheticDefaultMarketWorks) {
  ProcessResult r = Spot({"eval", "--policies", "od,up", "--samples", "3", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["traces"].size(), 5u);
}

// SkyNomad's traces (1 = preempted, prices in metadata.price_info) score as
// the same market written as counts; each zone's recorded on-demand price
// prices its own market; zones of one market that disagree need the flag.
TEST_F(SimCliTest, SkyNomadTracesScoreAsTheirCountsDo) {
  const std::vector<std::string> zones = {"us-east-1a_v100_1", "us-east-1b_v100_1",
                                          "us-west-2a_v100_1"};
  const std::vector<std::vector<int>> up = {
      {1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},
      {0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1},
      {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1}};
  auto write = [&](double second_zone_od) {
    std::vector<std::string> counts, sky;
    for (size_t z = 0; z < zones.size(); ++z) {
      std::string c, f;
      for (int v : up[z]) {
        c += (c.empty() ? "" : ",") + std::to_string(v);
        f += (f.empty() ? "" : ",") + std::to_string(1 - v);
      }
      counts.push_back(Trace(zones[z], c).string());
      fs::create_directories(dir_ / "sky" / zones[z]);
      fs::path p = dir_ / "sky" / zones[z] / "full.json";
      std::ofstream(p) << fmt::format(
          R"({{"metadata": {{"gap_seconds": 3600, "price_info": {{"price": 1.0,
              "on_demand_price": {}}}}}, "data": [{}]}})",
          z == 1 ? second_zone_od : 3.0, f);
      sky.push_back(p.string());
    }
    return std::make_pair(counts, sky);
  };
  auto eval = [&](const std::vector<std::string>& traces, std::vector<std::string> extra) {
    const bool mz = !extra.empty() && extra[0] == "--multi-zone";
    std::vector<std::string> args = {"eval",      "--protocol",         "loo", "--policies",
                                     "od,up,mdp", "--samples",          "6",   "--format",
                                     "json",      "--compute-hours",    "2",   "--deadline-hours",
                                     "6",         "--changeover-hours", "0.5"};
    if (mz) args[2] = "time-split";  // loo needs several markets
    for (const std::string& t : traces) args.insert(args.end(), {"--trace", t});
    args.insert(args.end(), extra.begin(), extra.end());
    return Spot(args);
  };
  auto [counts, sky] = write(3.0);
  ProcessResult a = eval(counts, {});
  ProcessResult b = eval(sky, {});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("data 1 = preempted"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("on-demand at $3/h, the price the traces record"), std::string::npos)
      << b.err;
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  ASSERT_EQ(ja["markets"].size(), 3u);
  ASSERT_EQ(jb["markets"].size(), 3u);
  for (size_t m = 0; m < 3; ++m) {
    EXPECT_EQ(jb["markets"][m]["name"], zones[m]);
    for (const char* p : {"od", "up", "mdp"}) {
      EXPECT_DOUBLE_EQ(ja["markets"][m]["policies"][p]["cost"]["mean"].get<double>(),
                       jb["markets"][m]["policies"][p]["cost"]["mean"].get<double>())
          << zones[m] << " " << p;
    }
  }
  // The second zone records on-demand at $6/h: its market is priced so.
  std::tie(counts, sky) = write(6.0);
  ProcessResult c = eval(sky, {});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto jc = nlohmann::json::parse(c.out);
  EXPECT_EQ(jc["job"]["ondemand_price_recorded_per_market"], true);
  EXPECT_DOUBLE_EQ(jc["markets"][0]["policies"]["od"]["cost"]["mean"].get<double>(), 3 * 2.5);
  EXPECT_DOUBLE_EQ(jc["markets"][1]["policies"]["od"]["cost"]["mean"].get<double>(), 6 * 2.5);
  EXPECT_NE(jc["markets"][1]["prices"].get<std::string>().find("on-demand $6/h as recorded"),
            std::string::npos)
      << jc["markets"][1]["prices"];
  // One multi-zone market of zones that disagree: the flag decides.
  ProcessResult d = eval(sky, {"--multi-zone"});
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_NE(d.err.find("--ondemand-price: not given, and the traces record different"),
            std::string::npos)
      << d.err;
  EXPECT_NE(d.err.find("us-east-1b_v100_1 $6/h"), std::string::npos) << d.err;
  ProcessResult e = eval(sky, {"--multi-zone", "--ondemand-price", "4"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(e.out)["markets"][0]["policies"]["od"]["cost"]["mean"].get<double>(),
      4 * 2.5);
  // SkyNomad's simulator reads flags without price_info too: named, they
  // score as the counts do.
  std::vector<std::string> bare;
  for (size_t z = 0; z < zones.size(); ++z) {
    std::string f;
    for (int v : up[z]) f += (f.empty() ? "" : ",") + std::to_string(1 - v);
    fs::create_directories(dir_ / "bare" / zones[z]);
    fs::path p = dir_ / "bare" / zones[z] / "full.json";
    std::ofstream(p) << R"({"metadata": {"gap_seconds": 3600}, "data": [)" << f << "]}";
    bare.push_back(p.string());
  }
  ProcessResult g = eval(bare, {"--trace-convention", "preempted"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  auto jg = nlohmann::json::parse(g.out);
  for (size_t m = 0; m < 3; ++m) {
    EXPECT_DOUBLE_EQ(ja["markets"][m]["policies"]["mdp"]["cost"]["mean"].get<double>(),
                     jg["markets"][m]["policies"]["mdp"]["cost"]["mean"].get<double>());
  }
  EXPECT_EQ(eval(bare, {"--trace-convention", "inverted"}).exit_code, 2);
  // A bad flag names its file and record.
  std::ofstream(dir_ / "sky" / zones[0] / "full.json")
      << R"({"metadata": {"gap_seconds": 3600, "price_info": {}}, "data": [0, 3]})";
  ProcessResult f = eval(sky, {});
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_NE(f.err.find("full.json: data[1]: not 0 or 1 (got 3)"), std::string::npos) << f.err;
}

// `eval --protocol`: loo over three hand-made zones, as JSON and as a table;
// the same numbers twice; a picture.
TEST_F(SimCliTest, ProtocolLooJsonTableAndSvg) {
  std::vector<std::string> args = {"eval", "--protocol", "loo"};
  const char* data[] = {"1,1,0,0,1,1,1,0,1,1,1,1,0,0,1,1,1,1,1,1",
                        "0,1,1,1,1,0,0,1,1,1,1,1,1,0,1,1,0,1,1,1",
                        "1,1,1,1,1,1,0,0,0,1,1,1,1,1,1,1,0,1,1,1"};
  for (int i = 0; i < 3; ++i) {
    args.push_back("--trace");
    args.push_back(Trace(fmt::format("zone-{}_v100_1", i), data[i]).string());
  }
  for (const char* a :
       {"--policies", "od,up,greedy,hazard-up", "--compute-hours", "3", "--deadline-hours", "5",
        "--changeover-hours", "0.5", "--start-every", "2", "--bootstrap", "500"}) {
    args.push_back(a);
  }
  std::vector<std::string> json = args;
  json.insert(json.end(), {"--format", "json"});
  ProcessResult r = Spot(json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["protocol"], "loo");
  EXPECT_EQ(j["bootstrap"]["resamples"], 500);
  ASSERT_EQ(j["markets"].size(), 3u);
  const auto& m = j["markets"][2];
  EXPECT_EQ(m["name"], "zone-2_v100_1");
  EXPECT_EQ(m["prices"], "none recorded: spot at 1.0/h");
  EXPECT_EQ(m["starts"], 8);  // ticks 0, 2, ..., 14 (a 5-tick window ends by tick 20)
  EXPECT_EQ(m["trained_on"], nlohmann::json({"zone-0_v100_1", "zone-1_v100_1"}));
  const auto& h = m["policies"]["hazard-up"];
  EXPECT_TRUE(h["fitted"].get<bool>());
  EXPECT_EQ(h["fit"]["candidates"], 9);
  EXPECT_TRUE(h["params"].contains("breakeven_scale"));
  for (const char* key : {"samples", "cost", "ratio_to_up", "deadline_misses", "misses_up_met",
                          "mean_od_hours", "share_above_od", "od_mean_cost"}) {
    EXPECT_TRUE(h.contains(key)) << key;
  }
  EXPECT_EQ(m["policies"]["up"]["ratio_to_up"]["mean"], 1.0);
  EXPECT_EQ(j["pooled"]["greedy"]["samples"], 24);
  const auto& ci = j["pooled"]["greedy"]["cost"]["ci95"];
  EXPECT_LE(ci[0].get<double>(), j["pooled"]["greedy"]["cost"]["mean"].get<double>());
  ProcessResult again = Spot(json);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  auto j2 = nlohmann::json::parse(again.out);
  j.erase("seconds");
  j2.erase("seconds");
  EXPECT_EQ(j, j2);
  EXPECT_FALSE(h.contains("runs"));

  // --runs: the scored starts behind each policy's figures.
  json.push_back("--runs");
  r = Spot(json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto runs = nlohmann::json::parse(r.out)["markets"][2]["policies"]["od"]["runs"];
  ASSERT_EQ(runs.size(), 8u);
  double sum = 0;
  for (const auto& run : runs) {
    EXPECT_EQ(run["start"].get<int64_t>() % 2, 0);
    EXPECT_EQ(run["spot_hours"], 0.0);
    EXPECT_TRUE(run["met_deadline"].get<bool>());
    sum += run["cost"].get<double>();
  }
  EXPECT_NEAR(sum / 8, m["policies"]["od"]["cost"]["mean"].get<double>(), 1e-9);

  fs::path svg = dir_ / "loo.svg";
  args.insert(args.end(), {"--svg", svg.string()});
  r = Spot(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loo: parameters fitted on the other markets"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pooled over 3 markets"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("score zone-1_v100_1"), std::string::npos) << r.err;  // progress
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("pooled  hazard-up"), std::string::npos);
}

TEST_F(SimCliTest, ProtocolBadInputExitsTwo) {
  fs::path a = Trace("a_v100_1", "1,1,1,1,1,1,1,1,1,1,1,1");
  fs::path b = Trace("b_v100_1", "1,0,1,1,1,1,1,1,1,0,1,1");
  std::vector<std::string> job = {"--compute-hours", "2", "--deadline-hours", "4"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), job.begin(), job.end());
    return Spot(args);
  };
  ProcessResult r = with({"eval", "--protocol", "cv", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--protocol: unknown protocol 'cv'"), std::string::npos) << r.err;
  r = with({"eval", "--protocol", "loo", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("loo needs at least two markets"), std::string::npos) << r.err;
  r = with({"eval", "--protocol", "time-split", "--train-fraction", "1", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--train-fraction"), std::string::npos) << r.err;
  r = with({"eval", "--protocol", "time-split", "--train-fraction", "0.1", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("a_v100_1 training part"), std::string::npos) << r.err;
  r = with({"eval", "--protocol", "loo", "--trace", a.string(), "--trace", b.string(), "--policies",
            "up,nope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown policy 'nope'"), std::string::npos) << r.err;
  r = with({"eval", "--start-every", "2", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("need --protocol"), std::string::npos) << r.err;
  r = with({"eval", "--runs", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("need --protocol"), std::string::npos) << r.err;
  r = with({"eval", "--protocol", "in-sample", "--runs", "--trace", a.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--runs: lists runs in JSON only"), std::string::npos) << r.err;
  r = with({"eval", "--protocol", "in-sample", "--trace", a.string(), "--start-every", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--start-every"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spot
