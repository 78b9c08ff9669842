// Background preparation of training batches (dataset.prefetch): while a
// step computes, a thread of its own gathers the next micro-batch's samples
// and targets, scales and augments them, so the step after it finds them
// ready (PyTorch's DataLoader with a prefetch factor of 1).
//
// A batch is keyed by (epoch, first position, end position) in the epoch's
// order. Every batch, prefetched or not, is made on the prefetch thread by the
// same function, so a run with prefetching, without it, and after a resume
// computes bit for bit the same inputs. A prediction that turns out wrong (the
// world changed, a rollback) is waited for and dropped.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace spot::train {

struct BatchKey {
  int64_t epoch = -1;
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const BatchKey&) const = default;
};

using Batch = std::pair<at::Tensor, at::Tensor>;  // inputs, targets

class BatchPrefetcher {
 public:
  BatchPrefetcher();
  ~BatchPrefetcher();  // waits for the batch in preparation
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The batch `key`: the one prepared in the background when its key
  // matches, else `make` run now (on the prefetch thread). Exceptions of
  // `make` reach the caller. Call from one thread.
  Batch Take(const BatchKey& key, std::function<Batch()> make);
  // Starts preparing `key` with `make` in the background (replacing any
  // batch prepared before and not taken).
  void Start(const BatchKey& key, std::function<Batch()> make);
  // Drops the batch in preparation (the counters were replaced).
  void Drop();

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  void Loop();
  void WaitIdle(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<Batch()> job_;  // to run; empty when none
  BatchKey key_;                // of the job, running or done
  bool busy_ = false;           // a job is queued or running
  bool have_ = false;           // a finished batch is held for key_
  Batch result_;
  std::exception_ptr error_;
  bool stop_ = false;
  int64_t hits_ = 0, misses_ = 0;
  std::thread thread_;
};

}  // namespace spot::train
