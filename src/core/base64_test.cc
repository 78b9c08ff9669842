#include "core/base64.h"

#include <gtest/gtest.h>

namespace spot {
namespace {

// RFC 4648's test vectors, both ways.
TEST(Base64Test, RfcVectors) {
  const std::pair<const char*, const char*> cases[] = {{"", ""},
                                                       {"f", "Zg=="},
                                                       {"fo", "Zm8="},
                                                       {"foo", "Zm9v"},
                                                       {"foob", "Zm9vYg=="},
                                                       {"fooba", "Zm9vYmE="},
                                                       {"foobar", "Zm9vYmFy"}};
  for (auto [plain, encoded] : cases) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    EXPECT_EQ(Base64Decode(encoded), std::optional<std::string>(plain)) << encoded;
  }
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  EXPECT_EQ(Base64Decode(Base64Encode(bytes)), std::optional<std::string>(bytes));
}

TEST(Base64Test, RejectsMalformedInput) {
  for (const char* bad : {"Zg=", "Zm9", "Zg==Zg==", "Z!==", "====", "Zm9v\n"}) {
    EXPECT_EQ(Base64Decode(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace spot
