// TempDir: a new, uniquely named directory under the system's temporary
// directory ($TMPDIR or /tmp), removed with everything in it when the object
// is destroyed, unless Keep() was called (e.g. to inspect a failed test).
// Movable, not copyable.
#pragma once

#include <filesystem>
#include <string_view>

#include "core/status.h"

namespace spot {

class TempDir {
 public:
  // Creates "<tmp>/<prefix>.XXXXXX". Unavailable when it cannot.
  static Result<TempDir> Create(std::string_view prefix);

  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::filesystem::path& path() const { return path_; }
  void Keep() { keep_ = true; }

 private:
  explicit TempDir(std::filesystem::path p) : path_(std::move(p)) {}
  void Remove();

  std::filesystem::path path_;
  bool keep_ = false;
};

}  // namespace spot
