#include "train/batch_prefetcher.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#if AT_PARALLEL_OPENMP
#include <omp.h>
#endif

namespace spot::train {

BatchPrefetcher::BatchPrefetcher() : thread_([this] { Loop(); }) {}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchPrefetcher::Loop() {
  // One core: the step's own threads keep the others. (OpenMP's thread count
  // is per thread; ATen's first use on this thread sets it from the
  // process's, so set it after that.)
  at::init_num_threads();
#if AT_PARALLEL_OPENMP
  omp_set_num_threads(1);
#endif
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_; });
    if (stop_) return;
    std::function<Batch()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    Batch out;
    std::exception_ptr error;
    try {
      out = job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    result_ = std::move(out);
    error_ = error;
    have_ = true;
    busy_ = false;
    cv_.notify_all();
  }
}

void BatchPrefetcher::WaitIdle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return !busy_; });
}

void BatchPrefetcher::Start(const BatchKey& key, std::function<Batch()> make) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitIdle(lock);
  key_ = key;
  have_ = false;
  error_ = nullptr;
  result_ = {};
  job_ = std::move(make);
  busy_ = true;
  cv_.notify_all();
}

Batch BatchPrefetcher::Take(const BatchKey& key, std::function<Batch()> make) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitIdle(lock);
  if (!(have_ && key_ == key)) {
    ++misses_;
    lock.unlock();
    Start(key, std::move(make));
    lock.lock();
    WaitIdle(lock);
  } else {
    ++hits_;
  }
  have_ = false;
  key_ = {};
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(result_, {});
}

void BatchPrefetcher::Drop() {
  std::unique_lock<std::mutex> lock(mu_);
  WaitIdle(lock);
  have_ = false;
  key_ = {};
  result_ = {};
  error_ = nullptr;
}

}  // namespace spot::train
