#include "ckpt/s3_client.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

namespace spot::ckpt {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    xmlInitParser();
  });
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
  S3Response* response;
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

bool RetryableCode(std::string_view code) {
  return code == "SlowDown" || code == "Throttling" || code == "ThrottlingException" ||
         code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "RequestLimitExceeded";
}

bool Retryable(const S3Response& r) {
  return r.status >= 500 || r.status == 429 || RetryableCode(XmlText(r.body, "Code"));
}

Status MapFailure(const S3Response& r, std::string_view what, const std::string& url) {
  std::string code = XmlText(r.body, "Code"), message = XmlText(r.body, "Message");
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

const xmlNode* FindElement(const xmlNode* node, std::string_view name) {
  for (const xmlNode* n = node; n != nullptr; n = n->next) {
    if (n->type != XML_ELEMENT_NODE) continue;
    if (name == reinterpret_cast<const char*>(n->name)) return n;
    if (const xmlNode* found = FindElement(n->children, name)) return found;
  }
  return nullptr;
}

std::string Text(const xmlNode* n) {
  xmlChar* c = xmlNodeGetContent(n);
  std::string s = c == nullptr ? "" : reinterpret_cast<const char*>(c);
  xmlFree(c);
  return s;
}

void CollectTexts(const xmlNode* node, std::string_view parent, std::string_view leaf,
                  std::vector<std::string>* out) {
  for (const xmlNode* n = node; n != nullptr; n = n->next) {
    if (n->type != XML_ELEMENT_NODE) continue;
    if (parent == reinterpret_cast<const char*>(n->name)) {
      for (const xmlNode* c = n->children; c != nullptr; c = c->next) {
        if (c->type == XML_ELEMENT_NODE && leaf == reinterpret_cast<const char*>(c->name)) {
          out->push_back(Text(c));
        }
      }
    } else {
      CollectTexts(n->children, parent, leaf, out);
    }
  }
}

std::unique_ptr<xmlDoc, void (*)(xmlDoc*)> ParseXml(std::string_view doc) {
  GlobalInit();
  xmlDoc* d = doc.empty()
                  ? nullptr
                  : xmlReadMemory(doc.data(), static_cast<int>(doc.size()), "s3.xml", nullptr,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  return {d, [](xmlDoc* p) { xmlFreeDoc(p); }};
}

}  // namespace

std::string XmlText(std::string_view doc, std::string_view name) {
  auto d = ParseXml(doc);
  if (d == nullptr) return "";
  const xmlNode* n = FindElement(xmlDocGetRootElement(d.get()), name);
  return n == nullptr ? "" : Text(n);
}

std::vector<std::string> XmlTexts(std::string_view doc, std::string_view parent,
                                  std::string_view leaf) {
  std::vector<std::string> out;
  auto d = ParseXml(doc);
  if (d != nullptr) CollectTexts(xmlDocGetRootElement(d.get()), parent, leaf, &out);
  return out;
}

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

struct S3Client::Pool {
  std::mutex mu;
  std::vector<CURL*> idle;
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

S3Client::S3Client(S3Config config, std::string bucket, S3RetryOptions retry)
    : config_(std::move(config)),
      bucket_(std::move(bucket)),
      retry_(retry),
      pool_(std::make_unique<Pool>()) {
  GlobalInit();
}

S3Client::~S3Client() = default;

std::string S3Client::Url(const S3Request& r) const {
  std::string url;
  const std::string key = UriEncode(r.key, /*keep_slash=*/true);
  if (!config_.endpoint.empty()) {
    url = config_.endpoint + "/" + bucket_ + (key.empty() ? "" : "/" + key);
  } else if (bucket_.find('.') != std::string::npos) {  // dots break the TLS name
    url = fmt::format("https://s3.{}.amazonaws.com/{}/{}", config_.region, bucket_, key);
  } else {
    url = fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket_, config_.region, key);
  }
  // Sorted and encoded as SigV4's canonical query string, so the signature
  // libcurl computes over the query as written is the canonical one.
  auto query = r.query;
  std::sort(query.begin(), query.end());
  for (size_t i = 0; i < query.size(); ++i) {
    url += (i == 0 ? "?" : "&") + UriEncode(query[i].first, false) + "=" +
           UriEncode(query[i].second, false);
  }
  return url;
}

Result<S3Response> S3Client::SendOnce(const S3Request& r, std::string* transport_error) const {
  CURL* curl = pool_->Take();
  if (curl == nullptr) return InternalError("curl_easy_init failed");
  curl_easy_reset(curl);
  S3Response response;
  Sink sink{curl, &response, r.sink};
  char errbuf[CURL_ERROR_SIZE] = {0};
  const std::string url = Url(r);
  const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  curl_slist* headers = nullptr;
  auto add = [&](const std::string& h) { headers = curl_slist_append(headers, h.c_str()); };
  add("x-amz-content-sha256: " + Sha256Hex(r.body));
  if (!config_.credentials.session_token.empty()) {
    add("x-amz-security-token: " + config_.credentials.session_token);
  }
  if (!r.range.empty()) add("Range: " + r.range);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(curl, CURLOPT_USERNAME, config_.credentials.access_key_id.c_str());
  curl_easy_setopt(curl, CURLOPT_PASSWORD, config_.credentials.secret_access_key.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, retry_.connect_timeout_s);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, retry_.stall_timeout_s);
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
      add("Content-Type: application/octet-stream");
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
    *transport_error =
        fmt::format("{}: {}: {}", url, r.what, errbuf[0] != 0 ? errbuf : curl_easy_strerror(rc));
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
      return InvalidArgumentError(*transport_error);
    }
    return UnavailableError(*transport_error);
  }
  response.content_length = length < 0 ? 0 : static_cast<uint64_t>(length);
  return response;
}

Result<S3Response> S3Client::Send(const S3Request& r) const {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  Status last;
  const std::string where = fmt::format("s3://{}/{}", bucket_, r.key);
  for (int attempt = 1; attempt <= std::max(1, retry_.max_attempts); ++attempt) {
    std::string transport_error;
    Result<S3Response> got = SendOnce(r, &transport_error);
    if (got.ok()) {
      if (got->status / 100 == 2) return got;
      if (!Retryable(*got)) return MapFailure(*got, r.what, where);
      last = MapFailure(*got, r.what, where);
    } else {
      if (got.status().code() != StatusCode::kUnavailable) return got.status();
      last = got.status();
    }
    if (attempt >= retry_.max_attempts) break;
    const double cap =
        std::min(retry_.max_backoff_s, retry_.initial_backoff_s * std::pow(2.0, attempt - 1));
    const double wait = std::uniform_real_distribution<double>(0, cap)(rng);
    spdlog::warn("{} (attempt {} of {}); retrying in {:.2f} s", last.message(), attempt,
                 retry_.max_attempts, wait);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  return UnavailableError(
      fmt::format("{} (gave up after {} attempts)", last.message(), retry_.max_attempts));
}

}  // namespace spot::ckpt
