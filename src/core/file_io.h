// File helpers with crash-safe commits. A file written with WriteFileAtomically
// is either absent or complete at its final name, never torn: the bytes go to a
// temporary file in the same directory, which is fsynced, renamed over the
// final name, and the directory is fsynced so the rename survives a crash.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spot {

// Reads the whole file. NotFound when it does not exist, Unavailable on I/O errors.
Result<std::string> ReadFile(const std::string& path);

// Writes the concatenation of `pieces` to `path` atomically (see above).
// Leaves no temporary file behind on failure.
Status WriteFileAtomically(const std::string& path, std::span<const std::string_view> pieces);
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// fsyncs a directory so that entries created, renamed or removed in it persist.
Status SyncDirectory(const std::string& dir);

// Creates `dir` and its parents when missing.
Status CreateDirectories(const std::string& dir);

// Prefix of the temporary files WriteFileAtomically leaves behind after a crash
// (a directory's owner may delete files starting with it when it opens).
inline constexpr std::string_view kTempFilePrefix = ".tmp.";

}  // namespace spot
