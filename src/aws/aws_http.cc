#include "aws/aws_http.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

namespace spot::aws {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

// Where the write and header callbacks put what arrives.
struct Sink {
  CURL* curl;
  HttpResponse* response;
  std::span<char> dst;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  long code = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
  if (!s->dst.empty() && code / 100 == 2) {
    const uint64_t at = s->response->sink_bytes;
    if (at < s->dst.size()) {
      std::memcpy(s->dst.data() + at, data, std::min<uint64_t>(bytes, s->dst.size() - at));
    }
    s->response->sink_bytes += bytes;
  } else {
    s->response->body.append(data, bytes);
  }
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) s->response->etag.clear();  // a new response (after 100)
  constexpr std::string_view kEtag = "etag:";
  if (line.size() > kEtag.size() && strncasecmp(line.data(), kEtag.data(), kEtag.size()) == 0) {
    std::string_view v = line.substr(kEtag.size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) {
      v.remove_suffix(1);
    }
    s->response->etag = std::string(v);
  }
  return size * n;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& params) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [k, v] : params) encoded.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [k, v] : encoded) out += (out.empty() ? "" : "&") + k + "=" + v;
  return out;
}

struct HttpClient::Pool {
  std::mutex mu;
  std::vector<CURL*> idle;  // GUARDED_BY(mu)
  ~Pool() {
    for (CURL* c : idle) curl_easy_cleanup(c);
  }
  CURL* Take() {
    std::lock_guard<std::mutex> l(mu);
    if (idle.empty()) return curl_easy_init();
    CURL* c = idle.back();
    idle.pop_back();
    return c;
  }
  void Give(CURL* c) {
    std::lock_guard<std::mutex> l(mu);
    idle.push_back(c);
  }
};

HttpClient::HttpClient(AwsCredentials credentials, std::string region, std::string service,
                       RetryOptions options)
    : credentials_(std::move(credentials)),
      sigv4_("aws:amz:" + region + ":" + service),
      options_(options),
      pool_(std::make_unique<Pool>()) {
  GlobalInit();
}

HttpClient::~HttpClient() = default;

std::string HttpClient::Url(const HttpRequest& r) {
  const std::string query = CanonicalQuery(r.query);
  return query.empty() ? r.url : r.url + "?" + query;
}

Result<HttpResponse> HttpClient::SendOnce(const HttpRequest& r) const {
  CURL* curl = pool_->Take();
  if (curl == nullptr) return InternalError("curl_easy_init failed");
  curl_easy_reset(curl);
  HttpResponse response;
  Sink sink{curl, &response, r.sink};
  char errbuf[CURL_ERROR_SIZE] = {0};
  const std::string url = Url(r);
  curl_slist* headers = nullptr;
  auto add = [&](const std::string& h) { headers = curl_slist_append(headers, h.c_str()); };
  if (r.payload_hash_header) add("x-amz-content-sha256: " + Sha256Hex(r.body));
  if (!credentials_.session_token.empty()) {
    add("x-amz-security-token: " + credentials_.session_token);
  }
  for (const std::string& h : r.headers) add(h);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4_.c_str());
  curl_easy_setopt(curl, CURLOPT_USERNAME, credentials_.access_key_id.c_str());
  curl_easy_setopt(curl, CURLOPT_PASSWORD, credentials_.secret_access_key.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_s);
  if (options_.stall_timeout_s > 0) {
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options_.stall_timeout_s);
  }
  if (options_.total_timeout_s > 0)
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, options_.total_timeout_s);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &sink);
  if (r.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (r.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    if (r.method == "PUT" || r.method == "POST") {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, r.body.empty() ? "" : r.body.data());
    }
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(curl);
  curl_off_t length = -1;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  curl_slist_free_all(headers);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  pool_->Give(curl);
  if (rc != CURLE_OK) {
    const std::string what = r.what.empty() ? "" : r.what + ": ";
    const std::string error =
        fmt::format("{}: {}{}", url, what, errbuf[0] != 0 ? errbuf : curl_easy_strerror(rc));
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
      return InvalidArgumentError(error);
    }
    return UnavailableError(error);
  }
  response.content_length = length < 0 ? 0 : static_cast<uint64_t>(length);
  return response;
}

Status RetryWithBackoff(const RetryOptions& o,
                        const std::function<AttemptOutcome(int attempt)>& attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const int attempts = std::max(1, o.max_attempts);
  Status last;
  for (int n = 1; n <= attempts; ++n) {
    AttemptOutcome got = attempt(n);
    if (got.status.ok() || !got.retry) return got.status;
    last = std::move(got.status);
    if (n == attempts) break;
    const double cap = std::min(o.max_backoff_s, o.initial_backoff_s * std::pow(2.0, n - 1));
    const double wait = std::uniform_real_distribution<double>(0, cap)(rng);
    spdlog::warn("{} (attempt {} of {}); retrying in {:.2f} s", last.message(), n, attempts, wait);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  return UnavailableError(fmt::format("{} (gave up after {} attempts)", last.message(), attempts));
}

}  // namespace spot::aws
