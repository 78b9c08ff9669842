#include "market/loaders.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "core/temp_dir.h"
#include "market/csv.h"
#include "market/field_parse.h"

namespace spot::market {
namespace {

namespace fs = std::filesystem;

class LoadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.emplace(TempDir::Create("spot_market_test").value());
    dir_ = tmp_->path();
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::optional<TempDir> tmp_;
  fs::path dir_;
};

TEST(FieldParseTest, NumbersAndTimes) {
  EXPECT_EQ(ParseDouble(" 1.5 "), 1.5);
  EXPECT_EQ(ParseDouble("+2e-3"), 2e-3);
  EXPECT_FALSE(ParseDouble("1.5x"));
  EXPECT_FALSE(ParseDouble(""));
  EXPECT_FALSE(ParseDouble("nan"));
  EXPECT_FALSE(ParseDouble("inf"));
  EXPECT_EQ(ParseInt64("-42"), -42);
  EXPECT_FALSE(ParseInt64("4.2"));
  EXPECT_EQ(ParseUtcTime("1970-01-01 00:00:00"), 0);
  EXPECT_EQ(ParseUtcTime("2023-02-15 22:08:16"), 1676498896);
  EXPECT_EQ(ParseUtcTime("2023-02-15T22:08:16Z"), 1676498896);
  EXPECT_EQ(ParseUtcTime("2023-02-15T23:08:16+01:00"), 1676498896);
  EXPECT_EQ(ParseUtcTime("2023-02-15T22:08:16.500Z"), 1676498896.5);
  EXPECT_FALSE(ParseUtcTime("2023-02-15"));
  EXPECT_FALSE(ParseUtcTime("2023-13-15 22:08:16"));
  EXPECT_FALSE(ParseUtcTime("2023-02-15 22:08:16 junk"));
}

TEST(CsvTest, QuotesCrlfAndLineNumbers) {
  auto t = CsvTable::Parse("a,b\r\n\"x,1\",\"say \"\"hi\"\"\"\r\n\r\n\"multi\nline\",3\r\nlast,4",
                           "f.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->rows().size(), 3u);
  EXPECT_EQ(t->rows()[0].fields[0], "x,1");
  EXPECT_EQ(t->rows()[0].fields[1], "say \"hi\"");
  EXPECT_EQ(t->rows()[0].line, 2);
  EXPECT_EQ(t->rows()[1].fields[0], "multi\nline");
  EXPECT_EQ(t->rows()[1].line, 4);
  EXPECT_EQ(t->rows()[2].line, 6);
  EXPECT_EQ(t->Column({"zz", "b"}), 1u);
}

TEST(CsvTest, MalformedInputNamesTheLine) {
  struct Case {
    std::string text, message;
  } cases[] = {
      {"", "f.csv: empty file"},
      {"a,b\n1,2\n3\n", "f.csv:3: 1 fields, header has 2"},
      {"a,b\n1,\"2\n", "f.csv:2: unterminated quoted field"},
      {"a,b\n1,\"2\"x\n", "f.csv:2: text after a closing quote"},
      {"a,b\n1,2\"\n", "f.csv:2: quote inside an unquoted field"},
  };
  for (const Case& c : cases) {
    auto t = CsvTable::Parse(c.text, "f.csv");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status().ToString();
  }
}

TEST_F(LoadersTest, AvailabilityJsonWithPoolFromName) {
  auto t = LoadAvailabilityJson(
      Write("us-east-1a_v100_1.json", R"({"metadata": {"gap_seconds": 195}, "data": [0, 1, 1]})"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->gap_seconds, 195);
  EXPECT_EQ(t->available, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_FALSE(t->has_prices());
  EXPECT_EQ(t->name, "us-east-1a_v100_1");
  EXPECT_EQ(t->pool.Key(), "aws/us-east-1a/v100_1");
  EXPECT_EQ(t->pool.region, "us-east-1");
  auto g = LoadAvailabilityJson(Write("us-central1-a_c3-88.json",
                                      R"({"metadata": {"gap_seconds": 30}, "data": [2],
                                          "prices": [1.5]})"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->pool.cloud, "gcp");
  EXPECT_EQ(g->pool.region, "us-central1");
  EXPECT_EQ(g->pool.instance_type, "c3-88");
  EXPECT_EQ(g->price, std::vector<double>{1.5});
}

// SkyNomad's traces share the schema but flag PREEMPTED ticks (1 = no spot);
// read as counts, every market came out inverted (a zone up 12% of the time
// read as up 88%).
TEST_F(LoadersTest, SkyNomadTracesAreReadAsAvailability) {
  fs::create_directories(dir_ / "us-east-2a_v100_1");
  const std::string meta =
      R"("metadata": {"gap_seconds": 600, "zone": "us-east-2a",
          "start_time": "2025-10-04T00:10:00.5+00:00",
          "price_info": {"price": 0.93, "on_demand_price": 3.06, "region": "us-east-2"}})";
  auto t = LoadAvailabilityJson(
      Write("us-east-2a_v100_1/full.json", "{" + meta + R"(, "data": [0, 1, 1, 0]})"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->available, (std::vector<int32_t>{1, 0, 0, 1}));
  EXPECT_EQ(t->name, "us-east-2a_v100_1");
  EXPECT_EQ(t->pool.Key(), "aws/us-east-2a/v100_1");
  EXPECT_EQ(t->pool.region, "us-east-2");
  EXPECT_EQ(t->ondemand_price, 3.06);
  EXPECT_EQ(t->price, (std::vector<double>(4, 0.93)));  // no "prices": price_info's
  EXPECT_EQ(t->start_unix_s, 1759536600.5);
  EXPECT_NE(t->read_as.find("1 = preempted"), std::string::npos);
  // A window of it, with its own price series; the zone from metadata.zone.
  auto w = LoadAvailabilityJson(Write("us-east-2a_v100_1/3.json",
                                      R"({"metadata": {"gap_seconds": 600, "zone": "us-central1-a",
                                          "price_info": {"price": 18.98}},
                                          "data": [1, 0], "prices": [18.98, 19.5]})"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->name, "us-east-2a_v100_1#3");
  EXPECT_EQ(w->pool.Key(), "gcp/us-central1-a/v100_1");
  EXPECT_EQ(w->available, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(w->price, (std::vector<double>{18.98, 19.5}));
  EXPECT_EQ(w->ondemand_price, 0);
  // The shared records' files stay counts.
  auto c = LoadAvailabilityJson(
      Write("us-east-1a_v100_4.json", R"({"metadata": {"gap_seconds": 300}, "data": [4, 0, 2]})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->available, (std::vector<int32_t>{4, 0, 2}));
  EXPECT_TRUE(c->read_as.empty());
  EXPECT_EQ(c->ondemand_price, 0);
}

// The guess can be overridden: SkyNomad's simulator reads every trace as
// preempted flags, price_info or not.
TEST_F(LoadersTest, TheTraceConventionCanBeNamed) {
  const std::string plain =
      Write("us-east-1a_v100_1.json", R"({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1]})");
  auto flags = LoadAvailabilityFile(plain, TraceConvention::kPreempted);
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_EQ(flags->available, (std::vector<int32_t>{1, 0, 0}));
  EXPECT_NE(flags->read_as.find("as asked"), std::string::npos) << flags->read_as;
  auto counts = LoadAvailabilityJson(plain, TraceConvention::kAvailable);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(counts->available, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_TRUE(counts->read_as.empty());
  const std::string priced = Write("us-east-1b_v100_1.json", R"({"metadata": {"gap_seconds": 600,
          "price_info": {"on_demand_price": 3.06}}, "data": [0, 1]})");
  auto asked = LoadAvailabilityJson(priced, TraceConvention::kAvailable);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ(asked->available, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(asked->ondemand_price, 3.06);
  EXPECT_NE(asked->read_as.find("counts of obtainable instances, as asked"), std::string::npos);
  auto gang = LoadAvailabilityJson(
      Write("us-east-1c_v100_4.json", R"({"metadata": {"gap_seconds": 300}, "data": [4]})"),
      TraceConvention::kPreempted);
  EXPECT_EQ(gang.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gang.status().message().find("data[0]: not 0 or 1 (got 4): the trace convention "
                                         "asked is 'preempted'"),
            std::string::npos)
      << gang.status().ToString();
  EXPECT_EQ(ParseTraceConvention("preempted").value(), TraceConvention::kPreempted);
  EXPECT_EQ(ParseTraceConvention("inverted").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LoadersTest, ProbeCsvOneTickAProbeUnlessTheProbingPaused) {
  // 195 s probes, 194-280 s apart: one tick each (the shared JSON's rule).
  auto t = LoadAvailabilityFile(Write("us-east-1c_v100_1.csv",
                                      "date,availability\n"
                                      "2023-02-15 22:08:16,0\n"
                                      "2023-02-15 22:11:31,1\n"
                                      "2023-02-15 22:14:46,1\n"
                                      "2023-02-15 22:19:26,0\n"
                                      "2023-02-15 22:22:41,1\n"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->gap_seconds, 195);
  EXPECT_EQ(t->available, (std::vector<int32_t>{0, 1, 1, 0, 1}));
  EXPECT_EQ(t->start_unix_s, 1676498896);
  EXPECT_EQ(t->pool.Key(), "aws/us-east-1c/v100_1");
  // A pause of 10 probes: ticks on time, each the last probe before it.
  auto h = LoadAvailabilityCsv(Write("z_a.csv",
                                     "timestamp,count\n"
                                     "2023-02-15 00:00:00,2\n"
                                     "2023-02-15 00:01:00,0\n"
                                     "2023-02-15 00:02:00,1\n"
                                     "2023-02-15 00:12:00,3\n"
                                     "2023-02-15 00:13:00,0\n"));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->gap_seconds, 60);
  EXPECT_EQ(h->available, (std::vector<int32_t>{2, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 0}));
  EXPECT_NE(h->read_as.find("1 holes"), std::string::npos) << h->read_as;
  // JSON by any other extension.
  auto j = LoadAvailabilityFile(
      Write("us-east-1a_v100_1.json", R"({"metadata": {"gap_seconds": 195}, "data": [0, 1]})"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->available, (std::vector<int32_t>{0, 1}));
}

TEST_F(LoadersTest, MissingFilesAreNotFound) {
  EXPECT_EQ(LoadAvailabilityJson((dir_ / "none.json").string()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(LoadPriceChangePoints((dir_ / "none.csv").string()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(LoadCatalogCsv((dir_ / "none.csv").string()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadAwsSpotPriceHistory((dir_ / "none.json").string()).status().code(),
            StatusCode::kNotFound);
}

// A directory given as a trace (a `market.traces` entry, `--trace DIR`) once
// aborted the process with std::bad_alloc.
TEST_F(LoadersTest, DirectoriesAreRefusedNamingThePath) {
  const std::string dir = dir_.string();
  for (Status s : {LoadAvailabilityJson(dir).status(), LoadPriceChangePoints(dir).status(),
                   LoadCatalogCsv(dir).status(), LoadAwsSpotPriceHistory(dir).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(dir + ": is a directory, expected a regular file"),
              std::string::npos)
        << s.ToString();
  }
}

// Each malformed input must fail with InvalidArgument naming file, line or record, and field.
TEST_F(LoadersTest, BadInputsNameFileLineAndField) {
  const std::string kCsvHead = "tick,timestamp,availability_zone,instance_type,spot_usd_per_hour\n";
  const std::string kRow0 = "0,2023-02-15 22:08:16,us-east-1a,p3.2xlarge,1.5\n";
  struct Case {
    std::string file, text, message;
  } cases[] = {
      {"a.json", "{\"metadata\": {\"gap_seconds\": 0}, \"data\": [1]}",
       "a.json: metadata.gap_seconds: must be a number of seconds in [1, 604800] (got 0)"},
      {"a.json", "{\"metadata\": {}, \"data\": [1]}", "a.json: metadata.gap_seconds: missing"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1, -1]}",
       "a.json: data[1]: not an integer count in [0, 1000000] (got -1)"},
      // Bounds that keep tick arithmetic finite: a gap of 1e-20 s made a
      // deadline of hours overflow int64 ticks and SpotSim spin.
      {"a.json", "{\"metadata\": {\"gap_seconds\": 1e-20}, \"data\": [1]}",
       "a.json: metadata.gap_seconds: must be a number of seconds in [1, 604800] (got 1e-20)"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 1e9}, \"data\": [1]}",
       "a.json: metadata.gap_seconds: must be a number of seconds in [1, 604800]"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": \"60\"}, \"data\": [1]}",
       "a.json: metadata.gap_seconds: must be a number of seconds"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1, 1000001]}",
       "a.json: data[1]: not an integer count in [0, 1000000] (got 1000001)"},
      // SkyNomad's format: flags only, its prices and zone well formed.
      {"a.json", R"({"metadata": {"gap_seconds": 5, "price_info": {}}, "data": [0, 2]})",
       "a.json: data[1]: not 0 or 1 (got 2): metadata.price_info marks a SkyNomad trace"},
      {"a.json", R"({"metadata": {"gap_seconds": 5, "price_info": 3}, "data": [0]})",
       "a.json: metadata.price_info: not an object"},
      {"a.json",
       R"({"metadata": {"gap_seconds": 5, "price_info": {"on_demand_price": -1}}, "data": [0]})",
       "a.json: metadata.price_info.on_demand_price: not a finite price > 0 (got -1)"},
      {"a.json", R"({"metadata": {"gap_seconds": 5, "price_info": {"price": "x"}}, "data": [0]})",
       "a.json: metadata.price_info.price: not a finite price > 0"},
      {"a.json", R"({"metadata": {"gap_seconds": 5, "price_info": {}, "zone": 7}, "data": [0]})",
       "a.json: metadata.zone: not a zone name (got 7)"},
      {"a.json",
       R"({"metadata": {"gap_seconds": 5, "price_info": {}, "start_time": "soon"}, "data": [0]})",
       "a.json: metadata.start_time: not a UTC time (got \"soon\")"},
      // Probe CSVs.
      {"a.csv", "date,availability\n2023-02-15 22:08:16,1\n", "a.csv: 1 probe rows"},
      {"a.csv", "when,availability\n2023-02-15 22:08:16,1\n", "a.csv:1: no time column"},
      {"a.csv", "date,up\n2023-02-15 22:08:16,1\n", "a.csv:1: no availability column"},
      {"a.csv", "date,availability\n2023-02-15 22:08:16,1\nnoon,0\n",
       "a.csv:3: date: not a UTC time 'noon'"},
      {"a.csv", "date,availability\n2023-02-15 22:08:16,1\n2023-02-15 22:08:16,0\n",
       "a.csv:3: date: not after the row before"},
      {"a.csv", "date,availability\n2023-02-15 22:08:16,1\n2023-02-15 22:11:31,yes\n",
       "a.csv:3: availability: not a count of instances in [0, 1000000] 'yes'"},
      {"a.csv",
       "date,availability\n2023-02-15 00:00:00,1\n2023-02-15 00:00:01,1\n2023-02-15 "
       "00:00:02,1\n2030-02-15 00:00:02,1\n",
       "s of probes every 1 s is more than 31622400 ticks"},
      // nlohmann would keep the last of two equal keys without a word.
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1], \"data\": [0, 0]}",
       "a.json: data: given twice (JSON keys must be unique)"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5, \"gap_seconds\": 60}, \"data\": [1]}",
       "a.json: metadata.gap_seconds: given twice"},
      {"h.json",
       "{\"SpotPriceHistory\": [{\"AvailabilityZone\": \"us-east-1a\", \"SpotPrice\": \"1\", "
       "\"SpotPrice\": \"2\"}]}",
       "h.json: SpotPriceHistory[0].SpotPrice: given twice"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1, 0.5]}", "a.json: data[1]:"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1, \"x\"]}", "a.json: data[1]:"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": 3}", "a.json: data: missing"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1], \"prices\": [-2]}",
       "a.json: prices[0]: not a finite price >= 0"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5}, \"data\": [1, 1], \"prices\": [2]}",
       "a.json: prices: 1 values, data has 2"},
      {"a.json", "{\"metadata\": {\"gap_seconds\": 5},\n \"data\": [1,,]}",
       "a.json:2: JSON syntax error"},
      {"p.csv", kCsvHead + kRow0 + "17,2023-02-15 23:00:00,us-east-1a,p3.2xlarge,abc\n",
       "p.csv:3: spot_usd_per_hour: not a number 'abc'"},
      {"p.csv", kCsvHead + kRow0 + "17,2023-02-15 23:00:00,us-east-1a,p3.2xlarge,-1\n",
       "p.csv:3: spot_usd_per_hour: must be >= 0"},
      {"p.csv", kCsvHead + kRow0 + "17,2023-02-15 21:00:00,us-east-1a,p3.2xlarge,1\n",
       "p.csv:3: timestamp: time not after the previous row of us-east-1a (line 2)"},
      {"p.csv", kCsvHead + kRow0 + "17,yesterday,us-east-1a,p3.2xlarge,1\n",
       "p.csv:3: timestamp: not a UTC time 'yesterday'"},
      {"p.csv", kCsvHead + kRow0 + "17,2023-02-16 00:00:00,,p3.2xlarge,1\n",
       "p.csv:3: availability_zone: empty zone"},
      {"p.csv", "zone,tick\nus-east-1a,0\n", "p.csv:1: no price column"},
      {"c.csv", "instance_type,region,gpu_count,memory\np3.2xlarge,us-east-1,one,61 GB\n",
       "c.csv:2: gpu_count: not a number 'one'"},
      {"c.csv", "instance_type,region,gpu_count,memory\np3.2xlarge,us-east-1,1,61 XB\n",
       "c.csv:2: memory: not a number '61 XB'"},
      {"c.csv", "instance_type,region,ondemand_usd_per_hour\np3.2xlarge,us-east-1,-3\n",
       "c.csv:2: ondemand_usd_per_hour: must be >= 0"},
      {"c.csv", "instance_type,region\n,us-east-1\n", "c.csv:2: instance_type: empty"},
      {"h.json", R"({"SpotPriceHistory": [{"AvailabilityZone": "us-east-1a",
        "InstanceType": "p3.2xlarge", "SpotPrice": "x", "Timestamp": "2023-01-01T00:00:00Z"}]})",
       "h.json: SpotPriceHistory[0]: SpotPrice: not a number"},
      {"h.json", R"({"SpotPriceHistory": [{"AvailabilityZone": "us-east-1a",
        "InstanceType": "p3.2xlarge", "SpotPrice": "1", "Timestamp": "noon"}]})",
       "h.json: SpotPriceHistory[0]: Timestamp: not a UTC time 'noon'"},
      {"h.json", R"({"SpotPriceHistory": [{"InstanceType": "p3.2xlarge"}]})",
       "h.json: SpotPriceHistory[0]: AvailabilityZone: missing"},
  };
  for (const Case& c : cases) {
    std::string path = Write(c.file, c.text);
    Status s;
    if (c.file == "a.json") s = LoadAvailabilityJson(path).status();
    if (c.file == "a.csv") s = LoadAvailabilityCsv(path).status();
    if (c.file == "p.csv") s = LoadPriceChangePoints(path).status();
    if (c.file == "c.csv") s = LoadCatalogCsv(path).status();
    if (c.file == "h.json") s = LoadAwsSpotPriceHistory(path).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << "want: " << c.message << "\n got: " << s.ToString();
  }
}

TEST_F(LoadersTest, PriceChangePointsByTimestampTickAndOffset) {
  std::string path = Write("p.csv",
                           "tick,timestamp,availability_zone,instance_type,spot_usd_per_hour\r\n"
                           "0,2023-02-15 22:08:16,us-east-1a,p3.2xlarge,1.5\r\n"
                           "10,2023-02-15 22:10:16,us-east-1a,p3.2xlarge,1.6\r\n"
                           "0,2023-02-15 22:08:20,us-west-2b,p3.2xlarge,0.9\r\n");
  auto by_time = LoadPriceTable(path);
  ASSERT_TRUE(by_time.ok()) << by_time.status().ToString();
  EXPECT_EQ(by_time->start_unix_s, 1676498896);
  const StepSeries& a = by_time->series.at("us-east-1a");
  EXPECT_EQ(a.time_s, (std::vector<double>{0, 120}));
  EXPECT_EQ(a.value, (std::vector<double>{1.5, 1.6}));
  EXPECT_EQ(by_time->series.at("us-west-2b").time_s, std::vector<double>{4});
  auto by_tick = LoadPriceTable(path, 6);
  ASSERT_TRUE(by_tick.ok()) << by_tick.status().ToString();
  EXPECT_EQ(by_tick->series.at("us-east-1a").time_s, (std::vector<double>{0, 60}));
  EXPECT_EQ(by_tick->start_unix_s, 1676498896);
  auto offs = LoadPriceChangePoints(Write("o.csv",
                                          "offset_seconds,availability_zone,spot_usd_per_hour\n"
                                          "0,z1,1\n30,z1,2\n"));
  ASSERT_TRUE(offs.ok()) << offs.status().ToString();
  EXPECT_EQ(offs->at("z1").time_s, (std::vector<double>{0, 30}));
}

TEST_F(LoadersTest, PriceFileWithSeveralTypesKeysByZoneAndTypeAndSkipsLeadingEmpty) {
  auto t = LoadPriceTable(Write("g.csv",
                                "valid_from_commit_date,machine_type,region,spot_usd_per_hour\n"
                                "2022-02-09T23:07:12+00:00,a2,us-central1,\n"
                                "2022-02-09T23:07:12+00:00,n2,us-central1,0.5\n"
                                "2023-05-08T00:00:00+00:00,a2,us-central1,1.25\n"
                                "2023-05-09T00:00:00+00:00,n2,us-central1,\n"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->series.size(), 2u);
  EXPECT_EQ(t->series.at("us-central1/a2").value, std::vector<double>{1.25});
  EXPECT_EQ(t->series.at("us-central1/n2").time_s, std::vector<double>{0});
  EXPECT_EQ(t->withdrawn_s.size(), 1u);
  EXPECT_EQ(t->withdrawn_s.at("us-central1/n2"), 1683590400 - 1644448032);
}

TEST_F(LoadersTest, AttachPricesResamplesOntoTheTraceGrid) {
  auto table = LoadPriceTable(Write("p.csv",
                                    "tick,availability_zone,spot_usd_per_hour\n"
                                    "0,us-east-1a,1\n2,us-east-1a,2\n"),
                              100);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  Trace t;
  t.gap_seconds = 100;
  t.available = {1, 1, 1, 1};
  t.pool.zone = "us-east-1a";
  ASSERT_TRUE(AttachPrices(*table, &t).ok());
  EXPECT_EQ(t.price, (std::vector<double>{1, 1, 2, 2}));
  t.pool.zone = "eu-west-1a";
  EXPECT_EQ(AttachPrices(*table, &t).code(), StatusCode::kNotFound);
}

TEST_F(LoadersTest, AwsSpotPriceHistorySortsAndFiltersProduct) {
  std::string path = Write("h.json", R"({"SpotPriceHistory": [
    {"AvailabilityZone": "us-east-1a", "InstanceType": "p3.2xlarge",
     "ProductDescription": "Linux/UNIX", "SpotPrice": "0.918000",
     "Timestamp": "2023-04-02T00:00:00+00:00"},
    {"AvailabilityZone": "us-east-1a", "InstanceType": "p3.2xlarge",
     "ProductDescription": "Windows", "SpotPrice": "1.5",
     "Timestamp": "2023-04-02T00:00:00+00:00"},
    {"AvailabilityZone": "us-east-1a", "InstanceType": "p3.2xlarge",
     "ProductDescription": "Linux/UNIX", "SpotPrice": 0.9, "Timestamp": "2023-04-01T00:00:00Z"}
  ]})");
  auto all = LoadAwsSpotPriceHistory(path);
  EXPECT_EQ(all.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(all.status().message().find("ProductDescription"), std::string::npos);
  auto lnx = LoadAwsSpotPriceHistory(path, "Linux/UNIX");
  ASSERT_TRUE(lnx.ok()) << lnx.status().ToString();
  const StepSeries& s = lnx->at("us-east-1a/p3.2xlarge");
  EXPECT_EQ(s.time_s, (std::vector<double>{1680307200, 1680393600}));
  EXPECT_EQ(s.value, (std::vector<double>{0.9, 0.918}));
}

TEST_F(LoadersTest, CatalogAwsAndGcpShapes) {
  auto aws = LoadCatalogCsv(Write(
      "aws.csv",
      "instance_type,gpu_model,gpu_count,gpu_memory,vcpus,memory,region,ondemand_usd_per_hour\n"
      "p3.2xlarge,NVIDIA Tesla V100,1,16 GB,8,61 GB,us-east-1,3.06\n"));
  ASSERT_TRUE(aws.ok()) << aws.status().ToString();
  ASSERT_EQ(aws->size(), 1u);
  const CatalogEntry& e = aws->front();
  EXPECT_EQ(e.cloud, "aws");
  EXPECT_EQ(e.gpu_count, 1);
  EXPECT_EQ(e.gpus, 1);
  EXPECT_EQ(e.memory_gb, 61);
  EXPECT_EQ(e.ondemand_usd_per_hour, 3.06);
  EXPECT_EQ(e.spot_usd_per_hour, 0);
  auto gcp = LoadCatalogCsv(Write("gcp.csv",
                                  "machine_type,vcpus,ram_gb,gpu_model,gpu_count,region,"
                                  "ondemand_usd_per_hour,spot_usd_per_hour\n"
                                  "c2-standard-4,4,16,,0,northamerica-south1,,0.034\n"
                                  "g6f,8,32,L40,0.25,us-east-1,0.68,\n"));
  ASSERT_TRUE(gcp.ok()) << gcp.status().ToString();
  EXPECT_EQ(gcp->front().cloud, "gcp");
  EXPECT_EQ(gcp->front().ondemand_usd_per_hour, 0);
  EXPECT_EQ(gcp->front().spot_usd_per_hour, 0.034);
  EXPECT_EQ(gcp->front().memory_gb, 16);
  EXPECT_EQ(gcp->back().gpu_count, 1);
  EXPECT_EQ(gcp->back().gpus, 0.25);
}

}  // namespace
}  // namespace spot::market
