// One AWS API request over HTTP(S) with libcurl, signed with Signature
// Version 4 by libcurl itself (CURLOPT_AWS_SIGV4: it signs the host, the
// x-amz-date it adds or the X-Amz-Date the caller set, and every header the
// request carries; the payload hash is x-amz-content-sha256 when sent, else
// the body's SHA-256), and the retry loop with exponential backoff and full
// jitter around it. What a failure means is each API's own business: the S3
// client (ckpt/s3_client.h) and the EC2 client (cloud/ec2_provider.h) map
// responses to Status codes and say which to retry.
//
//   HttpClient http(config.credentials, config.region, "ec2", {});
//   Result<HttpResponse> r = http.SendOnce({.method = "POST", .url = ..., .body = form});
//
// Secrets never appear in a message or a log line. Thread-safe: requests
// share a pool of curl handles (and so their open connections).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aws/aws_config.h"
#include "core/status.h"

namespace spot::aws {

struct RetryOptions {
  int max_attempts = 6;            // >= 1; tries per request, the first included
  double initial_backoff_s = 0.2;  // the first retry waits up to this (full jitter)
  double max_backoff_s = 10;       // cap of the doubling wait
  long connect_timeout_s = 10;     // per attempt
  long stall_timeout_s = 60;       // an attempt moving under 1 byte/s this long fails; 0 = never
  long total_timeout_s = 0;        // an attempt taking longer fails; 0 = no limit
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  // scheme://host[:port]/path, the path already URI-encoded (UriEncode), no query.
  std::string url;
  // Sent URI-encoded and sorted by encoded name then value: SigV4's canonical
  // query string, so the signature libcurl computes over the query as written
  // is the canonical one.
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::string> headers;  // "Name: value" lines, sent and signed
  std::string_view body;             // PUT/POST payload
  bool payload_hash_header = false;  // send (and sign) x-amz-content-sha256 (S3)
  // A successful (2xx) response's body goes here (at most its size); the
  // number of bytes received is HttpResponse::sink_bytes. Empty: into `body`.
  std::span<char> sink;
  std::string what;  // the operation, for messages ("PUT", "UploadPart 3")
};

struct HttpResponse {
  long status = 0;
  std::string body;  // error bodies and bodies without a sink
  std::string etag;  // the ETag header
  uint64_t content_length = 0;
  uint64_t sink_bytes = 0;
};

class HttpClient {
 public:
  // Signs for `service` ("s3", "ec2") in `region`; adds x-amz-security-token
  // (signed) when the credentials carry a session token.
  HttpClient(AwsCredentials credentials, std::string region, std::string service,
             RetryOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // One attempt: the response, whatever its HTTP status. A request that got
  // no response is InvalidArgument (a malformed URL or unsupported scheme) or
  // Unavailable (connection refused, reset, timed out), with the message
  // "<url>: <what>: <curl's error>".
  Result<HttpResponse> SendOnce(const HttpRequest& request) const;
  // The URL as sent: `request.url` and the canonical query.
  static std::string Url(const HttpRequest& request);

  const RetryOptions& options() const { return options_; }

 private:
  struct Pool;
  AwsCredentials credentials_;
  std::string sigv4_;  // "aws:amz:<region>:<service>"
  RetryOptions options_;
  std::unique_ptr<Pool> pool_;
};

// What one try of a retried call came to: Ok ends the loop; otherwise
// `retry` says whether another try may help.
struct AttemptOutcome {
  Status status;
  bool retry = false;
};

// Runs `attempt` (given the 1-based try number) until it returns Ok or
// retry = false, at most max(1, max_attempts) times; before each retry waits
// a uniformly random time in [0, min(max_backoff_s, initial_backoff_s *
// 2^(try-1))] (full jitter), logging the failure as a warning. Returns the
// last status; once the tries are spent, Unavailable "<last message> (gave up
// after N attempts)".
Status RetryWithBackoff(const RetryOptions& options,
                        const std::function<AttemptOutcome(int attempt)>& attempt);

// AWS's URI encoding (RFC 3986 unreserved characters kept, every other byte
// %XX); '/' kept when `keep_slash`.
std::string UriEncode(std::string_view s, bool keep_slash);
// "k1=v1&k2=v2": each name and value URI-encoded, sorted by encoded name,
// then encoded value (SigV4's canonical query string).
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& params);

}  // namespace spot::aws
