#include "ckpt/s3_blob_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "aws/aws_xml.h"
#include "core/file_io.h"

namespace spot::ckpt {
namespace {

constexpr uint64_t kMaxParts = 10000;

bool ValidName(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name != "." && name != ".." &&
         !name.starts_with(kTempFilePrefix);
}

class S3BlobWriter final : public BlobWriter {
 public:
  S3BlobWriter(const S3BlobStore* store, std::string name)
      : store_(store), name_(std::move(name)), key_(store->location().Key(name_)) {}

  ~S3BlobWriter() override {
    if (committed_ || upload_id_.empty()) return;
    Status s = Abort();
    if (!s.ok()) {
      spdlog::warn("{}: aborting the uncommitted multipart upload failed: {}", Where(),
                   s.ToString());
    }
  }

  Status Append(std::string_view data) override {
    SPOT_RETURN_IF_ERROR(Usable());
    buf_.append(data);
    const uint64_t part = store_->options().part_size;
    size_t pos = 0;
    // Keep at least one byte back so Commit() always has a last part to send.
    while (buf_.size() - pos > part) {
      Status s = UploadPart(std::string_view(buf_).substr(pos, part));
      if (!s.ok()) return Fail(s);
      pos += part;
    }
    buf_.erase(0, pos);
    return Status::Ok();
  }

  Status Commit() override {
    SPOT_RETURN_IF_ERROR(Usable());
    Status s = upload_id_.empty() ? PutWhole() : Complete();
    if (!s.ok()) return Fail(s);
    committed_ = true;
    buf_.clear();
    buf_.shrink_to_fit();
    return Status::Ok();
  }

 private:
  std::string Where() const { return store_->Describe(name_); }

  Status Usable() const {
    if (committed_) return FailedPreconditionError(Where() + ": writer already committed");
    return failed_;
  }
  Status Fail(Status s) {
    failed_ = s;
    return s;
  }

  Status PutWhole() {
    return store_->client()
        .Send({.method = "PUT", .key = key_, .body = buf_, .what = "PutObject"})
        .status();
  }

  Status UploadPart(std::string_view bytes) {
    if (upload_id_.empty()) {
      SPOT_ASSIGN_OR_RETURN(S3Response r, store_->client().Send({.method = "POST",
                                                                 .key = key_,
                                                                 .query = {{"uploads", ""}},
                                                                 .what = "CreateMultipartUpload"}));
      upload_id_ = aws::XmlText(r.body, "UploadId");
      if (upload_id_.empty()) {
        return UnavailableError(Where() + ": CreateMultipartUpload returned no UploadId");
      }
    }
    if (etags_.size() >= kMaxParts) {
      return InvalidArgumentError(
          fmt::format("{}: more than {} parts of {} bytes: raise the part size", Where(), kMaxParts,
                      store_->options().part_size));
    }
    const int number = static_cast<int>(etags_.size()) + 1;
    SPOT_ASSIGN_OR_RETURN(S3Response r,
                          store_->client().Send({.method = "PUT",
                                                 .key = key_,
                                                 .query = {{"partNumber", std::to_string(number)},
                                                           {"uploadId", upload_id_}},
                                                 .body = bytes,
                                                 .what = fmt::format("UploadPart {}", number)}));
    if (r.etag.empty()) return UnavailableError(Where() + ": UploadPart returned no ETag");
    etags_.push_back(r.etag);
    return Status::Ok();
  }

  Status Complete() {
    if (!buf_.empty()) SPOT_RETURN_IF_ERROR(UploadPart(buf_));
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags_.size(); ++i) {
      xml +=
          fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, etags_[i]);
    }
    xml += "</CompleteMultipartUpload>";
    SPOT_ASSIGN_OR_RETURN(S3Response r, store_->client().Send({.method = "POST",
                                                               .key = key_,
                                                               .query = {{"uploadId", upload_id_}},
                                                               .body = xml,
                                                               .what = "CompleteMultipartUpload"}));
    // S3 may answer 200 and report the failure in the body.
    const std::string code = aws::XmlText(r.body, "Code");
    if (!code.empty()) {
      return UnavailableError(fmt::format("{}: CompleteMultipartUpload: {}: {}", Where(), code,
                                          aws::XmlText(r.body, "Message")));
    }
    return Status::Ok();
  }

  Status Abort() {
    Result<S3Response> r = store_->client().Send({.method = "DELETE",
                                                  .key = key_,
                                                  .query = {{"uploadId", upload_id_}},
                                                  .what = "AbortMultipartUpload"});
    if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
    return Status::Ok();
  }

  const S3BlobStore* store_;
  std::string name_, key_;
  std::string buf_;
  std::string upload_id_;
  std::vector<std::string> etags_;
  bool committed_ = false;
  Status failed_;
};

}  // namespace

S3BlobStore::S3BlobStore(S3Location loc, aws::AwsConfig config, S3StoreOptions options)
    : loc_(std::move(loc)), opt_(options), client_(std::move(config), loc_.bucket, options.retry) {}

Result<std::unique_ptr<S3BlobStore>> S3BlobStore::Open(const std::string& location,
                                                       aws::AwsConfig config,
                                                       S3StoreOptions options) {
  SPOT_ASSIGN_OR_RETURN(S3Location loc, ParseS3Location(location));
  if (options.part_size < 1 || options.part_size > (5ull << 30)) {
    return InvalidArgumentError(
        fmt::format("{}: part size {} is not in [1, 5 GiB]", location, options.part_size));
  }
  if (options.list_page_size < 1 || options.list_page_size > 1000) {
    return InvalidArgumentError(
        fmt::format("{}: list page size {} is not in [1, 1000]", location, options.list_page_size));
  }
  if (options.retry.max_attempts < 1) {
    return InvalidArgumentError(location + ": max_attempts must be >= 1");
  }
  std::unique_ptr<S3BlobStore> s(new S3BlobStore(std::move(loc), std::move(config), options));
  if (options.abort_pending_uploads) {
    SPOT_ASSIGN_OR_RETURN(int n, s->AbortPendingUploads());
    if (n > 0) spdlog::info("{}: aborted {} upload(s) an interrupted writer left", location, n);
  }
  return s;
}

std::string S3BlobStore::Describe(std::string_view name) const { return loc_.Url(name); }

Result<std::unique_ptr<BlobWriter>> S3BlobStore::Create(const std::string& name) {
  if (!ValidName(name)) return InvalidArgumentError("invalid blob name '" + name + "'");
  return std::unique_ptr<BlobWriter>(new S3BlobWriter(this, name));
}

Status S3BlobStore::ReadInto(const std::string& name, uint64_t offset, std::span<char> dst) const {
  if (dst.empty()) {
    SPOT_ASSIGN_OR_RETURN(uint64_t size, Size(name));
    if (offset > size) {
      return DataLossError(
          fmt::format("{}: offset {} is past its end ({} bytes)", Describe(name), offset, size));
    }
    return Status::Ok();
  }
  Result<S3Response> r =
      client_.Send({.method = "GET",
                    .key = loc_.Key(name),
                    .range = fmt::format("bytes={}-{}", offset, offset + dst.size() - 1),
                    .sink = dst,
                    .what = "GetObject"});
  if (!r.ok()) return r.status();
  if (r->status != 206 && !(r->status == 200 && offset == 0)) {
    return UnavailableError(
        fmt::format("{}: GetObject: HTTP {} to a ranged read", Describe(name), r->status));
  }
  if (r->sink_bytes < dst.size()) {
    return DataLossError(fmt::format("{}: read {} of {} bytes at offset {}: the blob is shorter",
                                     Describe(name), r->sink_bytes, dst.size(), offset));
  }
  return Status::Ok();
}

Result<uint64_t> S3BlobStore::Size(const std::string& name) const {
  SPOT_ASSIGN_OR_RETURN(
      S3Response r, client_.Send({.method = "HEAD", .key = loc_.Key(name), .what = "HeadObject"}));
  return r.content_length;
}

Result<std::vector<std::string>> S3BlobStore::List() const {
  std::vector<std::string> names;
  const std::string prefix = ListPrefix();
  std::string token;
  do {
    S3Request req{.method = "GET",
                  .query = {{"list-type", "2"},
                            {"prefix", prefix},
                            {"delimiter", "/"},
                            {"max-keys", std::to_string(opt_.list_page_size)}},
                  .what = "ListObjectsV2"};
    if (!token.empty()) req.query.emplace_back("continuation-token", token);
    SPOT_ASSIGN_OR_RETURN(S3Response r, client_.Send(req));
    for (std::string& key : aws::XmlTexts(r.body, "Contents", "Key")) {
      if (key.starts_with(prefix) && key.size() > prefix.size()) {
        names.push_back(key.substr(prefix.size()));
      }
    }
    token = aws::XmlText(r.body, "IsTruncated") == "true"
                ? aws::XmlText(r.body, "NextContinuationToken")
                : "";
  } while (!token.empty());
  std::sort(names.begin(), names.end());
  return names;
}

Status S3BlobStore::Delete(const std::string& name) {
  Result<S3Response> r =
      client_.Send({.method = "DELETE", .key = loc_.Key(name), .what = "DeleteObject"});
  if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> S3BlobStore::ListUploads() const {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string prefix = ListPrefix();
  std::string key_marker, id_marker;
  while (true) {
    S3Request req{.method = "GET",
                  .query = {{"uploads", ""},
                            {"prefix", prefix},
                            {"delimiter", "/"},
                            {"max-uploads", std::to_string(opt_.list_page_size)}},
                  .what = "ListMultipartUploads"};
    if (!key_marker.empty()) {
      req.query.emplace_back("key-marker", key_marker);
      req.query.emplace_back("upload-id-marker", id_marker);
    }
    SPOT_ASSIGN_OR_RETURN(S3Response r, client_.Send(req));
    std::vector<std::string> keys = aws::XmlTexts(r.body, "Upload", "Key");
    std::vector<std::string> ids = aws::XmlTexts(r.body, "Upload", "UploadId");
    for (size_t i = 0; i < keys.size() && i < ids.size(); ++i) out.emplace_back(keys[i], ids[i]);
    if (aws::XmlText(r.body, "IsTruncated") != "true") break;
    key_marker = aws::XmlText(r.body, "NextKeyMarker");
    id_marker = aws::XmlText(r.body, "NextUploadIdMarker");
    if (key_marker.empty()) break;
  }
  return out;
}

Result<std::vector<std::string>> S3BlobStore::PendingUploads() const {
  SPOT_ASSIGN_OR_RETURN(auto uploads, ListUploads());
  std::vector<std::string> names;
  for (const auto& [key, id] : uploads) names.push_back(key.substr(ListPrefix().size()));
  std::sort(names.begin(), names.end());
  return names;
}

Result<int> S3BlobStore::AbortPendingUploads() {
  SPOT_ASSIGN_OR_RETURN(auto uploads, ListUploads());
  int n = 0;
  for (const auto& [key, id] : uploads) {
    Result<S3Response> r = client_.Send({.method = "DELETE",
                                         .key = key,
                                         .query = {{"uploadId", id}},
                                         .what = "AbortMultipartUpload"});
    if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
    ++n;
  }
  return n;
}

Result<std::unique_ptr<BlobStore>> OpenTierStore(const std::string& location, bool read_only) {
  if (IsS3Location(location)) {
    SPOT_RETURN_IF_ERROR(ParseS3Location(location).status());  // before asking for credentials
    Result<aws::AwsConfig> config = aws::AwsConfigFromEnvironment("S3");
    if (!config.ok()) return config.status().WithContext(location);
    auto s = S3BlobStore::Open(location, std::move(config).value(),
                               S3StoreOptions{.abort_pending_uploads = !read_only});
    if (!s.ok()) return s.status();
    return std::unique_ptr<BlobStore>(std::move(s).value());
  }
  auto d =
      read_only ? DirectoryBlobStore::OpenShared(location) : DirectoryBlobStore::Open(location);
  if (!d.ok()) return d.status();
  return std::unique_ptr<BlobStore>(std::move(d).value());
}

}  // namespace spot::ckpt
