#include "core/number_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace spot {
namespace {

TEST(NumberTextTest, Integers) {
  const struct {
    const char* text;
    int64_t value;
  } good[] = {{"0", 0},
              {"7", 7},
              {"-7", -7},
              {"+7", 7},
              {"-0", 0},
              {"9223372036854775807", INT64_MAX},
              {"-9223372036854775808", INT64_MIN}};
  for (const auto& g : good) {
    Result<int64_t> r = ParseInteger(g.text);
    ASSERT_TRUE(r.ok()) << g.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, g.value) << g.text;
  }
  const struct {
    const char* text;
    const char* why;
  } bad[] = {{"", "expected an integer (got '')"},
             {"1.5", "expected an integer (got '1.5')"},
             {"1e3", "expected an integer (got '1e3')"},
             {"0x10", "expected an integer (got '0x10')"},
             {"+-1", "expected an integer (got '+-1')"},
             {" 1", "expected an integer (got ' 1')"},
             {"1 ", "expected an integer (got '1 ')"},
             {"ten", "expected an integer (got 'ten')"},
             {"010", "'010' has a leading zero, which is ambiguous"},
             {"-00", "'-00' has a leading zero"},
             {"9223372036854775808", "out of range for a 64-bit integer"},
             {"99999999999999999999999", "out of range for a 64-bit integer"}};
  for (const auto& b : bad) {
    Result<int64_t> r = ParseInteger(b.text);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.why), std::string::npos) << r.status().message();
  }
}

TEST(NumberTextTest, Numbers) {
  const struct {
    const char* text;
    double value;
  } good[] = {{"0", 0},       {"0.5", 0.5}, {".5", 0.5},      {"5.", 5},
              {"-2.5", -2.5}, {"+2", 2},    {"1e-3", 1e-3},   {"1E+3", 1e3},
              {"10", 10},     {"0e5", 0},   {"1e308", 1e308}, {"0.000", 0}};
  for (const auto& g : good) {
    Result<double> r = ParseNumber(g.text);
    ASSERT_TRUE(r.ok()) << g.text << ": " << r.status().ToString();
    EXPECT_DOUBLE_EQ(*r, g.value) << g.text;
  }
  const struct {
    const char* text;
    const char* why;
  } bad[] = {{"", "expected a number (got '')"},
             {".", "expected a number (got '.')"},
             {"1e", "expected a number (got '1e')"},
             {"0x1p3", "expected a number (got '0x1p3')"},
             {"1,5", "expected a number (got '1,5')"},
             {"--1", "expected a number (got '--1')"},
             {".inf", "must be a finite number (got '.inf')"},
             {"-.Inf", "must be a finite number"},
             {"nan", "must be a finite number"},
             {".NaN", "must be a finite number"},
             {"1e999", "out of range for a number (got '1e999')"},
             {"007.5", "'007.5' has a leading zero"},
             {"010", "'010' has a leading zero"}};
  for (const auto& b : bad) {
    Result<double> r = ParseNumber(b.text);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.why), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace spot
