#include "ckpt/blob_store.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/file_io.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;

class FileBlobWriter : public BlobWriter {
 public:
  explicit FileBlobWriter(AtomicFileWriter w) : w_(std::move(w)) {}
  Status Append(std::string_view data) override { return w_.Append(data); }
  Status Commit() override { return w_.Commit(); }

 private:
  AtomicFileWriter w_;
};

bool ValidName(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name != "." && name != ".." &&
         !name.starts_with(kTempFilePrefix);
}

// Reads by name each time (BlobStore::OpenReader's default).
class NamedBlobReader final : public BlobReader {
 public:
  NamedBlobReader(const BlobStore& store, std::string name, uint64_t size)
      : store_(store), name_(std::move(name)), size_(size) {}
  Status ReadInto(uint64_t offset, std::span<char> dst) const override {
    return store_.ReadInto(name_, offset, dst);
  }
  uint64_t size() const override { return size_; }

 private:
  const BlobStore& store_;
  std::string name_;
  uint64_t size_;
};

// A directory's file, mapped when large enough: a checkpoint file is renamed
// into place complete and never rewritten, so it does not shrink under the
// mapping (a file deleted meanwhile stays readable until unmapped).
class FileBlobReader final : public BlobReader {
 public:
  explicit FileBlobReader(ReadOnlyFile file) : file_(std::move(file)) {
    if (file_.size() >= kMapMinBytes) (void)file_.Map();  // else, or refused: pread
  }
  Status ReadInto(uint64_t offset, std::span<char> dst) const override {
    return file_.ReadAt(offset, dst);
  }
  uint64_t size() const override { return file_.size(); }
  std::string_view mapped() const override { return file_.mapped(); }

 private:
  ReadOnlyFile file_;
};

}  // namespace

Result<std::unique_ptr<BlobReader>> BlobStore::OpenReader(const std::string& name) const {
  SPOT_ASSIGN_OR_RETURN(uint64_t size, Size(name));
  return std::unique_ptr<BlobReader>(std::make_unique<NamedBlobReader>(*this, name, size));
}

Result<std::string> BlobStore::Read(const std::string& name) const {
  SPOT_ASSIGN_OR_RETURN(uint64_t size, Size(name));
  std::string out(size, '\0');
  SPOT_RETURN_IF_ERROR(ReadInto(name, 0, std::span<char>(out.data(), out.size())));
  return out;
}

Status BlobStore::Put(const std::string& name, std::string_view data) {
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, Create(name));
  SPOT_RETURN_IF_ERROR(w->Append(data));
  return w->Commit();
}

Result<std::unique_ptr<DirectoryBlobStore>> DirectoryBlobStore::Open(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("blob store directory is empty");
  SPOT_RETURN_IF_ERROR(CreateDirectories(dir));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with(kTempFilePrefix)) {
      spdlog::info("removing {}, left by an interrupted write", e.path().string());
      fs::remove(e.path(), ec);
    }
  }
  if (ec) return UnavailableError("listing " + dir + ": " + ec.message());
  return std::unique_ptr<DirectoryBlobStore>(new DirectoryBlobStore(dir));
}

Result<std::unique_ptr<DirectoryBlobStore>> DirectoryBlobStore::OpenShared(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("blob store directory is empty");
  return std::unique_ptr<DirectoryBlobStore>(new DirectoryBlobStore(dir));
}

std::string DirectoryBlobStore::Path(std::string_view name) const {
  return (fs::path(dir_) / name).string();
}

std::string DirectoryBlobStore::Describe(std::string_view name) const { return Path(name); }

Result<std::unique_ptr<BlobWriter>> DirectoryBlobStore::Create(const std::string& name) {
  if (!ValidName(name)) return InvalidArgumentError("invalid blob name '" + name + "'");
  SPOT_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(Path(name)));
  return std::unique_ptr<BlobWriter>(new FileBlobWriter(std::move(w)));
}

Status DirectoryBlobStore::ReadInto(const std::string& name, uint64_t offset,
                                    std::span<char> dst) const {
  return ReadFileRange(Path(name), offset, dst);
}

Result<std::unique_ptr<BlobReader>> DirectoryBlobStore::OpenReader(const std::string& name) const {
  SPOT_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(Path(name)));
  return std::unique_ptr<BlobReader>(std::make_unique<FileBlobReader>(std::move(file)));
}

Result<uint64_t> DirectoryBlobStore::Size(const std::string& name) const {
  std::error_code ec;
  uint64_t n = fs::file_size(Path(name), ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return NotFoundError(Path(name) + ": missing");
    return UnavailableError(Path(name) + ": " + ec.message());
  }
  return n;
}

Result<std::vector<std::string>> DirectoryBlobStore::List() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::string name = e.path().filename().string();
    // Its own error code: an entry that cannot be stat'ed (a dangling link, a
    // file deleted since readdir) is skipped, not an error of the listing.
    std::error_code entry_ec;
    if (ValidName(name) && e.is_regular_file(entry_ec)) out.push_back(std::move(name));
  }
  if (ec) return UnavailableError("listing " + dir_ + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Status DirectoryBlobStore::Delete(const std::string& name) {
  std::error_code ec;
  fs::remove(Path(name), ec);
  if (ec) return UnavailableError("deleting " + Path(name) + ": " + ec.message());
  return Status::Ok();
}

namespace {

class MemoryBlobWriter : public BlobWriter {
 public:
  MemoryBlobWriter(MemoryBlobStore* s, std::string name) : s_(s), name_(std::move(name)) {}
  Status Append(std::string_view d) override {
    buf_.append(d);
    return Status::Ok();
  }
  Status Commit() override {
    s_->Set(name_, std::move(buf_));
    return Status::Ok();
  }

 private:
  MemoryBlobStore* s_;
  std::string name_, buf_;
};

}  // namespace

std::string MemoryBlobStore::Describe(std::string_view name) const {
  return "mem:" + std::string(name);
}

Result<std::unique_ptr<BlobWriter>> MemoryBlobStore::Create(const std::string& name) {
  if (!ValidName(name)) return InvalidArgumentError("invalid blob name '" + name + "'");
  return std::unique_ptr<BlobWriter>(new MemoryBlobWriter(this, name));
}

Status MemoryBlobStore::ReadInto(const std::string& name, uint64_t offset,
                                 std::span<char> dst) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blobs_.find(name);
  if (it == blobs_.end()) return NotFoundError(Describe(name) + ": missing");
  const std::string& b = it->second;
  if (offset > b.size() || dst.size() > b.size() - offset) {
    return DataLossError(Describe(name) + ": blob ends before byte " +
                         std::to_string(offset + dst.size()));
  }
  if (!dst.empty()) std::memcpy(dst.data(), b.data() + offset, dst.size());
  return Status::Ok();
}

Result<uint64_t> MemoryBlobStore::Size(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blobs_.find(name);
  if (it == blobs_.end()) return NotFoundError(Describe(name) + ": missing");
  return uint64_t{it->second.size()};
}

Result<std::vector<std::string>> MemoryBlobStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, bytes] : blobs_) out.push_back(name);
  return out;
}

Status MemoryBlobStore::Delete(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  blobs_.erase(name);
  return Status::Ok();
}

std::string& MemoryBlobStore::blob(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return blobs_[name];
}

void MemoryBlobStore::Set(const std::string& name, std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  blobs_[name] = std::move(bytes);
}

Result<uint64_t> CopyBlob(const BlobStore& from, BlobStore& to, const std::string& name) {
  SPOT_ASSIGN_OR_RETURN(uint64_t size, from.Size(name));
  SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, to.Create(name));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(st.get());
  std::string buf(std::min<uint64_t>(size, 8 << 20), '\0');
  for (uint64_t off = 0; off < size;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    SPOT_RETURN_IF_ERROR(from.ReadInto(name, off, std::span<char>(buf.data(), n)));
    XXH3_64bits_update(st.get(), buf.data(), n);
    SPOT_RETURN_IF_ERROR(w->Append(std::string_view(buf.data(), n)));
    off += n;
  }
  SPOT_RETURN_IF_ERROR(w->Commit());
  return XXH3_64bits_digest(st.get());
}

}  // namespace spot::ckpt
