#include "monitor/dashboard.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "monitor/webdriver.h"

namespace spot::monitor {
namespace {

using json = nlohmann::json;

constexpr char kDataPath[] = "/api/v1/jobs/fashion-mnist-spot/dashboard";
constexpr int kPollMs = 100;
constexpr double kWaitS = 15;
const char* const kPanels[] = {"fleet",  "market",      "progress", "cost",
                               "epochs", "utilization", "loss",     "accuracy"};

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json Sample() {
  return json::parse(ReadText(SPOT_SOURCE_DIR "/src/monitor/testdata/dashboard_sample.json"));
}

// A job that has just been submitted: no data in any array.
json EmptyJob() {
  return json::parse(R"({"version": 1, "live": true,
    "job": {"id": "new-job", "state": "PENDING", "nodes": 2, "compute_hours": 1,
            "deadline_hours": 4, "now_s": 0},
    "summary": {}, "pools": [{"name": "us-east-1a", "t_s": [], "price": [], "capacity": []}],
    "instances": [], "events": [], "progress": {"t_s": [], "hours": []},
    "cost": {"t_s": [], "usd": [], "ondemand_usd": []}, "epochs": [],
    "utilization": {"bucket_s": 300, "t_s": [], "workers": []},
    "training": {"step": [], "loss": [], "lr": []},
    "evaluation": {"step": [], "test_accuracy": []}})");
}

// The job `ticks` market ticks later, `steps` training steps further.
json Advance(json d, int ticks, int steps) {
  auto push_last = [](json& a, double delta) { a.push_back(a.back().get<double>() + delta); };
  double tick = d["pools"][0]["t_s"][1].get<double>() - d["pools"][0]["t_s"][0].get<double>();
  for (int k = 0; k < ticks; ++k) {
    for (json& p : d["pools"]) {
      push_last(p["t_s"], tick);
      push_last(p["price"], 0.01);
      p["capacity"].push_back(p["capacity"].back());
    }
    push_last(d["progress"]["t_s"], tick);
    push_last(d["progress"]["hours"], tick / 3600);
    push_last(d["cost"]["t_s"], tick);
    push_last(d["cost"]["usd"], 0.1);
    push_last(d["cost"]["ondemand_usd"], 0.3);
  }
  json& util = d["utilization"];
  int buckets = static_cast<int>(ticks * tick / util["bucket_s"].get<double>());
  for (int k = 0; k < buckets; ++k) {
    push_last(util["t_s"], util["bucket_s"].get<double>());
    for (json& w : util["workers"])
      w["busy"].push_back(w["busy"].back().is_null() ? json() : json(0.9));
  }
  for (int s = 5; s <= steps; s += 5) {
    push_last(d["training"]["step"], 5);
    d["training"]["loss"].push_back(0.3);
    d["training"]["lr"].push_back(0.001);
  }
  push_last(d["evaluation"]["step"], steps);
  d["evaluation"]["test_accuracy"].push_back(0.9);
  d["summary"]["step"] = d["summary"]["step"].get<int>() + steps;
  d["job"]["now_s"] = d["job"]["now_s"].get<double>() + ticks * tick;
  return d;
}

// ---------------------------------------------------------------------------
// The document itself.

TEST(DashboardHtmlTest, IsSelfContained) {
  std::string html = DashboardHtml({.title = "job", .data_url = kDataPath});
  std::regex attr(R"re(\b(src|href|action)\s*=\s*["']?([^"'\s>]*))re", std::regex::icase);
  std::set<std::string> urls;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), attr); it != std::sregex_iterator();
       ++it) {
    urls.insert((*it)[2].str());
  }
  for (const std::string& url : urls) {
    EXPECT_TRUE(url.starts_with("data:")) << "external reference: " << url;
  }
  EXPECT_EQ(html.find("//cdn"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link rel=\"stylesheet\""), std::string::npos);
  EXPECT_NE(html.find("\"data_url\":\"/api/v1/jobs/fashion-mnist-spot/dashboard\""),
            std::string::npos);
}

TEST(DashboardHtmlTest, InlinesUplotAndThePagesOwnFiles) {
  std::string html = DashboardHtml({.title = "job", .data_url = kDataPath});
  EXPECT_NE(html.find("uPlot"), std::string::npos);
  EXPECT_NE(html.find(".u-legend"), std::string::npos);        // uPlot's CSS
  EXPECT_NE(html.find("window.SpotDash"), std::string::npos);  // ours
  EXPECT_NE(html.find("<section id=\"utilization\""), std::string::npos);
  EXPECT_EQ(html.find("{{"), std::string::npos) << "a template marker was left";
  EXPECT_GT(html.size(), 50'000u);
}

TEST(DashboardHtmlTest, EscapesSnapshotAndTitle) {
  json data = {{"job", {{"id", "x"}, {"message", "</script><script>alert(1)</script><!--"}}}};
  std::string html = DashboardHtml({.title = "a <b> & \"c\"", .snapshot_json = data.dump()});
  EXPECT_EQ(html.find("</script><script>alert(1)"), std::string::npos);
  EXPECT_EQ(html.find("<!--\""), std::string::npos);
  EXPECT_NE(html.find("\\u003c/script>\\u003cscript>alert(1)"), std::string::npos);
  EXPECT_NE(html.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  // The snapshot element holds exactly the JSON, which still parses the same.
  std::string open = "<script type=\"application/json\" id=\"spot-snapshot\">";
  size_t begin = html.find(open) + open.size();
  size_t end = html.find("</script>", begin);
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(json::parse(html.substr(begin, end - begin)), data);
}

TEST(DashboardHtmlTest, LiveModeCarriesNoSnapshot) {
  std::string html =
      DashboardHtml({.title = "t", .data_url = kDataPath, .snapshot_json = "{\"x\":1}"});
  EXPECT_NE(html.find("id=\"spot-snapshot\">null</script>"), std::string::npos);
  EXPECT_NE(html.find("\"poll_ms\":1000"), std::string::npos);
  EXPECT_NE(DashboardHtml({.data_url = "/d", .poll_ms = 1}).find("\"poll_ms\":50"),
            std::string::npos);
}

// ---------------------------------------------------------------------------
// In a headless Chromium.

// Serves the live page at "/", a snapshot page at "/snapshot" and the data at
// kDataPath, on 127.0.0.1; records every path asked for.
class TestSite {
 public:
  TestSite() {
    server_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(DashboardHtml({.title = "fashion-mnist-spot · SpotTrain",
                                     .data_url = kDataPath,
                                     .poll_ms = kPollMs}),
                      "text/html; charset=utf-8");
    });
    server_.Get("/snapshot", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu_);
      res.set_content(snapshot_page_, "text/html; charset=utf-8");
    });
    server_.Get(kDataPath, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu_);
      ++data_requests_;
      if (failing_) {
        res.status = 503;
        res.set_content("{\"error\":\"controller restarting\"}", "application/json");
        return;
      }
      res.set_content(data_, "application/json");
    });
    server_.set_logger([this](const httplib::Request& req, const httplib::Response&) {
      std::lock_guard<std::mutex> l(mu_);
      paths_.insert(req.path);
    });
    // Short idle limits: stop() waits for the connections Chromium keeps open.
    server_.set_keep_alive_timeout(1);
    server_.set_read_timeout(1, 0);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~TestSite() {
    server_.stop();
    thread_.join();
  }

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  void SetData(const json& d) {
    std::lock_guard<std::mutex> l(mu_);
    data_ = d.dump();
  }
  void SetFailing(bool failing) {
    std::lock_guard<std::mutex> l(mu_);
    failing_ = failing;
  }
  void SetSnapshotPage(std::string html) {
    std::lock_guard<std::mutex> l(mu_);
    snapshot_page_ = std::move(html);
  }
  int data_requests() {
    std::lock_guard<std::mutex> l(mu_);
    return data_requests_;
  }
  std::set<std::string> paths() {
    std::lock_guard<std::mutex> l(mu_);
    return paths_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::string data_ = "{}";
  std::string snapshot_page_;
  bool failing_ = false;
  int data_requests_ = 0;
  std::set<std::string> paths_;
};

// What the page shows, read through its test hooks.
constexpr char kReadPage[] = R"js(
  const points = {};
  for (const s of document.querySelectorAll('main section')) points[s.id] = +s.dataset.points;
  const banner = document.getElementById('error');
  return {
    points: points,
    updates: +document.body.dataset.updates,
    step: document.body.dataset.step || '',
    state: document.body.dataset.state || '',
    live: document.body.dataset.live || '',
    polling: document.body.dataset.polling || '',
    plots: document.querySelectorAll('.uplot').length,
    canvases: document.querySelectorAll('.uplot canvas').length,
    fleet_rows: document.querySelectorAll('#fleet .fleet-row').length,
    heat_canvas: document.querySelectorAll('#utilization canvas').length,
    errors: window.__errors,
    banner: banner.hidden ? '' : banner.textContent,
    message: document.getElementById('job-message').textContent,
    resources: performance.getEntriesByType('resource').map((e) => e.name),
  };
)js";

class DashboardBrowserTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::filesystem::create_directories(kArtifacts);
    BrowserOptions options;
    options.log_path = std::string(kArtifacts) + "/chromedriver.log";
    auto browser = Browser::Start(options);
    if (browser.ok()) {
      browser_ = std::move(browser).value().release();
    } else {
      start_error_ = new Status(browser.status());
    }
  }
  static void TearDownTestSuite() {
    delete browser_;
    browser_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }

  void SetUp() override {
    if (start_error_ != nullptr && start_error_->code() == StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << start_error_->ToString();
    }
    ASSERT_NE(browser_, nullptr) << start_error_->ToString();
    ASSERT_TRUE(browser_->ConsoleErrors().ok());  // drops what earlier tests logged
  }
  // Leaves the page before site_ goes, so that it stops polling a server that
  // is gone.
  void TearDown() override {
    if (browser_ != nullptr) {
      EXPECT_TRUE(browser_->Navigate("about:blank").ok());
    }
  }

  json Read() {
    auto page = browser_->Execute(kReadPage);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    return page.ok() ? *page : json::object();
  }
  // Success once the JavaScript `expression` is truthy in the page.
  ::testing::AssertionResult Wait(const std::string& expression) {
    auto r = browser_->WaitFor(expression, kWaitS);
    if (r.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << r.status().ToString() << "\npage: " << Read().dump();
  }
  // No uncaught error in the page, nothing on its console but messages that
  // contain `expected` (when given). A request that Chromium aborted because
  // the machine's network interfaces changed (net::ERR_NETWORK_CHANGED: the
  // Slurm, EC2 and elastic end-to-end tests, which may run beside these, add
  // and remove veth pairs and a bridge) is the machine's doing, not the
  // page's; the page polls again.
  void ExpectNoErrors(const json& page, const std::string& expected = "") {
    EXPECT_EQ(page["errors"], json::array()) << page["errors"].dump(2);
    auto console = browser_->ConsoleErrors();
    ASSERT_TRUE(console.ok()) << console.status().ToString();
    for (const std::string& message : *console) {
      if (message.find("net::ERR_NETWORK_CHANGED") != std::string::npos) continue;
      EXPECT_TRUE(!expected.empty() && message.find(expected) != std::string::npos) << message;
    }
  }
  void SaveScreenshot(const std::string& name);

  static constexpr char kArtifacts[] = SPOT_BINARY_DIR "/test-artifacts";
  static Browser* browser_;
  static Status* start_error_;
  TestSite site_;
};

Browser* DashboardBrowserTest::browser_ = nullptr;
Status* DashboardBrowserTest::start_error_ = nullptr;

void DashboardBrowserTest::SaveScreenshot(const std::string& name) {
  // The window's height includes the browser's frame: add it.
  auto height = browser_->Execute(
      "return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight;");
  ASSERT_TRUE(height.ok()) << height.status().ToString();
  ASSERT_TRUE(browser_->SetWindowSize(1400, std::max(900, height->get<int>())).ok());
  auto png = browser_->ScreenshotPng();
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  ASSERT_GT(png->size(), 24u);
  EXPECT_EQ(png->substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png->substr(12, 4), "IHDR");
  auto be32 = [&](size_t at) {
    const auto* p = reinterpret_cast<const unsigned char*>(png->data() + at);
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  };
  EXPECT_GE(be32(16), 1000u);  // width
  EXPECT_GE(be32(20), 900u);   // height
  EXPECT_GT(png->size(), 60'000u) << "a nearly blank page?";
  std::ofstream(std::string(kArtifacts) + "/" + name, std::ios::binary) << *png;
}

TEST_F(DashboardBrowserTest, LiveRendersEveryPanelUpdatesAndStopsPolling) {
  json first = Sample();
  site_.SetData(first);
  ASSERT_TRUE(browser_->Navigate(site_.url("/")).ok());
  ASSERT_TRUE(Wait("document.body.dataset.ready === '1'"));
  json page = Read();
  for (const char* id : kPanels) EXPECT_GT(page["points"][id].get<int>(), 0) << id;
  EXPECT_EQ(page["points"].size(), std::size(kPanels));
  EXPECT_EQ(page["plots"], 6);  // price, capacity, progress, cost, loss, accuracy
  EXPECT_GE(page["canvases"].get<int>(), 6);
  EXPECT_EQ(page["heat_canvas"], 1);
  EXPECT_EQ(page["fleet_rows"], first["instances"].size());
  EXPECT_GE(page["updates"].get<int>(), 1);  // it may have polled again already
  EXPECT_EQ(page["step"], std::to_string(first["summary"]["step"].get<int>()));
  EXPECT_EQ(page["state"], "RUNNING");
  EXPECT_EQ(page["banner"], "");
  SaveScreenshot("dashboard.png");

  // New data: the page polls and applies it without a reload.
  json second = Advance(first, 10, 50);
  second["job"]["state"] = "RECOVERING";
  site_.SetData(second);
  std::string step = std::to_string(second["summary"]["step"].get<int>());
  ASSERT_TRUE(Wait("document.body.dataset.step === '" + step + "'"));
  json later = Read();
  EXPECT_GT(later["updates"].get<int>(), 1);
  EXPECT_EQ(later["state"], "RECOVERING");
  for (const char* id : {"market", "progress", "cost", "utilization", "loss", "accuracy"}) {
    EXPECT_GT(later["points"][id].get<int>(), page["points"][id].get<int>()) << id;
  }
  EXPECT_EQ(later["plots"], 6) << "charts are updated in place, not added";

  // Final data: polling stops.
  json last = second;
  last["live"] = false;
  last["job"]["state"] = "SUCCEEDED";
  site_.SetData(last);
  ASSERT_TRUE(
      Wait("document.body.dataset.state === 'SUCCEEDED' && document.body.dataset.polling === '0'"));
  int requests = site_.data_requests();
  std::this_thread::sleep_for(std::chrono::milliseconds(6 * kPollMs));
  EXPECT_EQ(site_.data_requests(), requests) << "still polling after live=false";
  json done = Read();
  EXPECT_EQ(done["live"], "0");
  ExpectNoErrors(done);
  // Nothing but the page and its data was loaded.
  EXPECT_EQ(site_.paths(), (std::set<std::string>{"/", kDataPath}));
  for (const json& r : done["resources"])
    EXPECT_NE(r.get<std::string>().find(kDataPath), std::string::npos) << r;
}

TEST_F(DashboardBrowserTest, FetchErrorShowsBannerAndKeepsTheData) {
  site_.SetData(Sample());
  ASSERT_TRUE(browser_->Navigate(site_.url("/")).ok());
  ASSERT_TRUE(Wait("document.body.dataset.ready === '1'"));
  site_.SetFailing(true);
  ASSERT_TRUE(Wait("!document.getElementById('error').hidden"));
  json page = Read();
  EXPECT_NE(page["banner"].get<std::string>().find("HTTP 503"), std::string::npos)
      << page["banner"];
  for (const char* id : kPanels) EXPECT_GT(page["points"][id].get<int>(), 0) << id;
  int updates = page["updates"].get<int>();
  site_.SetFailing(false);
  ASSERT_TRUE(Wait("document.getElementById('error').hidden && +document.body.dataset.updates > " +
                   std::to_string(updates)));
  ExpectNoErrors(Read(), "status of 503");
}

TEST_F(DashboardBrowserTest, SnapshotFromAFileRendersWithoutFetching) {
  json data = Sample();
  data["live"] = false;
  data["job"]["state"] = "SUCCEEDED";
  data["job"]["message"] = "done </script><script>window.__pwned = 1</script>";
  std::filesystem::path file = std::string(kArtifacts) + "/dashboard-snapshot.html";
  std::ofstream(file) << DashboardHtml({.title = "report", .snapshot_json = data.dump(2)});
  ASSERT_TRUE(browser_->Navigate("file://" + file.string()).ok());
  ASSERT_TRUE(Wait("document.body.dataset.ready === '1'"));
  json page = Read();
  for (const char* id : kPanels) EXPECT_GT(page["points"][id].get<int>(), 0) << id;
  EXPECT_EQ(page["fleet_rows"], data["instances"].size());
  EXPECT_EQ(page["state"], "SUCCEEDED");
  EXPECT_EQ(page["polling"], "0");
  EXPECT_EQ(page["message"], data["job"]["message"]);
  EXPECT_EQ(page["resources"], json::array()) << "a snapshot fetches nothing";
  auto pwned = browser_->Execute("return window.__pwned === undefined;");
  ASSERT_TRUE(pwned.ok());
  EXPECT_EQ(*pwned, true);
  ExpectNoErrors(page);
  SaveScreenshot("dashboard-snapshot.png");
}

// Data that is legal but awkward: pools on different ticks, one without
// prices, nulls and a string inside series, events of unknown instances, an
// epoch marked ongoing, no budget, a job past its deadline.
TEST_F(DashboardBrowserTest, AwkwardDataRendersWithoutErrors) {
  json d = Sample();
  json& b = d["pools"][1];
  json every_other = json::object({{"t_s", json::array()}, {"capacity", json::array()}});
  for (size_t i = 0; i < b["t_s"].size(); i += 2) {
    every_other["t_s"].push_back(b["t_s"][i].get<double>() + 30);
    every_other["capacity"].push_back(b["capacity"][i]);
  }
  b["t_s"] = every_other["t_s"];
  b["capacity"] = every_other["capacity"];
  b["price"] = json::array();
  b["risk"] = nullptr;
  d["pools"][0]["price"][3] = nullptr;
  d["pools"][0]["price"][4] = "n/a";
  d["training"]["loss"][7] = nullptr;
  d["training"]["lr"] = json::array();
  d["events"].push_back({{"t_s", 100}, {"kind", "notice"}, {"instance", "i-unknown"}});
  d["epochs"][1]["end_s"] = 18000;
  d["epochs"][1]["ongoing"] = true;
  d["job"]["budget_usd"] = nullptr;
  d["job"]["deadline_hours"] = 4;
  d["instances"][0].erase("end_reason");
  site_.SetSnapshotPage(DashboardHtml({.title = "awkward", .snapshot_json = d.dump()}));
  ASSERT_TRUE(browser_->Navigate(site_.url("/snapshot")).ok());
  ASSERT_TRUE(Wait("document.body.dataset.ready === '1'"));
  json page = Read();
  for (const char* id : kPanels) EXPECT_GT(page["points"][id].get<int>(), 0) << id;
  EXPECT_EQ(page["banner"], "");
  ExpectNoErrors(page);
  auto deadline =
      browser_->Execute("return document.querySelector('#card-deadline .card-value').textContent;");
  ASSERT_TRUE(deadline.ok());
  EXPECT_EQ(*deadline, "missed");
}

TEST_F(DashboardBrowserTest, JobWithNoDataYetRendersEmptyPanels) {
  site_.SetSnapshotPage(DashboardHtml({.title = "new", .snapshot_json = EmptyJob().dump()}));
  ASSERT_TRUE(browser_->Navigate(site_.url("/snapshot")).ok());
  ASSERT_TRUE(Wait("document.body.dataset.ready === '1'"));
  json page = Read();
  for (const char* id : kPanels) EXPECT_EQ(page["points"][id], 0) << id;
  EXPECT_EQ(page["state"], "PENDING");
  EXPECT_EQ(page["banner"], "");
  ExpectNoErrors(page);
  EXPECT_EQ(site_.paths(), std::set<std::string>{"/snapshot"});

  // Nothing at all (not even a job) still gives a page, with a note.
  site_.SetSnapshotPage(DashboardHtml({.title = "nothing"}));
  ASSERT_TRUE(browser_->Navigate(site_.url("/snapshot")).ok());
  ASSERT_TRUE(Wait("document.body.dataset.ready === '1'"));
  page = Read();
  EXPECT_NE(page["banner"].get<std::string>().find("no data"), std::string::npos) << page["banner"];
  EXPECT_EQ(page["errors"], json::array());
}

}  // namespace
}  // namespace spot::monitor
