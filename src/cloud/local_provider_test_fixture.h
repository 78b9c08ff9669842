// The local provider's test fixture and helpers (tests only), shared by
// local_provider_test.cc (the market's rule) and local_provider_process_test.cc
// (processes, termination and adoption): a market of hand-made zones, sleeping
// instances, polling helpers and an IMDSv2 client.
#pragma once

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

#include "cloud/local_provider.h"
#include "core/process.h"
#include "core/temp_dir.h"

namespace spot::cloud::local_test {

// The local provider's own data about an instance (its process and port).
inline LocalInstanceData Local(const InstanceView& v) {
  auto d = DecodeLocalInstanceData(v.provider_data);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : LocalInstanceData{};
}

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

inline constexpr double kGap = 10;            // simulated seconds per tick
inline constexpr double kEpoch = 1796032800;  // wall time of simulated 0: 2026-11-30T10:00:00Z
inline constexpr double kCompression = 4;     // simulated seconds per wall second
inline constexpr char kAction[] = "/latest/meta-data/spot/instance-action";

inline market::Trace MakeTrace(const std::string& zone, std::vector<int32_t> available) {
  market::Trace t;
  t.pool = {.cloud = "aws", .region = "us-east-1", .zone = zone, .instance_type = "p3.2xlarge"};
  t.name = zone;
  t.gap_seconds = kGap;
  t.price.assign(available.size(), 0.9);
  t.available = std::move(available);
  return t;
}

// A spot instance in zone `zone` (0: us-east-1a), bidding `max_price` (0: no bid).
inline InstanceSpec Spot(const std::string& id, int zone, double max_price = 0) {
  return {.id = id,
          .zone = zone,
          .spot = true,
          .zone_name = "us-east-1" + std::string(1, static_cast<char>('a' + zone)),
          .region = "us-east-1",
          .instance_type = "p3.2xlarge",
          .max_price = max_price};
}

inline bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

inline InstanceSpec OnDemand(const std::string& id) {
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

inline std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::optional<InstanceView> Find(const LocalProvider& p, const std::string& id) {
  for (const InstanceView& v : p.List()) {
    if (v.spec.id == id) return v;
  }
  return std::nullopt;
}

// IMDSv2: a token, then a GET. Status and body; -1 when nothing answers.
inline std::pair<int, std::string> ImdsGet(int port, const std::string& path) {
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
inline Command Sleep() {
  return [](const InstanceSpec&, const std::string&) {
    return std::vector<std::string>{"/bin/sleep", "60"};
  };
}

// `/bin/sh -c SCRIPT`, with LOCAL_DIR in SCRIPT replaced by the instance's local disk.
inline Command Shell(const std::string& script) {
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
inline Command SleepNamedAfterInstance() {
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
      std::vector<ProviderEvent> polled = p.Poll(now_s).value();
      for (ProviderEvent& e : polled) {
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

}  // namespace spot::cloud::local_test
