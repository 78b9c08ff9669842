// Builds a generation's Gloo process group without letting a member that
// died meanwhile hold the others for Gloo's timeouts.
//
// LibTorch 1.13 builds a ProcessGroupGloo in its constructor: each rank
// publishes its address in the store, waits for the others' (the group's
// timeout), then connects to every peer, waiting up to five times the group's
// timeout for a peer that should connect to it. A member SIGKILLed in between
// holds the others for that long (50 s at the default `collective_timeout_s`),
// and no shorter timeout can be given to the connect alone. Here the group is
// built on a thread of its own while the caller asks `gone()` every `poll`
// whether a member's liveness has lapsed; when it names one, the build is
// abandoned and the caller re-forms at once. An abandoned build runs on to its
// own timeout on its thread (nothing can interrupt Gloo's wait), keeping the
// store and the group alive until then; the builder joins such threads when a
// later build starts (those already finished) and when it is destroyed.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "core/status.h"

namespace spot::dist {

class GlooGroupBuilder {
 public:
  struct Options {
    std::string host = "127.0.0.1";            // the address this rank's Gloo device binds
    std::chrono::milliseconds timeout{10000};  // the group's (Gloo's) timeout
    std::chrono::milliseconds poll{100};
  };

  GlooGroupBuilder() = default;
  GlooGroupBuilder(const GlooGroupBuilder&) = delete;
  GlooGroupBuilder& operator=(const GlooGroupBuilder&) = delete;
  ~GlooGroupBuilder();  // joins abandoned builds (each within its timeout)

  // The group of `world` ranks over `store`, as this `rank`. `gone()` returns
  // the id of a member no longer alive, or "" (called from this thread only).
  // Aborted when the build fails (Gloo's message) or is abandoned (naming the
  // member gone).
  Result<c10::intrusive_ptr<c10d::ProcessGroupGloo>> Build(
      c10::intrusive_ptr<c10d::Store> store, int rank, int world, const Options& options,
      const std::function<std::string()>& gone);

  // Builds abandoned and not joined yet (for tests).
  size_t abandoned() const { return abandoned_.size(); }

 private:
  struct Pending;
  void JoinFinished();

  std::vector<std::pair<std::shared_ptr<Pending>, std::thread>> abandoned_;
};

}  // namespace spot::dist
