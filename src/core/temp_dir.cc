#include "core/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace spot {

Result<TempDir> TempDir::Create(std::string_view prefix) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) return UnavailableError("no temporary directory: " + ec.message());
  std::string tmpl = (base / (std::string(prefix) + ".XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return UnavailableError("creating " + tmpl + ": " + std::strerror(errno));
  }
  return TempDir(std::filesystem::path(tmpl));
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)), keep_(other.keep_) {
  other.path_.clear();
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::move(other.path_);
    keep_ = other.keep_;
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() { Remove(); }

void TempDir::Remove() {
  if (path_.empty() || keep_) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

}  // namespace spot
