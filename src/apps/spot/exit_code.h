// Maps a Status to the CLI's exit code: bad input (InvalidArgument, a
// checkpoint that belongs to another job) is 2, everything else 1.
#pragma once

#include "apps/spot/commands.h"
#include "core/status.h"

namespace spot::cli {

inline int ExitCodeFor(const Status& s) {
  if (s.ok()) return kExitOk;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

}  // namespace spot::cli
