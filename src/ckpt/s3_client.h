// One S3 request over HTTP(S) with libcurl, signed with AWS Signature Version
// 4 by libcurl itself (CURLOPT_AWS_SIGV4; the payload's SHA-256 from OpenSSL),
// retried with exponential backoff and full jitter on connection errors,
// 5xx and throttling, and its failures mapped to Status codes:
//   404                                  NotFound
//   403 (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, ...)
//                                        FailedPrecondition (fix the credentials or policy)
//   416 (a range past the end)           DataLoss
//   5xx, 429, SlowDown, RequestTimeout, connection errors, after the retries
//                                        Unavailable
//   other 4xx                            InvalidArgument with S3's code and message
// Every message names the object (s3://bucket/key) and the operation, never a
// secret. Thread-safe: requests share a pool of curl handles (and so their
// open connections).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/s3_config.h"
#include "core/status.h"

namespace spot::ckpt {

struct S3RetryOptions {
  int max_attempts = 6;            // >= 1; tries per request, the first included
  double initial_backoff_s = 0.2;  // the first retry waits up to this (full jitter)
  double max_backoff_s = 10;       // cap of the doubling wait
  long connect_timeout_s = 10;     // per attempt
  long stall_timeout_s = 60;       // an attempt moving under 1 byte/s this long fails
};

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

struct S3Response {
  long status = 0;
  std::string body;  // error bodies and bodies without a sink
  std::string etag;  // the ETag header
  uint64_t content_length = 0;
  uint64_t sink_bytes = 0;
};

class S3Client {
 public:
  S3Client(S3Config config, std::string bucket, S3RetryOptions retry);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // A 2xx response, or the mapped failure (see above) once retries are spent.
  Result<S3Response> Send(const S3Request& request) const;

  const std::string& bucket() const { return bucket_; }

 private:
  struct Pool;
  Result<S3Response> SendOnce(const S3Request& r, std::string* transport_error) const;
  std::string Url(const S3Request& r) const;

  S3Config config_;
  std::string bucket_;
  S3RetryOptions retry_;
  std::unique_ptr<Pool> pool_;
};

// The text of the first element named `name` (any namespace) below the root
// of XML `doc`, searching depth-first; "" when absent or unparsable.
std::string XmlText(std::string_view doc, std::string_view name);
// The texts of every `leaf` inside each element named `parent`, in document
// order (e.g. ("Contents", "Key") of a ListObjectsV2 result).
std::vector<std::string> XmlTexts(std::string_view doc, std::string_view parent,
                                  std::string_view leaf);

// AWS's URI encoding (RFC 3986 unreserved characters kept, every other byte
// %XX); '/' kept when `keep_slash`.
std::string UriEncode(std::string_view s, bool keep_slash);

}  // namespace spot::ckpt
