#include "ckpt/s3_client.h"

#include <fmt/format.h>

#include "aws/aws_xml.h"

namespace spot::ckpt {
namespace {

bool RetryableCode(std::string_view code) {
  return code == "SlowDown" || code == "Throttling" || code == "ThrottlingException" ||
         code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "RequestLimitExceeded";
}

bool Retryable(const S3Response& r) {
  return r.status >= 500 || r.status == 429 || RetryableCode(aws::XmlText(r.body, "Code"));
}

Status MapFailure(const S3Response& r, std::string_view what, const std::string& url) {
  std::string code = aws::XmlText(r.body, "Code"), message = aws::XmlText(r.body, "Message");
  std::string detail = fmt::format("{}: {}: HTTP {}", url, what, r.status);
  if (!code.empty()) detail += " " + code;
  if (!message.empty()) detail += ": " + message;
  if (r.status == 404) return NotFoundError(detail);
  if (r.status == 403) {
    return FailedPreconditionError(detail +
                                   " (access denied: check the AWS credentials and the "
                                   "bucket policy)");
  }
  if (r.status == 416) return DataLossError(detail + " (read past the end)");
  if (Retryable(r)) return UnavailableError(detail);
  return InvalidArgumentError(detail);
}

}  // namespace

S3Client::S3Client(aws::AwsConfig config, std::string bucket, S3RetryOptions retry)
    : config_(std::move(config)),
      bucket_(std::move(bucket)),
      http_(config_.credentials, config_.region, "s3", retry) {}

std::string S3Client::BaseUrl(const std::string& key_text) const {
  const std::string key = aws::UriEncode(key_text, /*keep_slash=*/true);
  if (!config_.endpoint.empty()) {
    return config_.endpoint + "/" + bucket_ + (key.empty() ? "" : "/" + key);
  }
  if (bucket_.find('.') != std::string::npos) {  // dots break the TLS name
    return fmt::format("https://s3.{}.amazonaws.com/{}/{}", config_.region, bucket_, key);
  }
  return fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket_, config_.region, key);
}

Result<S3Response> S3Client::Send(const S3Request& r) const {
  aws::HttpRequest req{.method = r.method,
                       .url = BaseUrl(r.key),
                       .query = r.query,
                       .body = r.body,
                       .payload_hash_header = true,
                       .sink = r.sink,
                       .what = r.what};
  if (!r.range.empty()) req.headers.push_back("Range: " + r.range);
  if (r.method == "PUT" || r.method == "POST") {
    req.headers.push_back("Content-Type: application/octet-stream");
  }
  const std::string where = fmt::format("s3://{}/{}", bucket_, r.key);
  S3Response out;
  Status s = aws::RetryWithBackoff(http_.options(), [&](int) -> aws::AttemptOutcome {
    Result<S3Response> got = http_.SendOnce(req);
    if (!got.ok()) {
      return {got.status(), got.status().code() == StatusCode::kUnavailable};
    }
    if (got->status / 100 == 2) {
      out = std::move(*got);
      return {Status::Ok()};
    }
    return {MapFailure(*got, r.what, where), Retryable(*got)};
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace spot::ckpt
