// The `spot run` job file's policy and provider: a name, or a name with
// parameters, validated by the registries with the file's positions.
#include "control/run_spec.h"

#include <gtest/gtest.h>

#include "cloud/provider_registry.h"
#include "policy/registry.h"

namespace spot::control {
namespace {

Result<RunSpec> Read(const std::string& yaml) {
  SPOT_ASSIGN_OR_RETURN(SpecReader r, SpecReader::FromString(yaml, "job.yaml"));
  RunSpec s;
  ReadRunSpecFields(r, &s);
  SPOT_RETURN_IF_ERROR(r.Finish());
  return s;
}

TEST(RunSpec, PolicyAndProviderByNameWithParameters) {
  auto s = Read("name: j\npolicy:\n  name: hazard-up\n  min_runs: 8\nprovider: local\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->policy.name, "hazard-up");
  EXPECT_EQ(s->policy.params.at("min_runs"), "8");
  EXPECT_EQ(s->policy.where.at("min_runs"), "job.yaml:4:13");
  EXPECT_EQ(s->provider.name, "local");
  policy::PolicyRegistry policies;
  policy::RegisterBuiltinPolicies(policies);
  EXPECT_TRUE(policies.Validate(s->policy).ok());
  cloud::ProviderRegistry providers;
  cloud::RegisterBuiltinProviders(providers);
  EXPECT_TRUE(providers.Validate(s->provider).ok());

  auto defaults = Read("name: j\n");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->policy.name, "greedy");
  EXPECT_EQ(defaults->provider.name, "local");
}

TEST(RunSpec, BadPolicyParametersNameTheirLine) {
  auto s = Read("name: j\npolicy: {name: hazard-up, min_runs: 0}\nprovider: {name: ec9}\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();  // the file is well formed
  policy::PolicyRegistry policies;
  policy::RegisterBuiltinPolicies(policies);
  Status bad = policies.Validate(s->policy);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("job.yaml:2:37: policy.min_runs: must be >= 1 (got 0)"),
            std::string::npos)
      << bad.ToString();
  cloud::ProviderRegistry providers;
  cloud::RegisterBuiltinProviders(providers);
  Status unknown = providers.Validate(s->provider);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("unknown provider 'ec9' (known: ec2, local, slurm)"),
            std::string::npos);
  auto nameless = Read("name: j\npolicy: {min_runs: 3}\n");
  EXPECT_FALSE(nameless.ok());
}

// market.capacity_scale is parsed once, with its bounds, into an int (0 =
// auto): 99999999999 passed a check on a long and then aborted in std::stoi.
TEST(RunSpec, CapacityScaleIsAutoOrABoundedInteger) {
  auto scale = [](const std::string& v) {
    return Read("name: j\nmarket:\n  capacity_scale: " + v);
  };
  ASSERT_TRUE(Read("name: j\n").ok());
  EXPECT_EQ(Read("name: j\n")->market.capacity_scale, 0);
  EXPECT_EQ(scale("auto")->market.capacity_scale, 0);
  EXPECT_EQ(scale("4")->market.capacity_scale, 4);
  EXPECT_EQ(scale("1000")->market.capacity_scale, 1000);
  const struct {
    std::string value, message;
  } bad[] = {
      {"99999999999", "job.yaml:3:19: market.capacity_scale: must be <= 1000 (got 1e+11)"},
      {"0", "market.capacity_scale: must be >= 1 (got 0)"},
      {"-3", "market.capacity_scale: must be >= 1 (got -3)"},
      {"lots", "market.capacity_scale: must be auto or an integer in [1, 1000] (got 'lots')"},
      {"2.5", "market.capacity_scale: expected an integer (got '2.5')"},
      {"\"4\"", "market.capacity_scale: expected an integer, got the string \"4\""},
      {"08", "market.capacity_scale: '08' has a leading zero"},
  };
  for (const auto& b : bad) {
    auto s = scale(b.value);
    ASSERT_FALSE(s.ok()) << b.value;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(b.message), std::string::npos) << s.status().message();
  }
}

// controller.advertise_host: where instances reach the rendezvous; a host
// name or an address, never a URL or a host:port.
TEST(RunSpec, AdvertiseHostIsAHostNotAUrl) {
  EXPECT_EQ(Read("name: j\n")->controller.advertise_host, "127.0.0.1");
  auto host = [](const std::string& v) {
    return Read("name: j\ncontroller:\n  advertise_host: " + v + "\n");
  };
  EXPECT_EQ(host("10.231.0.1")->controller.advertise_host, "10.231.0.1");
  EXPECT_EQ(host("head-node.cluster")->controller.advertise_host, "head-node.cluster");
  for (const std::string bad : {"tcp://10.0.0.1", "10.0.0.1:29400", "\"\"", "\"a b\""}) {
    auto s = host(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("job.yaml:3:19: controller.advertise_host: expected a "
                                        "host name or an IPv4 address"),
              std::string::npos)
        << s.status().ToString();
  }
}

}  // namespace
}  // namespace spot::control
