// How to reach an AWS service: the endpoint, the region and the credentials,
// found the way AWS SDKs find them (environment, then the shared credentials
// file and profile). Shared by the S3 durable tier (ckpt/) and the EC2
// provider (cloud/).
//
//   SPOT_ASSIGN_OR_RETURN(AwsConfig cfg, AwsConfigFromEnvironment("S3"));
//
// Secrets never appear in a message, a log line or ToString-like output.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spot::aws {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;  // never logged
  std::string session_token;      // "" unless temporary credentials
  std::string source;  // where they came from, for messages ("environment", "<file> [profile]")
};

struct AwsConfig {
  // "scheme://host[:port]" of the service (an S3- or EC2-compatible server);
  // "" = AWS itself in `region` (each client knows its service's host).
  std::string endpoint;
  std::string region = "us-east-1";
  AwsCredentials credentials;
};

// Reads a variable of the environment; nullptr when unset. Injected by tests.
using GetEnvFn = std::function<const char*(const char*)>;

// The configuration an AWS SDK would use for `service` ("S3", "EC2"):
//   endpoint     AWS_ENDPOINT_URL_<SERVICE>, else AWS_ENDPOINT_URL, else AWS;
//   region       AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1;
//   credentials  the profile `profile` of the shared credentials file when
//                `profile` is not empty; else AWS_ACCESS_KEY_ID +
//                AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the profile
//                AWS_PROFILE (default "default") of the shared credentials file
//                AWS_SHARED_CREDENTIALS_FILE (default $HOME/.aws/credentials).
// InvalidArgument for a malformed endpoint, half of a key pair, or a
// credentials file that cannot be parsed; FailedPrecondition when no
// credentials are found anywhere (the message says where it looked).
Result<AwsConfig> AwsConfigFromEnvironment(std::string_view service, const GetEnvFn& getenv,
                                           const std::string& profile = "");
Result<AwsConfig> AwsConfigFromEnvironment(std::string_view service,
                                           const std::string& profile = "");

// The profile `profile` of an AWS shared credentials file's text (INI:
// "[name]" sections of "key = value" lines, '#' and ';' comments). NotFound
// when the profile or its keys are missing; InvalidArgument (naming `file`
// and the line) for a line that is neither.
Result<AwsCredentials> ParseSharedCredentials(std::string_view text, const std::string& file,
                                              const std::string& profile);

}  // namespace spot::aws
