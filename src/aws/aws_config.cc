#include "aws/aws_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/file_io.h"

namespace spot::aws {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Env(const GetEnvFn& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "" : std::string(v);
}

Result<std::string> EndpointFrom(std::string_view service, const GetEnvFn& getenv) {
  std::string upper(service);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::string own = "AWS_ENDPOINT_URL_" + upper;
  for (const char* var : {own.c_str(), "AWS_ENDPOINT_URL"}) {
    std::string e = Env(getenv, var);
    if (e.empty()) continue;
    while (e.ends_with('/')) e.pop_back();
    const size_t scheme = e.find("://");
    if (!(e.starts_with("http://") || e.starts_with("https://")) ||
        e.find('/', scheme + 3) != std::string::npos || e.size() == scheme + 3) {
      return InvalidArgumentError(fmt::format(
          "{}: '{}' is not an endpoint: want http(s)://host[:port] with no path", var, e));
    }
    return e;
  }
  return std::string();
}

// An explicit `profile` wins over the environment's keys (as an SDK session
// made with a profile name does).
Result<AwsCredentials> CredentialsFrom(const GetEnvFn& getenv, std::string profile) {
  std::string id = Env(getenv, "AWS_ACCESS_KEY_ID"), secret = Env(getenv, "AWS_SECRET_ACCESS_KEY");
  if (profile.empty() && (!id.empty() || !secret.empty())) {
    if (id.empty() || secret.empty()) {
      return InvalidArgumentError(
          fmt::format("{} is set but {} is not: set both or neither",
                      id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
                      id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY"));
    }
    return AwsCredentials{.access_key_id = id,
                          .secret_access_key = secret,
                          .session_token = Env(getenv, "AWS_SESSION_TOKEN"),
                          .source = "environment"};
  }
  std::string file = Env(getenv, "AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    const std::string home = Env(getenv, "HOME");
    if (!home.empty()) file = home + "/.aws/credentials";
  }
  if (profile.empty()) profile = Env(getenv, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string looked =
      "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are unset and " +
      (file.empty() ? std::string("HOME is unset (no shared credentials file)") : file);
  if (file.empty()) return FailedPreconditionError("no AWS credentials: " + looked);
  Result<std::string> text = ReadFile(file, 1 << 20);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return FailedPreconditionError("no AWS credentials: " + looked + " does not exist");
    }
    return text.status().WithContext("reading AWS credentials");
  }
  Result<AwsCredentials> c = ParseSharedCredentials(*text, file, profile);
  if (!c.ok() && c.status().code() == StatusCode::kNotFound) {
    return FailedPreconditionError("no AWS credentials: " + c.status().message());
  }
  return c;
}

}  // namespace

Result<AwsCredentials> ParseSharedCredentials(std::string_view text, const std::string& file,
                                              const std::string& profile) {
  AwsCredentials c{.source = fmt::format("{} [{}]", file, profile)};
  std::string section;
  int line_no = 0;
  bool found = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? "" : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return InvalidArgumentError(
            fmt::format("{}:{}: unterminated section header", file, line_no));
      }
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      found = found || section == profile;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgumentError(
          fmt::format("{}:{}: expected 'key = value' or '[profile]'", file, line_no));
    }
    if (section != profile) continue;
    std::string key(Trim(line.substr(0, eq)));
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    std::string value(Trim(line.substr(eq + 1)));
    if (key == "aws_access_key_id") c.access_key_id = value;
    if (key == "aws_secret_access_key") c.secret_access_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  if (!found) return NotFoundError(fmt::format("{} has no profile [{}]", file, profile));
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return NotFoundError(fmt::format(
        "{}: profile [{}] lacks aws_access_key_id or aws_secret_access_key", file, profile));
  }
  return c;
}

Result<AwsConfig> AwsConfigFromEnvironment(std::string_view service, const GetEnvFn& getenv,
                                           const std::string& profile) {
  AwsConfig cfg;
  SPOT_ASSIGN_OR_RETURN(cfg.endpoint, EndpointFrom(service, getenv));
  for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    std::string r = Env(getenv, var);
    if (r.empty()) continue;
    const bool ok = std::all_of(r.begin(), r.end(), [](char c) {
      return std::islower(static_cast<unsigned char>(c)) ||
             std::isdigit(static_cast<unsigned char>(c)) || c == '-';
    });
    if (!ok) {
      return InvalidArgumentError(
          fmt::format("{}: '{}' is not a region name (like us-east-1)", var, r));
    }
    cfg.region = r;
    break;
  }
  SPOT_ASSIGN_OR_RETURN(cfg.credentials, CredentialsFrom(getenv, profile));
  return cfg;
}

Result<AwsConfig> AwsConfigFromEnvironment(std::string_view service, const std::string& profile) {
  return AwsConfigFromEnvironment(
      service, [](const char* n) { return std::getenv(n); }, profile);
}

}  // namespace spot::aws
