// Registry and configuration fields: parameters read with their bounds and
// places, unknown names and parameters reported, help and docs from the same
// declarations.
#include "core/registry.h"

#include <gtest/gtest.h>

namespace spot {
namespace {

struct Widget {
  virtual ~Widget() = default;
  virtual std::string Describe() const = 0;
};

struct GearOptions {
  double ratio = 2.5;
  int64_t teeth = 12;
  bool oiled = false;
  std::string metal = "steel";
};

void DeclareFields(GearOptions& o, FieldVisitor& v) {
  v.Double("ratio", &o.ratio, {.min = 0, .min_exclusive = true}, "output turns per input turn");
  v.Int("teeth", &o.teeth, {.min = 3, .max = 200}, "teeth on the wheel");
  v.Bool("oiled", &o.oiled, "runs in oil");
  v.Enum("metal", &o.metal, {"steel", "brass"}, "what it is made of");
}

struct Gear final : Widget {
  explicit Gear(const GearOptions& o) : o(o) {}
  std::string Describe() const override {
    return FormatNumber(o.ratio) + "/" + std::to_string(o.teeth) + "/" + (o.oiled ? "oil" : "dry") +
           "/" + o.metal;
  }
  GearOptions o;
};

struct Plain final : Widget {
  std::string Describe() const override { return "plain"; }
};

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() {
    EXPECT_TRUE(
        r_.RegisterWithOptions<GearOptions>("gear", "a toothed wheel", [](const GearOptions& o) {
            return std::make_unique<Gear>(o);
          }).ok());
    EXPECT_TRUE(
        r_.Register("plain", "no parameters", [] { return std::make_unique<Plain>(); }).ok());
  }
  static ComponentConfig Config(std::map<std::string, std::string> params) {
    ComponentConfig c{.name = "gear", .params = std::move(params), .field = "widget"};
    for (const auto& [k, v] : c.params) c.where[k] = "job.yaml:3:" + std::to_string(k.size());
    return c;
  }
  Registry<Widget> r_{"widget"};
};

TEST_F(RegistryTest, DefaultsAndParameters) {
  EXPECT_EQ((*r_.Create("gear"))->Describe(), "2.5/12/dry/steel");
  auto g = r_.Create(
      Config({{"ratio", "0.75"}, {"teeth", "40"}, {"oiled", "true"}, {"metal", "brass"}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->Describe(), "0.75/40/oil/brass");
  EXPECT_EQ((*r_.Create("plain"))->Describe(), "plain");
  EXPECT_EQ(r_.Names(), (std::vector<std::string>{"gear", "plain"}));
  EXPECT_EQ(r_.Help("gear"), "a toothed wheel");
}

TEST_F(RegistryTest, EveryBadParameterIsReportedWithItsPlace) {
  auto bad = r_.Create(Config(
      {{"ratio", "0"}, {"teeth", "010"}, {"oiled", "yes"}, {"metal", "tin"}, {"ration", "3"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  const std::string m(bad.status().message());
  EXPECT_NE(m.find("job.yaml:3:5: widget.ratio: must be > 0 (got 0)"), std::string::npos) << m;
  EXPECT_NE(m.find("widget.teeth: '010' has a leading zero"), std::string::npos) << m;
  EXPECT_NE(m.find("widget.oiled: expected true or false (got 'yes')"), std::string::npos) << m;
  EXPECT_NE(m.find("widget.metal: unknown value 'tin' (expected one of: steel, brass)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("widget.ration: unknown parameter of 'gear' (did you mean 'ratio'?)"),
            std::string::npos)
      << m;
  EXPECT_EQ(r_.Validate(Config({{"teeth", "201"}})).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r_.Validate(Config({{"teeth", "200"}})).ok());
  ComponentConfig plain{.name = "plain", .params = {{"x", "1"}}, .field = "widget"};
  EXPECT_NE(r_.Validate(plain).message().find("it takes none"), std::string::npos);
}

TEST_F(RegistryTest, UnknownAndDuplicateNames) {
  auto none = r_.Create("cog");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "unknown widget 'cog' (known: gear, plain)");
  EXPECT_FALSE(r_.Register("gear", "", [] { return std::make_unique<Plain>(); }).ok());
  EXPECT_FALSE(r_.Register("", "", [] { return std::make_unique<Plain>(); }).ok());
}

TEST_F(RegistryTest, FieldsForHelpAndDocs) {
  std::vector<FieldInfo> f = r_.Fields("gear");
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].name, "ratio");
  EXPECT_EQ(f[0].type, "number");
  EXPECT_EQ(f[0].default_value, "2.5");
  EXPECT_EQ(f[0].bounds, "> 0");
  EXPECT_EQ(f[1].bounds, "[3, 200]");
  EXPECT_EQ(f[3].type, "one of steel / brass");
  EXPECT_TRUE(r_.Fields("plain").empty());
  const std::string md = FieldsMarkdown(f);
  EXPECT_NE(md.find("| `teeth` | integer | 12 | [3, 200] | teeth on the wheel |"),
            std::string::npos)
      << md;
}

TEST(ReadComponent, NameOrMappingFromAJobFile) {
  auto reader = SpecReader::FromString(
      "a: up\nb: {name: gear, ratio: 3, teeth: 20}\nc: {ratio: 3}\nd: [1, 2]\n", "job.yaml");
  ASSERT_TRUE(reader.ok());
  ComponentConfig a, b, c, d, e{.name = "default"};
  ReadComponent(*reader, "a", &a);
  ReadComponent(*reader, "b", &b);
  ReadComponent(*reader, "c", &c);
  ReadComponent(*reader, "d", &d);
  ReadComponent(*reader, "e", &e);
  EXPECT_EQ(a.name, "up");
  EXPECT_TRUE(a.params.empty());
  EXPECT_EQ(b.name, "gear");
  EXPECT_EQ(b.params.at("ratio"), "3");
  EXPECT_EQ(b.where.at("teeth"), "job.yaml:2:34");
  EXPECT_EQ(b.field, "b");
  EXPECT_EQ(e.name, "default");  // absent: unchanged
  Status s = reader->Finish();
  EXPECT_NE(s.message().find("c.name: required field is missing"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("job.yaml:4:4: d: expected a string"), std::string::npos)
      << s.ToString();
}

struct HostOptions {
  std::string image;
  std::vector<std::string> groups;
  std::string user = "root";
};

void DeclareFields(HostOptions& o, FieldVisitor& v) {
  v.String("image", &o.image, "the image to boot (required)");
  v.StringList("groups", &o.groups, "security groups");
  v.String("user", &o.user, "who logs in");
}

struct Host final : Widget {
  explicit Host(const HostOptions& o) : o(o) {}
  std::string Describe() const override {
    std::string g;
    for (const std::string& x : o.groups) g += "<" + x + ">";
    return o.image + "/" + g + "/" + o.user;
  }
  HostOptions o;
};

// Free strings and lists of strings (a YAML sequence or "a,b"), and a
// factory that refuses what the fields alone cannot (a required string).
TEST(RegistryStrings, StringsListsAndAFactoryThatCanFail) {
  Registry<Widget> r{"widget"};
  ASSERT_TRUE(r.RegisterWithOptionsOrError<HostOptions>(
                   "host", "a machine",
                   [](const HostOptions& o) -> Result<std::unique_ptr<Widget>> {
                     if (o.image.empty()) return InvalidArgumentError("image: required");
                     return std::unique_ptr<Widget>(std::make_unique<Host>(o));
                   })
                  .ok());
  auto reader = SpecReader::FromString(
      "a: {name: host, image: ami-0042, groups: [sg-1, \"sg 2\"], user: \"007\"}\n"
      "b: {name: host, image: 123, groups: \"sg-1, sg-3\"}\n"
      "c: host\n"
      "d: {name: host, image: [x], groups: \"sg-1,,sg-2\"}\n",
      "job.yaml");
  ASSERT_TRUE(reader.ok());
  ComponentConfig a, b, c, d;
  ReadComponent(*reader, "a", &a);
  ReadComponent(*reader, "b", &b);
  ReadComponent(*reader, "c", &c);
  ReadComponent(*reader, "d", &d);
  ASSERT_TRUE(reader->Finish().ok()) << reader->Finish().ToString();
  auto ha = r.Create(a);
  ASSERT_TRUE(ha.ok()) << ha.status().ToString();
  EXPECT_EQ((*ha)->Describe(), "ami-0042/<sg-1><sg 2>/007");
  auto hb = r.Create(b);
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ((*hb)->Describe(), "123/<sg-1><sg-3>/root");
  auto hc = r.Create(c);
  EXPECT_EQ(hc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(hc.status().message(), "image: required");
  EXPECT_TRUE(r.Validate(c).ok());  // the fields are fine; only the factory refuses
  auto hd = r.Create(d);
  ASSERT_FALSE(hd.ok());
  const std::string m(hd.status().message());
  EXPECT_NE(m.find("job.yaml:4:24: d.image: expected a single value, got a list"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("d.groups: an empty item in the list"), std::string::npos) << m;
  std::vector<FieldInfo> f = r.Fields("host");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].type, "string");
  EXPECT_EQ(f[0].default_value, "\"\"");
  EXPECT_EQ(f[1].type, "list of strings");
  EXPECT_EQ(f[1].default_value, "[]");
  EXPECT_EQ(f[2].default_value, "root");
}

}  // namespace
}  // namespace spot
