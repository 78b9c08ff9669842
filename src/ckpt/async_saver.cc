#include "ckpt/async_saver.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace spot::ckpt {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

AsyncSaver::AsyncSaver(CheckpointStore* store, AsyncSaverOptions options)
    : store_(store), opt_(options), codec_(options.zstd_level) {
  if (opt_.max_in_flight < 1) opt_.max_in_flight = 1;
  if (opt_.full_every < 1) opt_.full_every = 1;
  for (int i = 0; i < opt_.max_in_flight; ++i) {
    buffers_.push_back(std::make_unique<Container>());
    free_.push_back(buffers_.back().get());
  }
  writer_ = std::thread([this] { WriterLoop(); });
  replicator_ = std::thread([this] { ReplicatorLoop(); });
}

AsyncSaver::~AsyncSaver() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      return write_queue_.empty() && !writing_ && replicate_queue_.empty() && !replicating_;
    });
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  replicator_.join();
}

Result<Container*> AsyncSaver::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  if (!write_error_.ok()) {
    Status s = write_error_;
    write_error_ = Status::Ok();
    return s;
  }
  Container* c = free_.back();
  free_.pop_back();
  return c;
}

int64_t AsyncSaver::Submit(Container* snapshot, SaveRequest request) {
  int64_t id = store_->ReserveId();
  {
    std::lock_guard<std::mutex> lock(mu_);
    write_queue_.push_back({snapshot, std::move(request), id});
  }
  cv_.notify_all();
  return id;
}

int AsyncSaver::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(write_queue_.size()) + (writing_ ? 1 : 0);
}

bool AsyncSaver::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !write_queue_.empty() || writing_ || !replicate_queue_.empty() || replicating_;
}

int64_t AsyncSaver::last_committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_committed_;
}

std::vector<SaveReport> AsyncSaver::TakeCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SaveReport> out;
  out.swap(completed_);
  return out;
}

Status AsyncSaver::Flush(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] {
    return write_queue_.empty() && !writing_ && replicate_queue_.empty() && !replicating_;
  };
  // With a deadline, the durable copies still to make are plain ones.
  const bool hurry = deadline != Clock::time_point::max();
  if (hurry && deadline_flushes_++ == 0) plain_copy_ = true;
  const bool finished = cv_.wait_until(lock, deadline, done);
  if (hurry && --deadline_flushes_ == 0) plain_copy_ = false;
  if (!finished) {
    return DeadlineExceededError(fmt::format(
        "checkpoint flush: deadline passed with {} version(s) still to write and {} to replicate",
        write_queue_.size() + (writing_ ? 1 : 0),
        replicate_queue_.size() + (replicating_ ? 1 : 0)));
  }
  Status s = !write_error_.ok() ? write_error_ : replicate_error_;
  write_error_ = Status::Ok();
  replicate_error_ = Status::Ok();
  return s;
}

void AsyncSaver::WriterLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !write_queue_.empty(); });
      if (write_queue_.empty()) return;
      job = std::move(write_queue_.front());
      write_queue_.pop_front();
      writing_ = true;
    }
    auto t0 = Clock::now();
    bool delta =
        opt_.delta && reference_id_ >= 0 && reference_depth_ + 1 < opt_.full_every && !next_full_;
    const int64_t id = job.id;
    auto v = store_->Write(id, *job.snapshot, &reference_, delta ? reference_id_ : -1,
                           delta ? reference_depth_ + 1 : 0, job.request, codec_);
    Status st = v.status();
    if (v.ok()) {
      reference_id_ = v->id;
      reference_depth_ = v->chain_depth;
      NoteWritten(*v);
      auto dropped = store_->ApplyRetention(Tier::kLocal);
      if (!dropped.ok()) spdlog::warn("checkpoint retention: {}", dropped.status().message());
    } else {
      reference_.Clear();  // unspecified after a failed write: start over in full
      reference_id_ = -1;
      reference_depth_ = 0;
      next_full_ = false;
      spdlog::error("checkpoint {} failed: {}", id, st.message());
    }
    double write_s = Since(t0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      free_.push_back(job.snapshot);
      if (v.ok()) {
        last_committed_ = v->id;
        replicate_queue_.push_back({{std::move(v).value(), write_s, 0}, job.request.plan});
      } else if (write_error_.ok()) {
        write_error_ = st;
      }
    }
    cv_.notify_all();
  }
}

void AsyncSaver::NoteWritten(const VersionInfo& v) {
  if (v.base < 0) {
    chain_full_bytes_ = v.file_bytes;
    next_full_ = false;
    return;
  }
  const double saving = chain_full_bytes_ > 0 ? 1 - static_cast<double>(v.file_bytes) /
                                                        static_cast<double>(chain_full_bytes_)
                                              : 1;
  next_full_ = opt_.min_delta_saving > 0 && saving < opt_.min_delta_saving;
}

void AsyncSaver::ReplicatorLoop() {
  for (;;) {
    Replication job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !replicate_queue_.empty(); });
      if (replicate_queue_.empty()) return;
      job = std::move(replicate_queue_.front());
      replicate_queue_.pop_front();
      replicating_ = true;
    }
    SaveReport& r = job.report;
    Status st;
    if (store_->has_durable()) {
      auto t0 = Clock::now();
      auto done = store_->Replicate(
          r.info, {.plan = job.plan, .zstd_level = opt_.zstd_level, .plain_copy = &plain_copy_});
      st = done.status();
      if (st.ok()) {
        r.durable_full = done->materialized;
        r.durable_chain_depth = done->durable_chain_depth;
        r.info.tiers.push_back(Tier::kDurable);
        auto dropped = store_->ApplyRetention(Tier::kDurable);
        if (!dropped.ok()) spdlog::warn("durable retention: {}", dropped.status().message());
      } else {
        spdlog::warn("replicating checkpoint {}: {}", r.info.id, st.message());
      }
      r.replicate_s = Since(t0);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      replicating_ = false;
      completed_.push_back(std::move(r));
      if (!st.ok()) replicate_error_ = st;
    }
    cv_.notify_all();
  }
}

}  // namespace spot::ckpt
