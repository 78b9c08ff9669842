#include "cloud/ec2_provider.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "aws/aws_testing.h"
#include "aws/aws_xml.h"
#include "cloud/ec2_market_feed.h"
#include "cloud/provider_registry.h"
#include "core/base64.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::cloud {
namespace {

using aws::FailingProxy;
using aws::MotoServer;
using aws::MotoSkipReason;
using aws::VenvDir;

MotoServer* Moto() { return aws::SharedMotoServer(SPOT_SOURCE_DIR); }

#define SKIP_WITHOUT_MOTO()                                     \
  do {                                                          \
    if (Moto() == nullptr) {                                    \
      if (!HasFailure()) GTEST_SKIP() << "moto is unavailable"; \
      return;                                                   \
    }                                                           \
  } while (0)

// Log lines of the default logger while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

Ec2RetryOptions FastRetry(int attempts) {
  return {.max_attempts = attempts, .initial_backoff_s = 0.01, .max_backoff_s = 0.02};
}

std::unique_ptr<Ec2Client> Client(const std::string& endpoint = "", int attempts = 4) {
  aws::AwsConfig c = Moto()->Config();
  if (!endpoint.empty()) c.endpoint = endpoint;
  return std::make_unique<Ec2Client>(c, FastRetry(attempts));
}

// One of moto's default AMIs.
std::string Ami() {
  static std::string ami;
  if (ami.empty()) {
    auto c = Client();
    auto xml = c->Call("DescribeImages", {});
    EXPECT_TRUE(xml.ok()) << xml.status().ToString();
    if (xml.ok()) {
      auto ids = aws::XmlTexts(*xml, "item", "imageId");
      if (!ids.empty()) ami = ids.front();
    }
    EXPECT_FALSE(ami.empty());
  }
  return ami;
}

Ec2ProviderOptions Options(const std::string& job) {
  return {.job = job,
          .image_id = Ami(),
          .user_data = [](const InstanceSpec& s) -> Result<std::string> {
            return "#!/bin/bash\necho " + s.id + "\n";
          },
          .poll_interval_s = 30};
}

InstanceSpec Spot(const std::string& id, const std::string& zone = "us-east-1a") {
  return {.id = id,
          .zone = 0,
          .spot = true,
          .zone_name = zone,
          .region = "us-east-1",
          .instance_type = "m5.large",
          .max_price = 0.5};
}

// The instance as a raw DescribeInstances sees it.
Ec2InstanceState Describe(const std::string& ec2_id) {
  auto xml = Client()->Call("DescribeInstances", {{"InstanceId.1", ec2_id}});
  EXPECT_TRUE(xml.ok()) << xml.status().ToString();
  auto got = xml.ok() ? ParseEc2Instances(*xml) : std::vector<Ec2InstanceState>{};
  EXPECT_EQ(got.size(), 1u);
  return got.empty() ? Ec2InstanceState{} : got.front();
}

TEST(Ec2ProviderDataTest, RoundTripsAndRejectsOtherText) {
  auto id = DecodeEc2InstanceData(EncodeEc2InstanceData("i-0123"));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "i-0123");
  auto bad = DecodeEc2InstanceData("{\"pid\": 3}");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("pid"), std::string::npos);
}

TEST(Ec2OptionsTest, DeclaresItsJobFileParametersWithBounds) {
  std::vector<FieldInfo> fields = CollectFields([](FieldVisitor& v) {
    Ec2ProviderOptions o;
    DeclareFields(o, v);
  });
  std::vector<std::string> names;
  for (const FieldInfo& f : fields) names.push_back(f.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"region", "image_id", "subnet_id", "security_group_ids",
                                      "key_name", "iam_instance_profile", "allocation_strategy",
                                      "poll_interval_s", "profile", "price_feed"}));
  ASSERT_EQ(fields.size(), 10u);
  EXPECT_NE(fields[6].type.find("price-capacity-optimized"), std::string::npos) << fields[6].type;
  EXPECT_EQ(fields[7].default_value, "30");
  EXPECT_FALSE(fields[7].bounds.empty());
  EXPECT_EQ(fields[9].default_value, "true");
}

TEST(Ec2ErrorTest, CodesMapToStatus) {
  for (const char* code : {"InsufficientInstanceCapacity", "SpotMaxPriceTooLow",
                           "MaxSpotInstanceCountExceeded", "RequestLimitExceeded"}) {
    EXPECT_EQ(MapEc2Error("RunInstances", 400, code, "m").code(), StatusCode::kUnavailable) << code;
  }
  for (const char* code : {"UnauthorizedOperation", "AuthFailure"}) {
    Status s = MapEc2Error("RunInstances", 403, code, "m");
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << code;
    EXPECT_NE(s.message().find("ec2:RunInstances"), std::string::npos) << s.message();
  }
  Status s = MapEc2Error("RunInstances", 400, "InvalidParameterValue", "bad zone");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("InvalidParameterValue: bad zone"), std::string::npos);
}

TEST(Ec2ProviderTest, LaunchesSpotAndOnDemandListsAndTerminates) {
  SKIP_WITHOUT_MOTO();
  Ec2Provider p(Client(), Options("launch"));
  auto spot = p.Launch(Spot("w-1"), 10);
  ASSERT_TRUE(spot.ok()) << spot.status().ToString();
  InstanceSpec od = Spot("w-2", "us-east-1b");
  od.spot = false;
  od.zone = -1;
  od.max_price = 0;
  auto ondemand = p.Launch(od, 11);
  ASSERT_TRUE(ondemand.ok()) << ondemand.status().ToString();

  auto spot_id = DecodeEc2InstanceData(spot->provider_data);
  auto od_id = DecodeEc2InstanceData(ondemand->provider_data);
  ASSERT_TRUE(spot_id.ok() && od_id.ok());
  Ec2InstanceState s = Describe(*spot_id);
  EXPECT_EQ(s.zone, "us-east-1a");
  EXPECT_EQ(s.lifecycle, "spot");
  EXPECT_EQ(s.tags["spot:job"], "launch");
  EXPECT_EQ(s.tags["spot:instance"], "w-1");
  Ec2InstanceState o = Describe(*od_id);
  EXPECT_EQ(o.zone, "us-east-1b");
  EXPECT_EQ(o.lifecycle, "");
  EXPECT_EQ(o.tags["spot:instance"], "w-2");

  auto list = p.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].spec.id, "w-1");
  EXPECT_EQ(list[1].spec.id, "w-2");
  EXPECT_EQ(list[0].state, InstanceState::kRunning);

  ASSERT_TRUE(p.Terminate("w-1", 20).ok());
  EXPECT_TRUE(Describe(*spot_id).state == "shutting-down" ||
              Describe(*spot_id).state == "terminated");
  EXPECT_EQ(p.List()[0].state, InstanceState::kTerminated);
  EXPECT_EQ(p.List()[0].ended_s, 20);
  EXPECT_TRUE(p.Poll(100).value().empty());  // our own termination is no preemption
  EXPECT_EQ(p.Terminate("w-9", 20).code(), StatusCode::kNotFound);
  EXPECT_EQ(p.Launch(Spot("w-2"), 21).status().code(), StatusCode::kInvalidArgument);
}

TEST(Ec2ProviderTest, SpotWithoutAZoneIsAnInstantFleet) {
  SKIP_WITHOUT_MOTO();
  Ec2ProviderOptions o = Options("fleet-launch");
  o.allocation_strategy = "price-capacity-optimized";
  Ec2Provider p(Client(), o);
  auto v = p.Launch(Spot("c-1", ""), 0);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto id = DecodeEc2InstanceData(v->provider_data);
  ASSERT_TRUE(id.ok());
  Ec2InstanceState s = Describe(*id);
  EXPECT_EQ(s.tags["spot:instance"], "c-1");
  EXPECT_EQ(s.lifecycle, "spot");
  ASSERT_TRUE(p.Terminate("c-1", 10).ok());
  // A restarted controller reuses the launch template the first one made.
  Ec2Provider again(Client(), o);
  auto w = again.Launch(Spot("c-2", ""), 20);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE(again.Terminate("c-2", 30).ok());
}

TEST(Ec2ProviderTest, RestartedControllerAdoptsByIdAndByTag) {
  SKIP_WITHOUT_MOTO();
  std::vector<InstanceView> recorded;
  {
    Ec2Provider first(Client(), Options("adopt"));
    ASSERT_TRUE(first.Launch(Spot("a-1"), 0).ok());
    ASSERT_TRUE(first.Launch(Spot("a-2"), 0).ok());
    ASSERT_TRUE(first.Launch(Spot("a-3"), 0).ok());
    recorded = first.List();
  }  // the controller dies; its instances keep running
  ASSERT_EQ(recorded.size(), 3u);
  auto gone = DecodeEc2InstanceData(recorded[2].provider_data);
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(Client()->Call("TerminateInstances", {{"InstanceId.1", *gone}}).ok());

  Ec2Provider second(Client(), Options("adopt"));
  EXPECT_TRUE(second.Adopt(recorded[0], 50).ok());
  InstanceView by_tag = recorded[1];
  by_tag.provider_data.clear();  // launched, but its id was never recorded
  EXPECT_TRUE(second.Adopt(by_tag, 50).ok());
  EXPECT_EQ(second.Adopt(recorded[2], 50).code(), StatusCode::kNotFound);
  auto list = second.List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].state, InstanceState::kRunning);
  EXPECT_EQ(list[1].state, InstanceState::kRunning);
  EXPECT_EQ(list[1].provider_data, recorded[1].provider_data);  // found by its tag
  EXPECT_EQ(list[2].state, InstanceState::kLost);
  ASSERT_TRUE(second.Terminate("a-1", 60).ok());
  ASSERT_TRUE(second.Terminate("a-2", 60).ok());
}

TEST(Ec2ProviderTest, InstanceTerminatedBehindOurBackIsPreemptedAtTheNextPoll) {
  SKIP_WITHOUT_MOTO();
  Ec2Provider p(Client(), Options("preempt"));
  auto a = p.Launch(Spot("p-1"), 0);
  auto b = p.Launch(Spot("p-2"), 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(p.Poll(0).value().empty());
  const int64_t calls = p.api_calls();
  auto id = DecodeEc2InstanceData(a->provider_data);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(Client()->Call("TerminateInstances", {{"InstanceId.1", *id}}).ok());

  EXPECT_TRUE(p.Poll(29).value().empty());  // inside the poll interval: no API call
  EXPECT_EQ(p.api_calls(), calls);
  auto events = p.Poll(30).value();
  EXPECT_EQ(p.api_calls(), calls + 1);  // one DescribeInstances for both instances
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ(events[0].instance_id, "p-1");
  EXPECT_EQ(events[0].sim_s, 30);
  EXPECT_NE(events[0].detail.find(*id), std::string::npos) << events[0].detail;
  EXPECT_NE(events[0].detail.find("Client.UserInitiatedShutdown"), std::string::npos)
      << events[0].detail;
  auto list = p.List();
  EXPECT_EQ(list[0].state, InstanceState::kPreempted);
  EXPECT_EQ(list[0].ended_s, 30);
  EXPECT_EQ(list[1].state, InstanceState::kRunning);
  EXPECT_TRUE(p.Poll(60).value().empty());  // reported once
  ASSERT_TRUE(p.Terminate("p-2", 70).ok());
}

TEST(Ec2ProviderTest, OnePollIsOneApiCallWhateverTheFleetSize) {
  SKIP_WITHOUT_MOTO();
  Ec2Provider p(Client(), Options("fleet"));
  constexpr int kFleet = 24;
  for (int i = 0; i < kFleet; ++i) {
    ASSERT_TRUE(p.Launch(Spot("f-" + std::to_string(i)), 0).ok());
  }
  const int64_t launched = p.api_calls();
  EXPECT_EQ(launched, kFleet);  // one RunInstances each
  for (int pass = 1; pass <= 10; ++pass) {
    EXPECT_TRUE(p.Poll(pass * 10.0).value().empty());  // a reconcile every 10 s, polls every 30 s
  }
  EXPECT_EQ(p.api_calls() - launched, 4);  // polls at 10, 40, 70 and 100 s
  std::cout << "EC2 API calls per reconcile pass (" << kFleet
            << " instances, 10 passes): " << (p.api_calls() - launched) / 10.0 << "\n";
  for (int i = 0; i < kFleet; ++i) ASSERT_TRUE(p.Terminate("f-" + std::to_string(i), 110).ok());
}

TEST(Ec2ProviderTest, SpotPriceHistoryAndOfferings) {
  SKIP_WITHOUT_MOTO();
  auto c = Client();
  auto prices = DescribeSpotPrices(*c, "m5.large", {}, "");
  ASSERT_TRUE(prices.ok()) << prices.status().ToString();
  ASSERT_FALSE(prices->empty());
  for (const Ec2SpotPrice& p : *prices) {
    EXPECT_EQ(p.instance_type, "m5.large");
    EXPECT_TRUE(p.zone.starts_with("us-east-1")) << p.zone;
    EXPECT_GT(p.price, 0);
  }
  auto one = DescribeSpotPrices(*c, "m5.large", {"us-east-1b"}, "");
  ASSERT_TRUE(one.ok());
  for (const Ec2SpotPrice& p : *one) EXPECT_EQ(p.zone, "us-east-1b");
  auto zones = OfferedZones(*c, "m5.large");
  ASSERT_TRUE(zones.ok()) << zones.status().ToString();
  EXPECT_NE(std::find(zones->begin(), zones->end(), "us-east-1a"), zones->end());
}

TEST(Ec2MarketFeedTest, ParsesIsoTimes) {
  auto t = ParseIsoTime("2026-12-03T11:35:22.500Z");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1796297722.5);
  EXPECT_EQ(ParseIsoTime("2026-12-03 11:35").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIsoTime("2026-12-03T11:35:22+02:00").status().code(),
            StatusCode::kInvalidArgument);
}

// EC2's error body for an injected failure.
std::string Ec2ErrorBody(const std::string& code) {
  return "<Response><Errors><Error><Code>" + code + "</Code><Message>injected " + code +
         "</Message></Error></Errors><RequestID>x</RequestID></Response>";
}

TEST(Ec2MarketFeedTest, FillsTicksFromThePriceHistoryAndKeepsThemWhenUnreachable) {
  SKIP_WITHOUT_MOTO();
  FailingProxy proxy(Moto()->port(), Ec2ErrorBody);
  ASSERT_TRUE(proxy.ok());
  auto client = Client(proxy.endpoint(), /*attempts=*/1);
  const double start = static_cast<double>(std::time(nullptr)) - 3600;
  auto feed = Ec2MarketFeed::Create(
      client.get(), {.instance_type = "m5.large", .gap_seconds = 300, .start_unix_s = start});
  ASSERT_TRUE(feed.ok()) << feed.status().ToString();
  auto zones = (*feed)->zones();
  ASSERT_FALSE(zones.empty());
  EXPECT_EQ(zones[0]->pool.zone, "us-east-1a");  // offerings, sorted
  EXPECT_EQ((*feed)->known_ticks(), 0);
  ASSERT_TRUE((*feed)->Advance(11).ok());  // the hour up to now
  EXPECT_EQ((*feed)->known_ticks(), 12);
  for (const market::Trace* t : zones) {
    ASSERT_EQ(t->ticks(), 12) << t->pool.zone;
    ASSERT_EQ(t->price.size(), 12u);
    for (double p : t->price) EXPECT_GT(p, 0) << t->pool.zone;
    EXPECT_EQ(t->available[0], 1000);
    EXPECT_EQ(t->pool.instance_type, "m5.large");
  }
  const int before = proxy.requests();
  EXPECT_TRUE((*feed)->Advance(5).ok());  // known already: no request
  EXPECT_EQ(proxy.requests(), before);
  proxy.Fail(503, "Unavailable", 1);
  EXPECT_EQ((*feed)->Advance(12).code(), StatusCode::kUnavailable);
  EXPECT_EQ((*feed)->known_ticks(), 12);  // kept what it had
  EXPECT_EQ(zones[0]->ticks(), 12);
  ASSERT_TRUE((*feed)->Advance(12).ok());
  EXPECT_EQ(zones[0]->ticks(), 13);

  EXPECT_EQ(
      Ec2MarketFeed::Create(
          client.get(), {.instance_type = "m5.large", .gap_seconds = 0.5, .start_unix_s = start})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
}

TEST(Ec2ProviderTest, InjectedErrorsMapToTheDocumentedStatus) {
  SKIP_WITHOUT_MOTO();
  FailingProxy proxy(Moto()->port(), Ec2ErrorBody);
  ASSERT_TRUE(proxy.ok());
  LogCapture log;
  Ec2Provider p(Client(proxy.endpoint(), /*attempts=*/2), Options("errors"));
  const std::string secret = Moto()->Config().credentials.secret_access_key;
  struct Case {
    int http;
    std::string code;
    int times;
    StatusCode want;
  };
  const std::vector<Case> cases = {
      {400, "InsufficientInstanceCapacity", 1, StatusCode::kUnavailable},
      {400, "SpotMaxPriceTooLow", 1, StatusCode::kUnavailable},
      {400, "MaxSpotInstanceCountExceeded", 1, StatusCode::kUnavailable},
      {503, "RequestLimitExceeded", 2, StatusCode::kUnavailable},  // retried, then given up
      {403, "UnauthorizedOperation", 1, StatusCode::kFailedPrecondition},
      {401, "AuthFailure", 1, StatusCode::kFailedPrecondition},
      {400, "InvalidParameterValue", 1, StatusCode::kInvalidArgument},
  };
  int n = 0;
  for (const Case& c : cases) {
    proxy.Fail(c.http, c.code, c.times);
    const int before = proxy.requests();
    ++n;
    auto r = p.Launch(Spot("e-" + std::to_string(n)), n);
    EXPECT_EQ(r.status().code(), c.want) << c.code << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.code), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("RunInstances"), std::string::npos);
    EXPECT_EQ(r.status().message().find(secret), std::string::npos);
    EXPECT_EQ(proxy.requests() - before, c.times) << c.code;
  }
  // Throttling once, then the call goes through.
  proxy.Fail(503, "RequestLimitExceeded", 1);
  const int before = proxy.requests();
  auto ok = p.Launch(Spot("e-ok"), 20);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(proxy.requests() - before, 2);
  EXPECT_EQ(p.List().size(), 1u);  // failed launches leave nothing behind
  EXPECT_EQ(log.text().find(secret), std::string::npos);
  EXPECT_NE(log.text().find("RequestLimitExceeded"), std::string::npos);  // the retry is logged
  ASSERT_TRUE(p.Terminate("e-ok", 30).ok());
}

// DescribeInstances failing is Poll's error (the controller decides how long
// to wait it out); the reclaim that happened meanwhile comes with the next
// Poll that gets an answer.
TEST(Ec2ProviderTest, AnApiOutageIsPollsErrorAndItsNewsComeWithTheNextAnswer) {
  SKIP_WITHOUT_MOTO();
  FailingProxy proxy(Moto()->port(), Ec2ErrorBody);
  ASSERT_TRUE(proxy.ok());
  Ec2Provider p(Client(proxy.endpoint(), /*attempts=*/2), Options("outage"));
  auto a = p.Launch(Spot("o-1"), 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto id = DecodeEc2InstanceData(a->provider_data);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(Client()->Call("TerminateInstances", {{"InstanceId.1", *id}}).ok());
  proxy.Fail(503, "Unavailable", 2);  // both attempts of the next call
  auto down = p.Poll(30);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().ToString();
  EXPECT_NE(down.status().message().find("EC2 poll"), std::string::npos);
  EXPECT_NE(down.status().message().find("DescribeInstances"), std::string::npos);
  EXPECT_NE(down.status().message().find("Unavailable"), std::string::npos);
  EXPECT_EQ(p.List()[0].state, InstanceState::kRunning);  // nothing seen, nothing assumed
  // Inside the poll interval the fleet is still unseen: the same error, no call.
  const int before = proxy.requests();
  auto still = p.Poll(45);
  ASSERT_FALSE(still.ok());
  EXPECT_EQ(still.status().message(), down.status().message());
  EXPECT_EQ(proxy.requests(), before);
  auto events = p.Poll(60);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, ProviderEvent::Kind::kPreempted);
  EXPECT_EQ((*events)[0].instance_id, "o-1");
}

TEST(Ec2ProviderTest, WrongSecretFailsClearlyWithoutTheSecret) {
  SKIP_WITHOUT_MOTO();
  aws::AwsConfig c = Moto()->Config();
  c.credentials.secret_access_key = "not-the-right-secret-4711";
  Ec2Provider p(std::make_unique<Ec2Client>(c, FastRetry(1)), Options("auth"));
  auto r = p.Launch(Spot("x-1"), 0);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("RunInstances"), std::string::npos);
  EXPECT_EQ(r.status().message().find("not-the-right-secret-4711"), std::string::npos);
}

TEST(Ec2ProviderTest, UnreachableEndpointIsUnavailable) {
  aws::AwsConfig c{.endpoint = "http://127.0.0.1:1",
                   .region = "us-east-1",
                   .credentials = {.access_key_id = "k", .secret_access_key = "s"}};
  Ec2Provider p(std::make_unique<Ec2Client>(c, FastRetry(2)),
                {.image_id = "ami-12345678", .poll_interval_s = 1});
  auto r = p.Launch(Spot("u-1"), 0);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_EQ(p.api_calls(), 2);
}

// The user data of an instance as EC2 keeps it (base64 decoded).
std::string UserDataOf(const std::string& ec2_id) {
  auto xml = Client()->Call("DescribeInstanceAttribute",
                            {{"InstanceId", ec2_id}, {"Attribute", "userData"}});
  EXPECT_TRUE(xml.ok()) << xml.status().ToString();
  if (!xml.ok()) return "";
  return Base64Decode(aws::XmlText(*xml, "value")).value_or("");
}

TEST(Ec2RegistryTest, RequiresAnImageAndRendersEachInstancesUserData) {
  SKIP_WITHOUT_MOTO();
  ProviderRegistry registry;
  RegisterBuiltinProviders(registry);
  ProviderContext ctx{.instances_dir = "/var/lib/spot-test/instances",
                      .command =
                          [](const InstanceSpec& s, const std::string& local_dir) {
                            return std::vector<std::string>{
                                "/usr/bin/spot",    "worker", "--id", s.id,
                                "--checkpoint-dir", local_dir};
                          },
                      .job_name = "reg-job",
                      .rendezvous_url = "tcp://10.200.0.1:29400",
                      .checkpoint_location = "s3://ckpts/reg-job"};
  auto missing = registry.Create(ComponentConfig{.name = "ec2", .field = "provider"}, ctx);
  ASSERT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("provider.image_id"), std::string::npos)
      << missing.status().message();

  const aws::AwsConfig c = Moto()->Config();
  ASSERT_EQ(setenv("AWS_ENDPOINT_URL_EC2", c.endpoint.c_str(), 1), 0);
  ASSERT_EQ(setenv("AWS_ACCESS_KEY_ID", c.credentials.access_key_id.c_str(), 1), 0);
  ASSERT_EQ(setenv("AWS_SECRET_ACCESS_KEY", c.credentials.secret_access_key.c_str(), 1), 0);
  auto made =
      registry.Create(ComponentConfig{.name = "ec2",
                                      .params = {{"image_id", Ami()}, {"region", "us-east-1"}},
                                      .field = "provider",
                                      .quoted = {"image_id", "region"}},
                      ctx);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Provider& p = **made;
  EXPECT_EQ(p.feed(), nullptr);  // no zones in the context: the replay decides
  for (const std::string id : {"r-1", "r-2"}) {
    auto v = p.Launch(Spot(id), 0);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    auto ec2_id = DecodeEc2InstanceData(v->provider_data);
    ASSERT_TRUE(ec2_id.ok());
    EXPECT_EQ(Describe(*ec2_id).tags["spot:job"], "reg-job");
    const std::string script = UserDataOf(*ec2_id);
    EXPECT_NE(script.find("export SPOT_INSTANCE_ID='" + id + "'\n"), std::string::npos) << script;
    EXPECT_NE(script.find("export SPOT_RENDEZVOUS='tcp://10.200.0.1:29400'\n"), std::string::npos);
    EXPECT_NE(script.find("export SPOT_CHECKPOINT='s3://ckpts/reg-job'\n"), std::string::npos);
    EXPECT_NE(script.find("exec '/usr/bin/spot' 'worker' '--id' '" + id +
                          "' '--checkpoint-dir' '/var/lib/spot-test/instances/" + id + "'\n"),
              std::string::npos)
        << script;
    ASSERT_TRUE(p.Terminate(id, 1).ok());
  }

  // With the job's zones, EC2's prices become the job's market, known up to
  // its first tick; pools that name no EC2 instance type are refused, saying so.
  market::Trace zone{.pool = {.zone = "us-east-1a", .instance_type = "m5.large"},
                     .gap_seconds = 60};
  ctx.zones = {&zone};
  ctx.start_tick = 3;
  ctx.wall_epoch_unix_s = static_cast<double>(std::time(nullptr));
  const ComponentConfig priced{
      .name = "ec2", .params = {{"image_id", Ami()}}, .field = "provider", .quoted = {"image_id"}};
  auto fed = registry.Create(priced, ctx);
  ASSERT_TRUE(fed.ok()) << fed.status().ToString();
  ASSERT_NE((*fed)->feed(), nullptr);
  EXPECT_EQ((*fed)->feed()->known_ticks(), 4);
  ASSERT_EQ((*fed)->feed()->zones().size(), 1u);
  EXPECT_EQ((*fed)->feed()->zones()[0]->pool.zone, "us-east-1a");
  EXPECT_GT((*fed)->feed()->zones()[0]->price.back(), 0);
  zone.pool.instance_type = "gpu_1";
  auto unpriced = registry.Create(priced, ctx);
  ASSERT_FALSE(unpriced.ok());
  EXPECT_NE(unpriced.status().message().find("price_feed: false"), std::string::npos)
      << unpriced.status().message();
  unsetenv("AWS_ENDPOINT_URL_EC2");
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
}

// docs/job-spec.md tables the provider's parameters as `spot` declares them.
TEST(Ec2RegistryTest, JobSpecDocsTableTheParameters) {
  ProviderRegistry registry;
  RegisterBuiltinProviders(registry);
  ASSERT_TRUE(registry.Has("ec2"));
  const std::string table = FieldsMarkdown(registry.Fields("ec2"));
  auto doc = ReadFile(SPOT_SOURCE_DIR "/docs/job-spec.md");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_NE(doc->find("#### `ec2`\n\n" + registry.Help("ec2") + "\n\n" + table), std::string::npos)
      << "docs/job-spec.md should hold, under #### `ec2`:\n"
      << registry.Help("ec2") << "\n\n"
      << table;
}

}  // namespace
}  // namespace spot::cloud
