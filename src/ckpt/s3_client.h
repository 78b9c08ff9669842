// One S3 request: the S3 URL of a bucket and key (path-style on a given
// endpoint, virtual-hosted on AWS), sent and signed for service "s3" through
// aws/aws_http.h (libcurl's SigV4, the payload's SHA-256 in
// x-amz-content-sha256), retried with backoff and full jitter on connection
// errors, 5xx and throttling, and its failures mapped to Status codes:
//   404                                  NotFound
//   403 (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, ...)
//                                        FailedPrecondition (fix the credentials or policy)
//   416 (a range past the end)           DataLoss
//   5xx, 429, SlowDown, RequestTimeout, connection errors, after the retries
//                                        Unavailable
//   other 4xx                            InvalidArgument with S3's code and message
// Every message names the object (s3://bucket/key) and the operation, never a
// secret. Thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aws/aws_config.h"
#include "aws/aws_http.h"
#include "core/status.h"

namespace spot::ckpt {

// Retries and timeouts of S3 requests (the defaults: 6 tries, backoff from
// 0.2 s capped at 10 s, 10 s to connect, 60 s stalled).
using S3RetryOptions = aws::RetryOptions;

struct S3Request {
  std::string method = "GET";                              // GET, HEAD, PUT, POST, DELETE
  std::string key;                                         // object key; "" = the bucket
  std::vector<std::pair<std::string, std::string>> query;  // any order
  std::string_view body;                                   // PUT/POST payload
  std::string range;                                       // "bytes=a-b" or ""
  // GET: a successful response's body goes here (at most its size); the
  // number of bytes received is S3Response::sink_bytes. Empty: into `body`.
  std::span<char> sink;
  std::string what;  // the operation, for messages ("PUT", "UploadPart 3")
};

using S3Response = aws::HttpResponse;

class S3Client {
 public:
  S3Client(aws::AwsConfig config, std::string bucket, S3RetryOptions retry);
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // A 2xx response, or the mapped failure (see above) once retries are spent.
  Result<S3Response> Send(const S3Request& request) const;

  const std::string& bucket() const { return bucket_; }

 private:
  std::string BaseUrl(const std::string& key) const;

  aws::AwsConfig config_;
  std::string bucket_;
  aws::HttpClient http_;
};

}  // namespace spot::ckpt
