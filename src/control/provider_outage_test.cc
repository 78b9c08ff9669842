// The controller over the EC2 provider against moto's EC2 server, in virtual
// time, with EC2's API failing through a proxy (aws/aws_testing.h): an
// outage shorter than controller.provider_outage_s is waited out and the job
// succeeds; a longer one fails the job with EC2's error. Skips when moto is
// unavailable.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aws/aws_testing.h"
#include "aws/aws_xml.h"
#include "cloud/ec2_provider.h"
#include "control/controller.h"
#include "core/clock.h"
#include "core/temp_dir.h"
#include "policy/registry.h"

namespace spot::control {
namespace {

constexpr double kEpoch = 1.8e9;
constexpr double kInterval = 10;  // wall (= simulated) seconds between reconcile passes

aws::MotoServer* Moto() { return aws::SharedMotoServer(SPOT_SOURCE_DIR); }

std::string Ec2ErrorBody(const std::string& code) {
  return "<Response><Errors><Error><Code>" + code + "</Code><Message>injected " + code +
         "</Message></Error></Errors><RequestID>x</RequestID></Response>";
}

class ProviderOutageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Moto() == nullptr) GTEST_SKIP() << "SKIPPED: moto is unavailable";
    proxy_ = std::make_unique<aws::FailingProxy>(Moto()->port(), Ec2ErrorBody);
    ASSERT_TRUE(proxy_->ok());
    auto dir = TempDir::Create("spot_provider_outage_test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_.emplace(std::move(dir).value());
    auto store = JobStore::Open((dir_->path() / "jobs.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    trace_.pool = {
        .cloud = "aws", .region = "us-east-1", .zone = "us-east-1a", .instance_type = "m5.large"};
    trace_.gap_seconds = 60;
    trace_.available.assign(400, 1);
    trace_.price.assign(400, 0.03);
    spec_.source = "job.yaml";
    spec_.compute_hours = 1;
    spec_.deadline_hours = 4;
    spec_.resources.nodes = 1;
    spec_.resources.min_nodes = 1;
    spec_.resources.instance_type = "m5.large";
    spec_.resources.region = "us-east-1";
    spec_.resources.ondemand_price = 0.096;
    spec_.resources.changeover_hours = 0.02;
    spec_.market.time_compression = 1;
    spec_.market.notice_seconds = 0;
    spec_.controller.reconcile_interval_s = kInterval;
    spec_.controller.terminate_grace_s = 0;
    spec_.controller.provider_outage_s = 600;
  }

  // Runs job `name` on EC2 (through the proxy); from 600 s of its time on,
  // the next `failures` EC2 requests fail with 503 Unavailable. The training
  // is done at 3600 s.
  Result<JobOutcome> Run(const std::string& name, int failures) {
    spec_.name = name;
    aws::AwsConfig config = Moto()->Config();
    aws::AwsConfig proxied = config;
    proxied.endpoint = proxy_->endpoint();
    auto images = cloud::Ec2Client(config, {}).Call("DescribeImages", {});
    EXPECT_TRUE(images.ok()) << images.status().ToString();
    const std::vector<std::string> amis =
        images.ok() ? aws::XmlTexts(*images, "item", "imageId") : std::vector<std::string>{};
    EXPECT_FALSE(amis.empty());
    cloud::Ec2Provider provider(
        std::make_unique<cloud::Ec2Client>(
            proxied, cloud::Ec2RetryOptions{.max_attempts = 1, .initial_backoff_s = 0.01}),
        {.job = name, .image_id = amis.empty() ? "" : amis.front(), .poll_interval_s = 30});
    policy::PolicyRegistry policies;
    policy::RegisterBuiltinPolicies(policies);
    auto policy = policies.Create("greedy");
    EXPECT_TRUE(policy.ok());
    bool failing = false;
    ControllerDeps d{.store = store_.get(),
                     .provider = &provider,
                     .zones = {&trace_},
                     .policy = std::move(policy).value(),
                     .clock = &clock_,
                     .new_job_epoch_unix_s = kEpoch};
    d.read_progress = [&] {
      const double now = clock_.NowUnixS() - kEpoch;
      if (now >= 600 && !failing) {
        failing = true;
        proxy_->Fail(503, "Unavailable", failures);
      }
      ProgressReport r;
      r.job = name;
      r.total_steps = 3600;
      r.step = static_cast<int64_t>(now);
      r.world = 1;
      r.done = now >= 3600;
      return KnownProgress(r);
    };
    Controller c(spec_, std::move(d));
    auto out = c.Run("outage");
    // Whatever the run left in EC2 goes (around the proxy).
    for (const cloud::InstanceView& v : provider.List()) {
      auto id = cloud::DecodeEc2InstanceData(v.provider_data);
      if (id.ok())
        (void)cloud::Ec2Client(config, {}).Call("TerminateInstances", {{"InstanceId.1", *id}});
    }
    return out;
  }

  int EventCount(const std::string& name, const std::string& kind) {
    auto events = store_->Events(name);
    EXPECT_TRUE(events.ok());
    int n = 0;
    for (const EventRecord& e : *events) n += e.kind == kind ? 1 : 0;
    return n;
  }

  std::unique_ptr<aws::FailingProxy> proxy_;
  std::optional<TempDir> dir_;
  std::unique_ptr<JobStore> store_;
  market::Trace trace_;
  RunSpec spec_;
  ManualClock clock_{kEpoch};
};

// Five failed DescribeInstances (one every 30 s: about 2 minutes), under the
// 10 minutes allowed: waited out, recorded, and the job succeeds.
TEST_F(ProviderOutageTest, AShortEc2OutageIsWaitedOut) {
  auto out = Run("short", 5);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kSucceeded) << out->message;
  EXPECT_EQ(EventCount("short", "provider-outage"), 1);
  EXPECT_GE(proxy_->requests(), 5);
}

// EC2 failing for longer than controller.provider_outage_s (21 polls span
// its 600 s; the terminations after them get through): the job fails at the
// limit, naming EC2's error and the limit.
TEST_F(ProviderOutageTest, AnEc2OutageLongerThanTheLimitFailsTheJobWithEc2sError) {
  auto out = Run("long", 25);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->state, JobState::kFailed) << out->message;
  for (const char* part :
       {"controller.provider_outage_s", "EC2 poll", "DescribeInstances", "HTTP 503 Unavailable"}) {
    EXPECT_NE(out->message.find(part), std::string::npos) << part << " in: " << out->message;
  }
  EXPECT_GE(out->sim_hours * 3600, 600 + 600 - 1e-6);
  EXPECT_LT(out->sim_hours * 3600, 3600);  // long before the training's end
}

}  // namespace
}  // namespace spot::control
