#include "core/config_fields.h"

#include <gtest/gtest.h>

#include <string>

namespace spot {
namespace {

struct Gear {
  int64_t teeth = 12;
  double ratio = 2.5;
};

void DeclareFields(Gear& g, FieldVisitor& v) {
  v.Int("teeth", &g.teeth, {.min = 3, .max = 200}, "teeth");
  v.Double("ratio", &g.ratio, {.min = 0, .min_exclusive = true}, "ratio");
}

Status ReadGear(const std::string& yaml, Gear* g) {
  auto r = SpecReader::FromString(yaml, "job.yaml");
  if (!r.ok()) return r.status();
  ComponentConfig c{.field = "gear"};
  ReadComponent(*r, "gear", &c);
  SPOT_RETURN_IF_ERROR(r->Finish());
  return ReadParams(c, [g](FieldVisitor& v) { DeclareFields(*g, v); });
}

// A parameter is read by the job file's rule: a quoted number is a string,
// a leading zero is ambiguous.
TEST(ConfigFieldsTest, ParametersAreStrictNumbers) {
  Gear g;
  ASSERT_TRUE(ReadGear("gear: {name: g, teeth: 40, ratio: 0.75}\n", &g).ok());
  EXPECT_EQ(g.teeth, 40);
  EXPECT_DOUBLE_EQ(g.ratio, 0.75);
  const struct {
    std::string yaml, expected;
  } cases[] = {
      {"gear: {name: g, teeth: \"40\"}\n",
       "job.yaml:1:24: gear.teeth: expected an integer, got the string \"40\" (write numbers "
       "without quotes)"},
      {"gear: {name: g, ratio: '0.5'}\n", "gear.ratio: expected a number, got the string \"0.5\""},
      {"gear: {name: g, teeth: 010}\n", "gear.teeth: '010' has a leading zero"},
      {"gear: {name: g, ratio: 0x1p3}\n", "gear.ratio: expected a number (got '0x1p3')"},
      {"gear: {name: g, teeth: 99999999999999999999}\n", "gear.teeth: is out of range"},
  };
  for (const auto& c : cases) {
    Gear bad;
    Status st = ReadGear(c.yaml, &bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace spot
