#include "dist/rendezvous.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "core/clock.h"
#include "core/strict_json.h"

namespace spot::dist {
namespace {

using SteadyClock = std::chrono::steady_clock;
using nlohmann::json;

// The one key holding a job's rendezvous state.
std::string StateKey(const std::string& job) { return job + "/rdzv/state"; }

bool Contains(const std::vector<MemberInfo>& members, const std::string& id) {
  return std::any_of(members.begin(), members.end(),
                     [&](const MemberInfo& m) { return m.id == id; });
}

// An integer field of the state (it is read inside a try: malformed state
// throws, and the caller reports it). Never a float cast to an integer.
int64_t Int(const json& v, const char* field) {
  auto i = JsonInt64(v);
  if (!i.ok()) throw std::invalid_argument(fmt::format("{}: {}", field, i.status().message()));
  return *i;
}

// A state hash as written: decimal digits of a uint64 (std::stoull would take
// a sign, spaces and trailing text).
uint64_t Hash(const std::string& s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    throw std::invalid_argument("state_hash: not a 64-bit unsigned integer: '" + s + "'");
  }
  return v;
}

}  // namespace

struct Rendezvous::State {
  int64_t gen = 0;
  bool open = false;
  std::vector<MemberInfo> members;
  std::vector<std::string> prev;  // members of the previous generation, in rank order
  int64_t opened_ms = 0;
  // Newcomers that found the group full; the next round takes them in.
  std::vector<MemberInfo> waiting;

  // The state as stored (nullopt: no generation yet); DataLoss naming `key`
  // when malformed.
  static Result<State> Parse(const std::optional<std::string>& v, const std::string& key);
  std::string Dump() const {
    return json{{"gen", gen},   {"open", open},           {"members", ToJson(members)},
                {"prev", prev}, {"opened_ms", opened_ms}, {"waiting", ToJson(waiting)}}
        .dump();
  }
  static json ToJson(const std::vector<MemberInfo>& v) {
    json m = json::array();
    for (const MemberInfo& i : v) {
      m.push_back({{"id", i.id},
                   {"samples_per_s", i.samples_per_s},
                   {"step", i.step},
                   {"state_hash", std::to_string(i.state_hash)}});
    }
    return m;
  }
  static std::vector<MemberInfo> FromJson(const json& j) {
    std::vector<MemberInfo> v;
    for (const json& m : j) {
      v.push_back({.id = m.at("id").get<std::string>(),
                   .samples_per_s = m.at("samples_per_s").get<double>(),
                   .step = Int(m.at("step"), "step"),
                   .state_hash = Hash(m.at("state_hash").get<std::string>())});
    }
    return v;
  }
};

std::string Generation::store_prefix(const std::string& job) const {
  return fmt::format("{}/gen/{}/", job, number);
}

Rendezvous::Rendezvous(KvStore* store, RendezvousOptions options, std::string id)
    : store_(store), opt_(std::move(options)), id_(std::move(id)), key_(StateKey(opt_.job)) {
  (void)store_->Heartbeat(id_);
  heartbeat_ = std::thread([this] {
    auto period = std::max(std::chrono::milliseconds(5), store_->liveness_ttl() / 4);
    while (!stop_.load()) {
      Status st = store_->Heartbeat(id_);
      if (!st.ok()) spdlog::warn("rendezvous heartbeat of {}: {}", id_, st.message());
      for (auto t = std::chrono::milliseconds(0); t < period && !stop_.load();
           t += std::chrono::milliseconds(5)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  });
}

Rendezvous::~Rendezvous() { StopHeartbeat(); }

void Rendezvous::StopHeartbeat() {
  stop_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status Rendezvous::Leave() {
  StopHeartbeat();
  return store_->MarkDead(id_);
}

Result<Rendezvous::State> Rendezvous::State::Parse(const std::optional<std::string>& v,
                                                   const std::string& key) {
  State s;
  if (!v) return s;
  try {
    json j = json::parse(*v);
    s.gen = Int(j.at("gen"), "gen");
    s.open = j.at("open").get<bool>();
    s.prev = j.at("prev").get<std::vector<std::string>>();
    s.opened_ms = Int(j.at("opened_ms"), "opened_ms");
    s.members = State::FromJson(j.at("members"));
    s.waiting = State::FromJson(j.at("waiting"));
  } catch (const std::exception& e) {
    return DataLossError(fmt::format("rendezvous state {} is malformed: {}", key, e.what()));
  }
  return s;
}

Result<Rendezvous::State> Rendezvous::Read(std::string* raw) {
  SPOT_ASSIGN_OR_RETURN(std::optional<std::string> v, store_->Get(key_));
  raw->assign(v.value_or(""));
  return State::Parse(v, key_);
}

Result<Membership> ReadMembership(KvStore* store, const std::string& job) {
  const std::string key = StateKey(job);
  SPOT_ASSIGN_OR_RETURN(std::optional<std::string> v, store->Get(key));
  SPOT_ASSIGN_OR_RETURN(Rendezvous::State s, Rendezvous::State::Parse(v, key));
  Membership m{.generation = s.open ? s.gen - 1 : s.gen};
  if (s.open) {
    m.formed = s.prev;
  } else {
    for (const MemberInfo& i : s.members) m.formed.push_back(i.id);
  }
  for (const MemberInfo& i : s.waiting) m.waiting.push_back(i.id);
  return m;
}

std::string FirstMemberGone(KvStore* store, const Generation& g, const std::string& me) {
  for (const MemberInfo& m : g.members) {
    if (m.id == me) continue;
    Result<bool> alive = store->IsAlive(m.id);
    if (alive.ok() && !*alive) return m.id;
  }
  return "";
}

bool Rendezvous::CanClose(const State& s, const std::vector<MemberInfo>& alive) const {
  const int n = static_cast<int>(alive.size());
  if (n < opt_.min_workers) return false;
  if (n >= opt_.max_workers) return true;
  const int64_t waited = RealClock()->NowUnixMs() - s.opened_ms;
  if (s.prev.empty()) return waited >= opt_.join_window.count();
  if (waited >= opt_.last_call.count()) return true;
  bool survivor = false;
  for (const std::string& p : s.prev) {
    if (Contains(s.members, p)) {
      survivor = true;
      continue;
    }
    auto live = store_->IsAlive(p);
    if (!live.ok() || *live) return false;  // may still come back
  }
  // The whole previous group is gone (a reclaimed gang): its replacements
  // gather for a join window, as a first generation does.
  return survivor || waited >= opt_.join_window.count();
}

// Members of a generation that are still alive (a store error counts a
// member alive: waiting is the safe side).
int Rendezvous::AliveCount(const std::vector<MemberInfo>& members) const {
  int n = 0;
  for (const MemberInfo& m : members) {
    auto live = store_->IsAlive(m.id);
    n += !live.ok() || *live ? 1 : 0;
  }
  return n;
}

Result<bool> Rendezvous::TryClose(const State& s, const std::string& raw) {
  std::vector<MemberInfo> alive;
  for (const MemberInfo& m : s.members) {
    SPOT_ASSIGN_OR_RETURN(bool live, store_->IsAlive(m.id));
    if (live || m.id == id_) alive.push_back(m);
  }
  if (!CanClose(s, alive)) return false;
  // Previous members first in their old order, then newcomers in the order of
  // their ids (not of their arrival, a race: a job started again with the
  // same ids gets the same ranks, and the same mathematics).
  auto prev_pos = [&](const MemberInfo& m) {
    auto it = std::find(s.prev.begin(), s.prev.end(), m.id);
    return it == s.prev.end() ? s.prev.size() : static_cast<size_t>(it - s.prev.begin());
  };
  std::sort(alive.begin(), alive.end(), [&](const MemberInfo& a, const MemberInfo& b) {
    const size_t pa = prev_pos(a), pb = prev_pos(b);
    return pa != pb ? pa < pb : a.id < b.id;
  });
  if (static_cast<int>(alive.size()) > opt_.max_workers) alive.resize(opt_.max_workers);
  State closed = s;
  closed.open = false;
  closed.members = std::move(alive);
  return store_->CompareAndSwap(key_, raw, closed.Dump());
}

Result<Generation> Rendezvous::Join(const MemberInfo& me_in) {
  MemberInfo me = me_in;
  me.id = id_;
  const auto deadline = SteadyClock::now() + opt_.timeout;
  while (true) {
    std::string raw;
    SPOT_ASSIGN_OR_RETURN(State s, Read(&raw));
    std::optional<std::string> expected;
    if (!raw.empty()) expected = raw;
    // A stop gives up before any change: neither opening, entering nor
    // closing a generation. Only a generation already closed with this worker
    // in it is taken, since its members will be waiting for it.
    const bool closed_with_me = !s.open && s.gen > last_generation_ && Contains(s.members, id_);
    if (!closed_with_me && opt_.cancelled && opt_.cancelled()) {
      return AbortedError(
          fmt::format("rendezvous of job {}: worker {} stopped while joining", opt_.job, id_));
    }
    bool changed = false;
    if (s.open && !Contains(s.members, id_)) {
      State next = s;
      next.members.push_back(me);
      SPOT_ASSIGN_OR_RETURN(changed, store_->CompareAndSwap(key_, expected, next.Dump()));
    } else if (s.open) {
      SPOT_ASSIGN_OR_RETURN(changed, TryClose(s, raw));
    } else if (closed_with_me) {
      Generation g{.number = s.gen, .members = s.members};
      for (size_t r = 0; r < s.members.size(); ++r) {
        if (s.members[r].id == id_) g.rank = static_cast<int>(r);
      }
      last_generation_ = s.gen;
      return g;
    } else if (Contains(s.members, id_) || static_cast<int>(s.members.size()) < opt_.max_workers ||
               AliveCount(s.members) < opt_.max_workers) {
      // Re-forming after a failure, or a newcomer with room to join: open the
      // next generation, taking in the newcomers that were waiting.
      State next{
          .gen = s.gen + 1, .open = true, .members = {me}, .opened_ms = RealClock()->NowUnixMs()};
      for (const MemberInfo& m : s.members) next.prev.push_back(m.id);
      for (const MemberInfo& w : s.waiting) {
        if (w.id != id_) next.members.push_back(w);
      }
      SPOT_ASSIGN_OR_RETURN(changed, store_->CompareAndSwap(key_, expected, next.Dump()));
    } else if (!Contains(s.waiting, id_)) {
      // A full group: wait without disturbing it until a round opens.
      State next = s;
      next.waiting.push_back(me);
      SPOT_ASSIGN_OR_RETURN(changed, store_->CompareAndSwap(key_, expected, next.Dump()));
    }
    if (changed) continue;
    if (SteadyClock::now() >= deadline) {
      return DeadlineExceededError(
          fmt::format("rendezvous of job {}: worker {} could not join a generation within {} ms "
                      "(generation {}, {}, {} member(s), min_workers {})",
                      opt_.job, id_, opt_.timeout.count(), s.gen, s.open ? "open" : "closed",
                      s.members.size(), opt_.min_workers));
    }
    std::this_thread::sleep_for(opt_.poll);
  }
}

Result<bool> Rendezvous::ShouldReform(int64_t current) {
  std::string raw;
  SPOT_ASSIGN_OR_RETURN(State s, Read(&raw));
  return s.gen > current;
}

}  // namespace spot::dist
