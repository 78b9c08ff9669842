#include "core/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace spot {
namespace {

TEST(ProgressTest, FormatsDurations) {
  EXPECT_EQ(Progress::FormatDuration(12.4), "12s");
  EXPECT_EQ(Progress::FormatDuration(245), "4m05s");
  EXPECT_EQ(Progress::FormatDuration(3720), "1h02m");
  EXPECT_EQ(Progress::FormatDuration(-1), "?");
}

TEST(ProgressTest, PlainModeWritesLinesAtTheInterval) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = ::open_memstream(&buf, &len);
  {
    Progress p({.label = "train", .total = 100, .log_interval_s = 0}, out);
    EXPECT_FALSE(p.terminal());
    p.Update(50, "loss 0.5");
    p.Finish("done");
  }
  std::fclose(out);
  std::string text(buf, len);
  std::free(buf);
  EXPECT_NE(text.find("train 50/100 (50%) loss 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("done"), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);  // no bar escapes in plain mode
}

}  // namespace
}  // namespace spot
