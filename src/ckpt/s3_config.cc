#include "ckpt/s3_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/file_io.h"

namespace spot::ckpt {
namespace {

constexpr std::string_view kScheme = "s3://";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  auto ok = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  };
  return std::all_of(b.begin(), b.end(), ok) &&
         std::isalnum(static_cast<unsigned char>(b.front())) &&
         std::isalnum(static_cast<unsigned char>(b.back()));
}

std::string Env(const GetEnvFn& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "" : std::string(v);
}

Result<std::string> EndpointFrom(const GetEnvFn& getenv) {
  for (const char* var : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
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

Result<S3Credentials> CredentialsFrom(const GetEnvFn& getenv) {
  std::string id = Env(getenv, "AWS_ACCESS_KEY_ID"), secret = Env(getenv, "AWS_SECRET_ACCESS_KEY");
  if (!id.empty() || !secret.empty()) {
    if (id.empty() || secret.empty()) {
      return InvalidArgumentError(
          fmt::format("{} is set but {} is not: set both or neither",
                      id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
                      id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY"));
    }
    return S3Credentials{.access_key_id = id,
                         .secret_access_key = secret,
                         .session_token = Env(getenv, "AWS_SESSION_TOKEN"),
                         .source = "environment"};
  }
  std::string file = Env(getenv, "AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    const std::string home = Env(getenv, "HOME");
    if (!home.empty()) file = home + "/.aws/credentials";
  }
  std::string profile = Env(getenv, "AWS_PROFILE");
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
  Result<S3Credentials> c = ParseSharedCredentials(*text, file, profile);
  if (!c.ok() && c.status().code() == StatusCode::kNotFound) {
    return FailedPreconditionError("no AWS credentials: " + c.status().message());
  }
  return c;
}

}  // namespace

bool IsS3Location(std::string_view location) { return location.starts_with(kScheme); }

std::string S3Location::Key(std::string_view name) const {
  return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
}

std::string S3Location::Url(std::string_view name) const {
  std::string url = std::string(kScheme) + bucket;
  if (!prefix.empty()) url += "/" + prefix;
  if (!name.empty()) url += "/" + std::string(name);
  return url;
}

Result<S3Location> ParseS3Location(std::string_view location) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("'{}' is not an S3 location: {}", location, why));
  };
  if (!IsS3Location(location)) return bad("want s3://bucket/prefix");
  std::string_view rest = location.substr(kScheme.size());
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (!ValidBucket(loc.bucket)) {
    return bad("the bucket name must be 3-63 characters of a-z, 0-9, '.' and '-'");
  }
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  if (prefix.starts_with('/') || prefix.find("//") != std::string_view::npos) {
    return bad("empty path segment in the prefix");
  }
  loc.prefix = std::string(prefix);
  return loc;
}

Result<S3Credentials> ParseSharedCredentials(std::string_view text, const std::string& file,
                                             const std::string& profile) {
  S3Credentials c{.source = fmt::format("{} [{}]", file, profile)};
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

Result<S3Config> S3ConfigFromEnvironment(const GetEnvFn& getenv) {
  S3Config cfg;
  SPOT_ASSIGN_OR_RETURN(cfg.endpoint, EndpointFrom(getenv));
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
  SPOT_ASSIGN_OR_RETURN(cfg.credentials, CredentialsFrom(getenv));
  return cfg;
}

Result<S3Config> S3ConfigFromEnvironment() {
  return S3ConfigFromEnvironment([](const char* n) { return std::getenv(n); });
}

}  // namespace spot::ckpt
