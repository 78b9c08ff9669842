// S3BlobStore: a BlobStore in an S3 bucket under a key prefix
// (`s3://bucket/prefix`), the durable tier of a checkpoint store on AWS or any
// S3-compatible service. Blob `name` is the object `prefix/name`.
//
//   SPOT_ASSIGN_OR_RETURN(aws::AwsConfig cfg, aws::AwsConfigFromEnvironment("S3"));
//   SPOT_ASSIGN_OR_RETURN(auto store, S3BlobStore::Open("s3://ckpts/job-7", cfg));
//
// Writers buffer; a blob up to one part is uploaded with a single PUT at
// Commit(), a larger one as a multipart upload (a part each time the buffer
// holds part_size bytes, the rest and CompleteMultipartUpload at Commit()).
// Either way S3 makes the object visible only when the PUT or the Complete
// succeeds, so a reader never sees a torn blob. A writer destroyed without
// Commit() aborts its multipart upload; one whose process died leaves it
// pending (invisible, but billed) until a writer's Open() aborts it, as
// DirectoryBlobStore::Open() removes an interrupted writer's temporary file.
// Reads are ranged GETs, Size a HEAD, List a paginated ListObjectsV2.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/blob_store.h"
#include "ckpt/s3_client.h"
#include "ckpt/s3_location.h"

namespace spot::ckpt {

struct S3StoreOptions {
  // Size of a multipart upload's parts, and the largest blob sent in one PUT.
  // S3 requires >= 5 MiB for every part but the last; at most 10,000 parts.
  uint64_t part_size = 16u << 20;
  // Keys per ListObjectsV2 / ListMultipartUploads page, 1..1000.
  int list_page_size = 1000;
  // Open(): abort the multipart uploads pending under the prefix (an
  // interrupted writer's); false for a reader, which leaves writers alone.
  bool abort_pending_uploads = true;
  S3RetryOptions retry;
};

class S3BlobStore final : public BlobStore {
 public:
  // InvalidArgument for a bad location or options. Does not contact S3
  // unless abort_pending_uploads is set.
  static Result<std::unique_ptr<S3BlobStore>> Open(const std::string& location,
                                                   aws::AwsConfig config,
                                                   S3StoreOptions options = {});

  std::string Describe(std::string_view name) const override;
  Result<std::unique_ptr<BlobWriter>> Create(const std::string& name) override;
  Status ReadInto(const std::string& name, uint64_t offset, std::span<char> dst) const override;
  Result<uint64_t> Size(const std::string& name) const override;
  Result<std::vector<std::string>> List() const override;
  Status Delete(const std::string& name) override;

  // Blob names with a multipart upload in progress (or left by a dead
  // writer), sorted, one entry per upload.
  Result<std::vector<std::string>> PendingUploads() const;
  // Aborts every pending multipart upload under the prefix; returns how many.
  Result<int> AbortPendingUploads();

  const S3Location& location() const { return loc_; }
  const S3StoreOptions& options() const { return opt_; }
  const S3Client& client() const { return client_; }

 private:
  S3BlobStore(S3Location loc, aws::AwsConfig config, S3StoreOptions options);
  // (key, upload id) of the pending uploads directly under the prefix.
  Result<std::vector<std::pair<std::string, std::string>>> ListUploads() const;
  std::string ListPrefix() const { return loc_.prefix.empty() ? "" : loc_.prefix + "/"; }

  S3Location loc_;
  S3StoreOptions opt_;
  S3Client client_;
};

// The store behind a checkpoint tier location: S3BlobStore for "s3://...",
// configured from the environment (aws::AwsConfigFromEnvironment("S3")), otherwise a
// directory (DirectoryBlobStore::Open, or OpenShared for a reader). A reader's
// S3 store leaves pending uploads alone.
Result<std::unique_ptr<BlobStore>> OpenTierStore(const std::string& location, bool read_only);

}  // namespace spot::ckpt
