#include "aws/aws_config.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "aws/aws_http.h"
#include "aws/aws_xml.h"
#include "core/file_io.h"
#include "core/temp_dir.h"

namespace spot::aws {
namespace {

constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

GetEnvFn Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(AwsConfigTest, EnvironmentCredentialsEndpointAndRegion) {
  auto c = AwsConfigFromEnvironment("S3", Env({{"AWS_ACCESS_KEY_ID", "AKID"},
                                               {"AWS_SECRET_ACCESS_KEY", kSecret},
                                               {"AWS_SESSION_TOKEN", "tok"},
                                               {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"},
                                               {"AWS_DEFAULT_REGION", "eu-west-1"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->credentials.access_key_id, "AKID");
  EXPECT_EQ(c->credentials.secret_access_key, kSecret);
  EXPECT_EQ(c->credentials.session_token, "tok");
  EXPECT_EQ(c->credentials.source, "environment");
  // The S3-specific endpoint and AWS_REGION win.
  auto s = AwsConfigFromEnvironment("S3", Env({{"AWS_ACCESS_KEY_ID", "AKID"},
                                               {"AWS_SECRET_ACCESS_KEY", kSecret},
                                               {"AWS_ENDPOINT_URL", "http://a:1"},
                                               {"AWS_ENDPOINT_URL_S3", "https://b:2"},
                                               {"AWS_REGION", "ap-south-1"},
                                               {"AWS_DEFAULT_REGION", "eu-west-1"}}));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->endpoint, "https://b:2");
  EXPECT_EQ(s->region, "ap-south-1");
  // Defaults: AWS S3 in us-east-1.
  auto d = AwsConfigFromEnvironment(
      "S3", Env({{"AWS_ACCESS_KEY_ID", "AKID"}, {"AWS_SECRET_ACCESS_KEY", kSecret}}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->endpoint, "");
  EXPECT_EQ(d->region, "us-east-1");
}

TEST(AwsConfigTest, BadEnvironmentIsInvalidArgumentWithoutTheSecret) {
  auto half = AwsConfigFromEnvironment("S3", Env({{"AWS_SECRET_ACCESS_KEY", kSecret}}));
  ASSERT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_EQ(half.status().message().find(kSecret), std::string::npos);
  auto region = AwsConfigFromEnvironment("S3", Env({{"AWS_ACCESS_KEY_ID", "A"},
                                                    {"AWS_SECRET_ACCESS_KEY", kSecret},
                                                    {"AWS_REGION", "us-east-1:x"}}));
  ASSERT_EQ(region.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find("AWS_REGION"), std::string::npos);
  for (const char* bad : {"127.0.0.1:9000", "ftp://x", "http://x/path", "http://"}) {
    auto e = AwsConfigFromEnvironment("S3", Env({{"AWS_ACCESS_KEY_ID", "A"},
                                                 {"AWS_SECRET_ACCESS_KEY", kSecret},
                                                 {"AWS_ENDPOINT_URL", bad}}));
    ASSERT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(e.status().message().find("AWS_ENDPOINT_URL"), std::string::npos);
  }
}

TEST(AwsConfigTest, SharedCredentialsFileAndProfile) {
  auto dir = TempDir::Create("spot_aws_config");
  ASSERT_TRUE(dir.ok());
  const std::string file = (dir->path() / "credentials").string();
  ASSERT_TRUE(WriteFileAtomically(
                  file, std::string("# comment\n[default]\naws_access_key_id = DEFAULTKEY\n"
                                    "aws_secret_access_key=defaultsecret\n\n; other\n"
                                    "[ci]\n  AWS_ACCESS_KEY_ID = CIKEY \naws_secret_access_key = "
                                    "cisecret\naws_session_token = citoken\n"))
                  .ok());
  auto def = AwsConfigFromEnvironment("S3", Env({{"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->credentials.access_key_id, "DEFAULTKEY");
  EXPECT_EQ(def->credentials.secret_access_key, "defaultsecret");
  EXPECT_EQ(def->credentials.source, file + " [default]");
  auto ci = AwsConfigFromEnvironment(
      "S3", Env({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_PROFILE", "ci"}}));
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  EXPECT_EQ(ci->credentials.access_key_id, "CIKEY");
  EXPECT_EQ(ci->credentials.session_token, "citoken");
  // HOME's ~/.aws/credentials when no file is named.
  ASSERT_TRUE(CreateDirectories((dir->path() / ".aws").string()).ok());
  ASSERT_TRUE(WriteFileAtomically((dir->path() / ".aws" / "credentials").string(),
                                  "[default]\naws_access_key_id=H\naws_secret_access_key=S\n")
                  .ok());
  auto home = AwsConfigFromEnvironment("S3", Env({{"HOME", dir->path().string()}}));
  ASSERT_TRUE(home.ok()) << home.status().ToString();
  EXPECT_EQ(home->credentials.access_key_id, "H");
  // The environment wins over the file.
  auto env = AwsConfigFromEnvironment("S3", Env({{"AWS_SHARED_CREDENTIALS_FILE", file},
                                                 {"AWS_ACCESS_KEY_ID", "E"},
                                                 {"AWS_SECRET_ACCESS_KEY", "ES"}}));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->credentials.access_key_id, "E");
}

TEST(AwsConfigTest, MissingOrBrokenCredentialsAreClearErrors) {
  auto dir = TempDir::Create("spot_aws_config");
  ASSERT_TRUE(dir.ok());
  const std::string file = (dir->path() / "credentials").string();
  auto none = AwsConfigFromEnvironment("S3", Env({{"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find(file), std::string::npos) << none.status().message();
  ASSERT_TRUE(WriteFileAtomically(
                  file, std::string("[default]\naws_access_key_id=K\naws_secret_access_key=") +
                            kSecret + "\n")
                  .ok());
  auto profile = AwsConfigFromEnvironment(
      "S3", Env({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_PROFILE", "prod"}}));
  ASSERT_EQ(profile.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(profile.status().message().find("[prod]"), std::string::npos);
  EXPECT_EQ(profile.status().message().find(kSecret), std::string::npos);
  auto broken = ParseSharedCredentials(
      std::string("[default]\naws_secret_access_key=") + kSecret + "\nthis line is broken\n",
      "creds", "default");
  ASSERT_EQ(broken.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("creds:3"), std::string::npos)
      << broken.status().message();
  EXPECT_EQ(broken.status().message().find(kSecret), std::string::npos);
  auto half = ParseSharedCredentials("[default]\naws_access_key_id=K\n", "creds", "default");
  EXPECT_EQ(half.status().code(), StatusCode::kNotFound);
}

TEST(AwsConfigTest, ServiceEndpointAndExplicitProfile) {
  auto dir = TempDir::Create("spot_aws_config");
  ASSERT_TRUE(dir.ok());
  const std::string file = (dir->path() / "credentials").string();
  ASSERT_TRUE(WriteFileAtomically(file, std::string("[ci]\naws_access_key_id = CIKEY\n"
                                                    "aws_secret_access_key = cisecret\n"))
                  .ok());
  auto vars = Env({{"AWS_ACCESS_KEY_ID", "ENVKEY"},
                   {"AWS_SECRET_ACCESS_KEY", kSecret},
                   {"AWS_SHARED_CREDENTIALS_FILE", file},
                   {"AWS_ENDPOINT_URL_S3", "http://s3:1"},
                   {"AWS_ENDPOINT_URL_EC2", "http://ec2:2"}});
  // Each service reads its own AWS_ENDPOINT_URL_<SERVICE>.
  auto ec2 = AwsConfigFromEnvironment("EC2", vars);
  ASSERT_TRUE(ec2.ok()) << ec2.status().ToString();
  EXPECT_EQ(ec2->endpoint, "http://ec2:2");
  EXPECT_EQ(ec2->credentials.access_key_id, "ENVKEY");
  // A profile named by the caller wins over the environment's keys.
  auto ci = AwsConfigFromEnvironment("ec2", vars, "ci");
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  EXPECT_EQ(ci->credentials.access_key_id, "CIKEY");
  EXPECT_EQ(ci->credentials.source, file + " [ci]");
  auto missing = AwsConfigFromEnvironment("EC2", vars, "nope");
  ASSERT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("[nope]"), std::string::npos);
}

TEST(AwsHelpersTest, UriEncodingAndXml) {
  EXPECT_EQ(UriEncode("a b/c~d_e-f.g+h=%", false), "a%20b%2Fc~d_e-f.g%2Bh%3D%25");
  EXPECT_EQ(UriEncode("p/ckpt 1", true), "p/ckpt%201");
  const std::string xml =
      R"(<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
      R"(<IsTruncated>true</IsTruncated><Contents><Key>p/a</Key></Contents>)"
      R"(<Contents><Key>p/b &amp; c</Key></Contents><NextContinuationToken>t1</NextContinuationToken>)"
      R"(</ListBucketResult>)";
  EXPECT_EQ(XmlText(xml, "IsTruncated"), "true");
  EXPECT_EQ(XmlText(xml, "NextContinuationToken"), "t1");
  EXPECT_EQ(XmlTexts(xml, "Contents", "Key"), (std::vector<std::string>{"p/a", "p/b & c"}));
  EXPECT_EQ(XmlText(xml, "Missing"), "");
  EXPECT_EQ(XmlText("not xml <", "Code"), "");
  EXPECT_EQ(XmlText("", "Code"), "");
  // Sorted by the encoded names: "%E1%88%B4" < "Param" < "Param-3".
  EXPECT_EQ(
      CanonicalQuery({{"Param-3", "Value3"}, {"Param", "Value2"}, {"\xE1\x88\xB4", "Value1"}}),
      "%E1%88%B4=Value1&Param=Value2&Param-3=Value3");
}

}  // namespace
}  // namespace spot::aws
