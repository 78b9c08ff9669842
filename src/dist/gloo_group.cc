#include "dist/gloo_group.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <exception>
#include <mutex>

namespace spot::dist {

// What the building thread hands back.
struct GlooGroupBuilder::Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // the caller left: the thread closes what it built
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  std::string error;
};

GlooGroupBuilder::~GlooGroupBuilder() {
  JoinFinished();
  if (!abandoned_.empty()) {
    spdlog::info("waiting for {} abandoned group build(s) to reach Gloo's timeout",
                 abandoned_.size());
  }
  for (auto& [pending, thread] : abandoned_) thread.join();
}

void GlooGroupBuilder::JoinFinished() {
  std::erase_if(abandoned_, [](auto& a) {
    bool done;
    {
      std::lock_guard<std::mutex> l(a.first->mu);
      done = a.first->done;
    }
    if (done) a.second.join();
    return done;
  });
}

Result<c10::intrusive_ptr<c10d::ProcessGroupGloo>> GlooGroupBuilder::Build(
    c10::intrusive_ptr<c10d::Store> store, int rank, int world, const Options& options,
    const std::function<std::string()>& gone) {
  JoinFinished();
  auto pending = std::make_shared<Pending>();
  std::thread thread([pending, store = std::move(store), rank, world, options] {
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
    std::string error;
    try {
      auto o = c10d::ProcessGroupGloo::Options::create(options.timeout);
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::unique_lock<std::mutex> l(pending->mu);
    pending->done = true;
    if (!pending->abandoned) {
      pending->group = std::move(group);
      pending->error = std::move(error);
    }
    l.unlock();
    pending->cv.notify_all();
    // A group built after the caller left is closed here, so that peers that
    // formed it with this rank fail at once instead of at their timeout.
  });
  std::unique_lock<std::mutex> lock(pending->mu);
  while (!pending->cv.wait_for(lock, options.poll, [&] { return pending->done; })) {
    lock.unlock();
    const std::string who = gone();
    lock.lock();
    if (!who.empty() && !pending->done) {
      pending->abandoned = true;
      lock.unlock();
      abandoned_.emplace_back(std::move(pending), std::move(thread));
      return AbortedError(fmt::format(
          "member {} is gone (its liveness lapsed) while the group was being built; not waiting "
          "for Gloo's timeout",
          who));
    }
  }
  lock.unlock();
  thread.join();
  if (!pending->group) return AbortedError(pending->error);
  return std::move(pending->group);
}

}  // namespace spot::dist
