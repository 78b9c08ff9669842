// Where an S3 durable tier lives: the `s3://bucket/prefix` location. How to
// reach S3 (endpoint, region, credentials) is aws/aws_config.h.
//
//   SPOT_ASSIGN_OR_RETURN(S3Location loc, ParseS3Location("s3://ckpts/job-7"));
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace spot::ckpt {

// True for "s3://..." (the scheme that selects an S3 tier).
bool IsS3Location(std::string_view location);

struct S3Location {
  std::string bucket;
  std::string prefix;  // key prefix without leading or trailing '/', "" = the bucket's root
  // "s3://bucket/prefix/<name>" (or "s3://bucket/<name>").
  std::string Url(std::string_view name = "") const;
  // The object key of blob `name` ("prefix/name").
  std::string Key(std::string_view name) const;
};

// InvalidArgument (naming the location and the reason) unless it is
// s3://BUCKET[/PREFIX] with a valid bucket name (3-63 of a-z 0-9 . -).
Result<S3Location> ParseS3Location(std::string_view location);

}  // namespace spot::ckpt
