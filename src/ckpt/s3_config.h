// Where an S3 durable tier lives and how to reach it: the `s3://bucket/prefix`
// location, the endpoint, the region and the credentials, found the way AWS
// SDKs find them (environment, then the shared credentials file and profile).
//
//   SPOT_ASSIGN_OR_RETURN(S3Location loc, ParseS3Location("s3://ckpts/job-7"));
//   SPOT_ASSIGN_OR_RETURN(S3Config cfg, S3ConfigFromEnvironment());
//
// Secrets never appear in a message, a log line or ToString-like output.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spot::ckpt {

// True for "s3://..." (the scheme that selects an S3 tier).
bool IsS3Location(std::string_view location);

struct S3Location {
  std::string bucket;
  std::string prefix;  // key prefix without leading or trailing '/', "" = the bucket's root
  // "s3://bucket/prefix/<name>" (or "s3://bucket/<name>").
  std::string Url(std::string_view name = "") const;
  // The object key of blob `name` ("prefix/name").
  std::string Key(std::string_view name) const;
};

// InvalidArgument (naming the location and the reason) unless it is
// s3://BUCKET[/PREFIX] with a valid bucket name (3-63 of a-z 0-9 . -).
Result<S3Location> ParseS3Location(std::string_view location);

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;  // never logged
  std::string session_token;      // "" unless temporary credentials
  std::string source;  // where they came from, for messages ("environment", "<file> [profile]")
};

struct S3Config {
  // "scheme://host[:port]" of an S3-compatible service (path-style requests:
  // <endpoint>/<bucket>/<key>); "" = AWS S3 in `region` (virtual-hosted
  // requests: https://<bucket>.s3.<region>.amazonaws.com/<key>).
  std::string endpoint;
  std::string region = "us-east-1";
  S3Credentials credentials;
};

// Reads a variable of the environment; nullptr when unset. Injected by tests.
using GetEnvFn = std::function<const char*(const char*)>;

// The configuration an AWS SDK would use:
//   endpoint     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS S3;
//   region       AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1;
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
//                else the profile AWS_PROFILE (default "default") of the shared
//                credentials file AWS_SHARED_CREDENTIALS_FILE (default
//                $HOME/.aws/credentials).
// InvalidArgument for a malformed endpoint, half of a key pair, or a
// credentials file that cannot be parsed; FailedPrecondition when no
// credentials are found anywhere (the message says where it looked).
Result<S3Config> S3ConfigFromEnvironment(const GetEnvFn& getenv);
Result<S3Config> S3ConfigFromEnvironment();

// The profile `profile` of an AWS shared credentials file's text (INI:
// "[name]" sections of "key = value" lines, '#' and ';' comments). NotFound
// when the profile or its keys are missing; InvalidArgument (naming `file`
// and the line) for a line that is neither.
Result<S3Credentials> ParseSharedCredentials(std::string_view text, const std::string& file,
                                             const std::string& profile);

}  // namespace spot::ckpt
