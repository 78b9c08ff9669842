#include <map>
#include <mutex>

#include "dist/kv_store.h"

namespace spot::dist {
namespace {

using Clock = std::chrono::steady_clock;

class MemoryKvStore final : public KvStore {
 public:
  explicit MemoryKvStore(std::chrono::milliseconds ttl) : ttl_(ttl) {}

  Result<std::optional<std::string>> Get(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status Put(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> l(mu_);
    data_[key] = value;
    return Status::Ok();
  }
  Result<bool> CompareAndSwap(const std::string& key, const std::optional<std::string>& expected,
                              const std::string& desired) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(key);
    bool matches = expected ? (it != data_.end() && it->second == *expected) : it == data_.end();
    if (matches) data_[key] = desired;
    return matches;
  }
  Status Delete(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    data_.erase(key);
    return Status::Ok();
  }
  Status Heartbeat(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    beats_[id] = Clock::now();
    return Status::Ok();
  }
  Result<bool> IsAlive(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = beats_.find(id);
    return it != beats_.end() && Clock::now() - it->second < ttl_;
  }
  Status MarkDead(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    beats_.erase(id);
    return Status::Ok();
  }
  std::chrono::milliseconds liveness_ttl() const override { return ttl_; }

 private:
  const std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::map<std::string, std::string> data_;
  std::map<std::string, Clock::time_point> beats_;
};

}  // namespace

std::unique_ptr<KvStore> NewMemoryKvStore(std::chrono::milliseconds liveness_ttl) {
  return std::make_unique<MemoryKvStore>(liveness_ttl);
}

}  // namespace spot::dist
