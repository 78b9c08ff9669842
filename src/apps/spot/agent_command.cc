// `spot agent AGENT.json`: what runs on an instance of a command workload,
// as torchrun's elastic agent does for a PyTorch script, with SpotTrain's
// notices. It
//   - joins the job's rendezvous (its heartbeat is how the controller knows
//     the instance is alive) and gets this node's rank in the gang;
//   - runs `setup` once, then `nproc_per_node` ranks of `run` (sh -c), each
//     in a process group of its own, with torchrun's variables (RANK,
//     WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK,
//     MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT) and SpotTrain's
//     (SPOT_JOB, SPOT_INSTANCE, SPOT_CHECKPOINT_DIR, SPOT_NOTICE_FILE,
//     SPOT_NOTICE_SIGNAL, SPOT_CONTROLLER_URL, SPOT_TOKEN_FILE);
//   - on a termination notice writes the notice to SPOT_NOTICE_FILE, sends
//     the notice signal to its ranks at once and tells the other nodes,
//     which signal theirs (a data-parallel program stops everywhere at once);
//     SIGKILL comes only with the machine, at the reclaim;
//   - when the gang changes (a node lost, a node joining) stops its ranks
//     (the signal, then SIGKILL after stop_grace_s) and starts them again in
//     the new generation, so the program resumes from its checkpoint;
//   - exits with the program's code: 0 when every rank finished, the first
//     failing rank's code (128 + signal for a killed one) otherwise;
//   - with --metrics-port, serves /metrics (agent_metrics.h): the program's
//     CPU time as busy time, its ranks, its restarts.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/spot/agent_metrics.h"
#include "apps/spot/agent_spec.h"
#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/port_retry.h"
#include "cloud/termination_watcher.h"
#include "control/run_spec.h"
#include "core/clock.h"
#include "core/file_io.h"
#include "core/logging.h"
#include "core/net.h"
#include "core/process.h"
#include "core/process_cpu.h"
#include "core/spec_reader.h"
#include "dist/c10d_stores.h"
#include "dist/rendezvous.h"

namespace spot::cli {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

CLI::App* AddAgentCommand(CLI::App& app, AgentArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Run a command workload's program on this instance (started by `spot run` for a job "
      "with `run:`): ranks with torchrun's variables, notices passed on as a signal, "
      "restarts when the gang changes.");
  cmd->add_option("spec", args->spec_path, "The job's agent.json (written by `spot run`)")
      ->required();
  cmd->add_option("--rendezvous", args->rendezvous, "tcp://HOST:PORT of the job's rendezvous")
      ->required();
  cmd->add_option("--id", args->id, "This instance's id")->required();
  cmd->add_option("--local-dir", args->local_dir, "This instance's local disk")->required();
  cmd->add_option("--controller", args->controller_url,
                  "The controller's API (SPOT_CONTROLLER_URL for the program)");
  cmd->add_option("--watch", args->watch, "Termination notices: none | auto | aws | gcp | azure")
      ->capture_default_str();
  cmd->add_option("--notice-poll", args->notice_poll_s, "Seconds between metadata polls")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--metrics-port", args->metrics_port,
                  "Serve Prometheus metrics at http://HOST:PORT/metrics, HOST this machine's "
                  "address toward the rendezvous (published there): the program's CPU time as "
                  "busy time, its ranks, its restarts (0: none)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--cpus", args->cpus,
                  "CPUs the program's ranks may use, for its busy fraction (0: this instance's "
                  "share of the CPUs it may run on)")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  cmd->add_option("--machine-shared-by", args->machine_shared_by,
                  "Instances of the job on this machine, sharing its CPUs (1: the instance is a "
                  "machine of its own; 0: the job's max_nodes, as the local provider runs them)")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  return cmd;
}

namespace {

constexpr double kTickS = 0.05;       // the agent's loop period
constexpr double kGangCheckS = 0.25;  // between looks at the rendezvous

// The CPUs this node's ranks share: the instances of a job may share one
// machine (the local provider: --machine-shared-by 0, the job's max_nodes),
// each taking its part of the CPUs it may run on; an instance that is a
// machine of its own (EC2, a Slurm allocation) takes them all.
// OMP_NUM_THREADS splits them between its ranks.
int NodeCpus(const AgentSpec& spec, const AgentArgs& args) {
  const int shared_by = args.machine_shared_by > 0 ? args.machine_shared_by : spec.max_nodes;
  return std::max(1, AvailableCpus() / std::max(1, shared_by));
}

// One rank: `sh -c RUN` in a process group of its own, and what became of
// it. The shell may run the program as its child: a signal to the group
// reaches both, the shell may end first (killed by the signal it does not
// trap) while the program still saves, so a rank ends when its group is
// empty; its code is the shell's, which is the program's when it ended on
// its own.
struct Rank {
  int64_t pid = 0;
  bool running = true;
  bool leader_done = false;
  double leftovers_kill_at = -1;  // the shell ended on its own: what it left, SIGKILLed then
  int code = 0;                   // exit code, or 128 + signal
};

class Agent {
 public:
  // `metrics` may be null (no /metrics). `host`: this machine's address
  // toward the rendezvous (where node rank 0's program is reached, and
  // where /metrics is published).
  Agent(AgentSpec spec, const AgentArgs& args, AgentMetrics* metrics, std::string host)
      : spec_(std::move(spec)), args_(args), metrics_(metrics), host_(std::move(host)) {}

  int Run();

 private:
  enum class Ended { kFinished, kFailed, kStopped, kGangChanged };

  Status RunSetup();
  Result<std::string> MasterAddress(const dist::Generation& g);
  Status StartRanks(const dist::Generation& g, const std::string& master);
  Ended Supervise(const dist::Generation& g);
  void SignalRanks(int sig);
  bool PollRanks();  // true while any runs
  // Whether a member of `g` other than this node has gone (not finished).
  bool PeerLost(const dist::Generation& g);
  bool TakeStopSignal();
  // A termination notice while no program runs (setup, the rendezvous, rank
  // 0's address): there is nothing to save and the machine goes, so the
  // agent leaves at once instead of starting a program it would have to stop
  // (or still waiting when the machine is reclaimed).
  bool NoticedWithoutProgram() const { return notice_pending_.load(); }
  int LeaveOnNotice(const char* while_doing);
  void OnNotice(const cloud::Notice& n);
  void WriteNotice(double deadline, const std::string& action, const std::string& source);
  std::string Key(int64_t generation, const std::string& what) const {
    return fmt::format("{}/agent/{}/{}", spec_.job, generation, what);
  }
  int FirstFailure() const {
    for (const Rank& r : ranks_) {
      if (r.code != 0) return r.code;
    }
    return 0;
  }

  AgentSpec spec_;
  const AgentArgs& args_;
  AgentMetrics* metrics_;
  const std::string host_;
  std::shared_ptr<dist::KvStore> kv_;
  std::unique_ptr<dist::Rendezvous> rdzv_;
  std::vector<Rank> ranks_;
  int restarts_ = 0;
  bool stop_ = false;          // SIGTERM/SIGINT: the controller gives the instance back
  bool noticed_ = false;       // this node got a termination notice
  bool peer_noticed_ = false;  // another node of the generation did
  bool signalled_ = false;     // the ranks of this generation were sent a signal
  double notice_wall_ = 0, notice_deadline_ = 0;  // unix s: when our notice came, its deadline
  std::atomic<bool> notice_pending_{false};
  std::mutex notice_mu_;
  cloud::Notice notice_;
};

bool Agent::TakeStopSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  timespec zero{0, 0};
  const int sig = sigtimedwait(&set, nullptr, &zero);
  if (sig != SIGTERM && sig != SIGINT) return false;
  spdlog::warn("{}: stopping the program", strsignal(sig));
  return true;
}

int Agent::LeaveOnNotice(const char* while_doing) {
  cloud::Notice n;
  {
    std::lock_guard lock(notice_mu_);
    n = notice_;
  }
  const double wall = RealClock()->NowUnixS();
  spdlog::warn("termination notice ({} {}) {}: {:.1f} s left; leaving (no program is running)",
               cloud::FlavorName(n.flavor), n.action, while_doing,
               n.time_unix_s > 0 ? n.time_unix_s - wall : 30.0);
  (void)rdzv_->Leave();
  return kExitOk;
}

void Agent::OnNotice(const cloud::Notice& n) {
  std::lock_guard lock(notice_mu_);
  notice_ = n;
  notice_pending_.store(true);
}

void Agent::WriteNotice(double deadline, const std::string& action, const std::string& source) {
  const double now = RealClock()->NowUnixS();
  const std::string path = (fs::path(args_.local_dir) / "notice.json").string();
  nlohmann::json j{{"notice_unix_s", now},
                   {"deadline_unix_s", deadline},
                   {"action", action},
                   {"source", source}};
  if (Status st = WriteFileAtomically(path, j.dump() + "\n"); !st.ok()) {
    spdlog::error("writing the notice file: {}", st.message());
  }
}

void Agent::SignalRanks(int sig) {
  signalled_ = true;
  for (const Rank& r : ranks_) {
    if (!r.running) continue;
    if (::kill(-static_cast<pid_t>(r.pid), sig) != 0 && !r.leader_done) SignalProcess(r.pid, sig);
  }
}

bool Agent::PollRanks() {
  // The agent is its ranks' subreaper: what a rank's shell leaves behind
  // when it ends becomes our child, reaped here (a zombie would keep its
  // group from ever being empty).
  std::map<int64_t, int> ended;  // pid -> wait status
  for (int status = 0;;) {
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    ended[pid] = status;
  }
  bool any = false;
  const double now = RealClock()->MonotonicS();
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    if (!r.leader_done) {
      auto it = ended.find(r.pid);
      if (it == ended.end()) {
        any = true;
        continue;
      }
      r.leader_done = true;
      const int st = it->second;
      r.code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) : 1;
      // Ended unasked: what it left behind gets the grace, then SIGKILL.
      if (!signalled_) r.leftovers_kill_at = now + spec_.stop_grace_s;
    }
    if (::kill(-static_cast<pid_t>(r.pid), 0) != 0 && errno == ESRCH) {
      r.running = false;
      continue;
    }
    if (r.leftovers_kill_at >= 0 && now >= r.leftovers_kill_at) {
      ::kill(-static_cast<pid_t>(r.pid), SIGKILL);
      r.leftovers_kill_at = now + 1;
    }
    any = true;
  }
  return any;
}

bool Agent::PeerLost(const dist::Generation& g) {
  for (const dist::MemberInfo& m : g.members) {
    if (m.id == args_.id) continue;
    auto alive = kv_->IsAlive(m.id);
    if (!alive.ok() || *alive) continue;
    auto finished = kv_->Get(Key(g.number, "finished/" + m.id));
    if (finished.ok() && finished->has_value()) continue;  // it ended with the program
    return true;
  }
  return false;
}

Status Agent::RunSetup() {
  if (spec_.setup.empty()) return Status::Ok();
  spdlog::info("setup: {}", spec_.setup);
  SPOT_ASSIGN_OR_RETURN(int64_t pid, Spawn({.argv = {"/bin/sh", "-c", spec_.setup},
                                            .env = spec_.envs,
                                            .out = Output::Inherit(),
                                            .err = Output::Inherit(),
                                            .group = ProcessGroup::kNewGroup,
                                            .cwd = spec_.workdir}));
  while (true) {
    ProcessStatus s = CheckProcess(pid);
    if (!s.running) {
      if (s.exit_code == 0) return Status::Ok();
      return FailedPreconditionError(fmt::format("setup {}", DescribeExit(s)));
    }
    const bool noticed = NoticedWithoutProgram();
    if (noticed || TakeStopSignal()) {
      ::kill(-static_cast<pid_t>(pid), SIGKILL);
      (void)WaitProcess(pid, 10);
      return AbortedError(noticed ? "noticed during setup" : "stopped during setup");
    }
    RealClock()->SleepFor(kTickS);
  }
}

Result<std::string> Agent::MasterAddress(const dist::Generation& g) {
  const std::string key = Key(g.number, "master");
  if (g.rank == 0) {
    // The program's TCPStore binds it seconds from now (after its imports):
    // a port no outgoing connection can take meanwhile.
    SPOT_ASSIGN_OR_RETURN(int port, PickListenPort());
    const std::string address = HostPort(host_, port);
    SPOT_RETURN_IF_ERROR(kv_->Put(key, address));
    return address;
  }
  const double until = RealClock()->MonotonicS() + 60;
  double next_gang_check = 0;
  while (RealClock()->MonotonicS() < until) {
    auto v = kv_->Get(key);
    if (v.ok() && v->has_value()) return **v;
    if (NoticedWithoutProgram()) return AbortedError("noticed while waiting for rank 0's address");
    // A node that left the generation before its program started (rank 0
    // noticed, or lost with its machine): it will never start; join again.
    if (const double now = RealClock()->MonotonicS(); now >= next_gang_check) {
      next_gang_check = now + kGangCheckS;
      if (PeerLost(g)) {
        return UnavailableError(fmt::format(
            "a node left generation {} before node rank 0 published its address", g.number));
      }
    }
    if (TakeStopSignal()) {
      stop_ = true;
      return AbortedError("stopped while waiting for rank 0's address");
    }
    RealClock()->SleepFor(kTickS);
  }
  return DeadlineExceededError(
      fmt::format("node rank 0 of generation {} published no address in 60 s", g.number));
}

Status Agent::StartRanks(const dist::Generation& g, const std::string& master) {
  const size_t colon = master.rfind(':');
  const int n = spec_.nproc_per_node;
  const int world = g.world_size() * n;
  const int threads = std::max(1, NodeCpus(spec_, args_) / std::max(1, spec_.nproc_per_node));
  ranks_.clear();
  signalled_ = false;
  for (int local = 0; local < n; ++local) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"OMP_NUM_THREADS", std::to_string(threads)}};
    for (const auto& kv : spec_.envs) env.push_back(kv);  // the job's own win over the default
    const int rank = g.rank * n + local;
    for (auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"RANK", std::to_string(rank)},
             {"WORLD_SIZE", std::to_string(world)},
             {"LOCAL_RANK", std::to_string(local)},
             {"LOCAL_WORLD_SIZE", std::to_string(n)},
             {"NODE_RANK", std::to_string(g.rank)},
             {"GROUP_RANK", std::to_string(g.rank)},
             {"GROUP_WORLD_SIZE", std::to_string(g.world_size())},
             {"MASTER_ADDR", master.substr(0, colon)},
             {"MASTER_PORT", master.substr(colon + 1)},
             {"TORCHELASTIC_RESTART_COUNT", std::to_string(restarts_)},
             {"SPOT_JOB", spec_.job},
             {"SPOT_INSTANCE", args_.id},
             {"SPOT_GENERATION", std::to_string(g.number)},
             {"SPOT_CHECKPOINT_DIR", spec_.checkpoint_dir},
             {"SPOT_NOTICE_FILE", (fs::path(args_.local_dir) / "notice.json").string()},
             {"SPOT_NOTICE_SIGNAL", spec_.notice_signal},
             {"SPOT_CONTROLLER_URL", args_.controller_url},
             {"SPOT_TOKEN_FILE", spec_.token_file}}) {
      env.emplace_back(std::move(k), std::move(v));
    }
    auto pid = Spawn({.argv = {"/bin/sh", "-c", spec_.run},
                      .env = std::move(env),
                      .out = Output::Inherit(),
                      .err = Output::Inherit(),
                      .group = ProcessGroup::kNewGroup,
                      .cwd = spec_.workdir});
    if (!pid.ok()) {
      SignalRanks(SIGKILL);
      return pid.status();
    }
    ranks_.push_back({.pid = *pid});
  }
  if (metrics_) metrics_->SetRanksRunning(n);
  spdlog::info("generation {}: node {} of {}, ranks {}..{} of {} (master {})", g.number, g.rank,
               g.world_size(), g.rank * n, g.rank * n + n - 1, world, master);
  return Status::Ok();
}

Agent::Ended Agent::Supervise(const dist::Generation& g) {
  const int notice_sig = control::NoticeSignalNumber(spec_.notice_signal);
  Clock* clock = RealClock();
  double kill_at = -1;  // SIGKILL the ranks then (after a stop or a gang change)
  double next_gang_check = 0;
  bool gang_changed = false, failed = false;
  peer_noticed_ = false;
  auto stop_ranks = [&](int sig, const char* why) {
    if (kill_at < 0) {
      spdlog::info("{}: {} to the program ({} s before SIGKILL)", why, strsignal(sig),
                   spec_.stop_grace_s);
      SignalRanks(sig);
      kill_at = clock->MonotonicS() + spec_.stop_grace_s;
    }
  };
  while (PollRanks()) {
    const double now = clock->MonotonicS();
    if (metrics_) {
      metrics_->SetRanksRunning(static_cast<int>(
          std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; })));
    }
    if (!stop_ && TakeStopSignal()) {
      stop_ = true;
      stop_ranks(SIGTERM, "instance given back");
    }
    if (notice_pending_.exchange(false)) {
      cloud::Notice n;
      {
        std::lock_guard lock(notice_mu_);
        n = notice_;
      }
      const double wall = clock->NowUnixS();
      const double deadline = n.time_unix_s > 0 ? n.time_unix_s : wall + 30;  // GCP: 30 s
      spdlog::warn("termination notice ({} {}): {:.1f} s left; {} to the program",
                   cloud::FlavorName(n.flavor), n.action, deadline - wall, strsignal(notice_sig));
      notice_wall_ = wall;
      notice_deadline_ = deadline;
      WriteNotice(deadline, n.action, std::string(cloud::FlavorName(n.flavor)));
      (void)kv_->Put(Key(g.number, "notice"),
                     nlohmann::json{{"id", args_.id}, {"deadline_unix_s", deadline}}.dump());
      noticed_ = true;
      kill_at = -1;  // SIGKILL only with the machine
      SignalRanks(notice_sig);
    }
    if (now >= next_gang_check) {
      next_gang_check = now + kGangCheckS;
      if (!noticed_ && !peer_noticed_) {
        // A peer's notice: this node's ranks save and stop too (a
        // data-parallel step needs every rank), then start again without it.
        auto peer = kv_->Get(Key(g.number, "notice"));
        auto j = peer.ok() && peer->has_value() ? nlohmann::json::parse(**peer, nullptr, false)
                                                : nlohmann::json();
        if (j.is_object() && j.value("id", "") != args_.id) {
          const double left = j.value("deadline_unix_s", 0.0) - clock->NowUnixS();
          spdlog::warn("node {} got a termination notice ({:.1f} s left); {} to the program",
                       j.value("id", ""), left, strsignal(notice_sig));
          peer_noticed_ = true;
          SignalRanks(notice_sig);
          // Ranks stuck in a collective with the leaving node are killed
          // once it has gone.
          kill_at = now + std::max(0.0, left) + spec_.stop_grace_s;
        }
      }
      if (!gang_changed && !stop_ && !noticed_ && !peer_noticed_) {
        auto reform = rdzv_->ShouldReform(g.number);
        if ((reform.ok() && *reform) || PeerLost(g)) {
          gang_changed = true;
          stop_ranks(notice_sig, "the gang changed");
        }
      }
    }
    // One rank failing fails the program: the others are stopped.
    if (!failed && !stop_ && !gang_changed && !noticed_ && !peer_noticed_) {
      for (const Rank& r : ranks_) {
        if (!r.running && r.code != 0) failed = true;
      }
      if (failed) stop_ranks(SIGTERM, fmt::format("a rank exited with {}", FirstFailure()).c_str());
    }
    if (kill_at >= 0 && now >= kill_at) {
      spdlog::warn("the program did not stop in {} s: SIGKILL", spec_.stop_grace_s);
      SignalRanks(SIGKILL);
      kill_at = now + 3600;  // once
    }
    clock->SleepFor(kTickS);
  }
  if (metrics_) metrics_->SetRanksRunning(0);
  if (stop_ || noticed_) return Ended::kStopped;
  if (gang_changed || peer_noticed_) return Ended::kGangChanged;
  if (FirstFailure() == 0) return Ended::kFinished;
  // A failure may be a peer's loss seen first by the program (a collective
  // broke): give the rendezvous a liveness period to tell.
  const double until = clock->MonotonicS() + spec_.liveness_ttl_s + 0.5;
  while (clock->MonotonicS() < until) {
    if (PeerLost(g)) return Ended::kGangChanged;
    clock->SleepFor(kGangCheckS);
  }
  return Ended::kFailed;
}

int Agent::Run() {
  std::error_code ec;
  fs::create_directories(args_.local_dir, ec);
  fs::remove(fs::path(args_.local_dir) / "notice.json", ec);
  const milliseconds ttl(static_cast<int64_t>(spec_.liveness_ttl_s * 1000));
  auto backend = dist::OpenRendezvous(args_.rendezvous, spec_.job, ttl, std::chrono::seconds(20));
  if (!backend.ok()) {
    fmt::print(stderr, "error: {}\n", backend.status().message());
    return ExitCodeFor(backend.status());
  }
  kv_ = backend->kv;
  if (metrics_) PublishMetricsAddress(*kv_, spec_.job, args_.id, host_, metrics_->port());
  rdzv_ = std::make_unique<dist::Rendezvous>(
      kv_.get(),
      dist::RendezvousOptions{
          .job = spec_.job + "/agent",
          .min_workers = spec_.min_nodes,
          .max_workers = spec_.max_nodes,
          .timeout = std::chrono::hours(24),
          .poll = milliseconds(20),
          .cancelled =
              [this] { return NoticedWithoutProgram() || stop_ || (stop_ = TakeStopSignal()); }},
      args_.id);
  std::unique_ptr<cloud::TerminationWatcher> watcher;
  if (args_.watch != "none") {
    auto source = cloud::NoticeSourceFromEnv(args_.watch);
    if (source.ok()) {
      watcher = std::make_unique<cloud::TerminationWatcher>(
          std::move(source).value(), args_.notice_poll_s,
          [this](const cloud::Notice& n) { OnNotice(n); });
    } else if (args_.watch != "auto" || source.status().code() != StatusCode::kNotFound) {
      fmt::print(stderr, "error: --watch {}: {}\n", args_.watch, source.status().message());
      return ExitCodeFor(source.status());
    }
  }
  if (Status st = RunSetup(); !st.ok()) {
    if (NoticedWithoutProgram()) return LeaveOnNotice("during setup");
    fmt::print(stderr, "error: {}\n", st.message());
    (void)rdzv_->Leave();
    return st.code() == StatusCode::kAborted ? kExitOk : kExitFailure;
  }
  while (true) {
    auto g = rdzv_->Join({.id = args_.id});
    if (NoticedWithoutProgram()) return LeaveOnNotice("while waiting for the gang");
    if (!g.ok()) {
      (void)rdzv_->Leave();
      if (g.status().code() == StatusCode::kAborted) return kExitOk;  // stopped while waiting
      fmt::print(stderr, "error: rendezvous: {}\n", g.status().message());
      return kExitFailure;
    }
    auto master = MasterAddress(*g);
    if (NoticedWithoutProgram()) return LeaveOnNotice("while waiting for rank 0's address");
    if (!master.ok()) {
      if (stop_) return kExitOk;
      spdlog::warn("{}; joining again", master.status().message());
      continue;
    }
    if (Status st = StartRanks(*g, *master); !st.ok()) {
      fmt::print(stderr, "error: starting the program: {}\n", st.message());
      (void)rdzv_->Leave();
      return kExitFailure;
    }
    switch (Supervise(*g)) {
      case Ended::kFinished:
        spdlog::info("the program finished on every rank of this node");
        (void)kv_->Put(Key(g->number, "finished/" + args_.id), "1");
        (void)rdzv_->Leave();
        return kExitOk;
      case Ended::kStopped: {
        const int code = FirstFailure();
        if (noticed_) {
          const double after = RealClock()->NowUnixS() - notice_wall_;
          spdlog::info(
              "notice: the program stopped {:.3f} s after the notice ({:.1f} s before "
              "the deadline)",
              after, notice_deadline_ - RealClock()->NowUnixS());
        }
        spdlog::info("the program stopped ({})", code == 0
                                                     ? std::string("every rank exited 0")
                                                     : fmt::format("a rank exited with {}", code));
        (void)rdzv_->Leave();
        return code;
      }
      case Ended::kFailed: {
        const int code = FirstFailure();
        // Not an "error:" line of ours: the program's own last one is what
        // the controller quotes.
        spdlog::warn("the program failed: a rank exited with {}", code);
        (void)rdzv_->Leave();
        return code;
      }
      case Ended::kGangChanged:
        ++restarts_;
        if (metrics_) metrics_->CountRestart();
        spdlog::info("the gang changed; restarting the program (restart {})", restarts_);
        break;
    }
  }
}

}  // namespace

int RunAgentCommand(const AgentArgs& args) {
  auto text = ReadSpecFile(args.spec_path);
  if (!text.ok()) {
    fmt::print(stderr, "error: {}\n", text.status().message());
    return ExitCodeFor(text.status());
  }
  auto spec = ParseAgentSpec(*text, args.spec_path);
  if (!spec.ok()) {
    fmt::print(stderr, "error: {}\n", spec.status().message());
    return ExitCodeFor(spec.status());
  }
  SetLogContext({{"job", spec->job}, {"role", std::string("agent")}, {"instance", args.id}});
  SetTextLogPattern(fmt::format("[%H:%M:%S.%e] [agent {}] [%^%l%$] %v", args.id));
  // Signals are taken by the loop (sigtimedwait): blocked before any thread
  // starts (the metrics server's, the notice watcher's).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // see PollRanks; and orphans' CPU time is counted
  // Where this node is reached from the rendezvous host's network (the
  // controller's scrapes, the other nodes' ranks).
  auto host = AddressTowardRendezvous(args.rendezvous);
  if (!host.ok()) {
    fmt::print(stderr, "error: {}\n", host.status().message());
    return ExitCodeFor(host.status());
  }
  std::unique_ptr<AgentMetrics> metrics;
  if (args.metrics_port > 0) {
    const int cpus = args.cpus > 0 ? args.cpus : NodeCpus(*spec, args);
    auto started =
        StartOnPortOrAnother<std::unique_ptr<AgentMetrics>>(args.metrics_port, [&](int port) {
          return AgentMetrics::Start(
              {.job = spec->job, .instance = args.id, .port = port, .host = *host, .cpus = cpus});
        });
    if (!started.ok()) {
      fmt::print(stderr, "error: --metrics-port {}: {}\n", args.metrics_port,
                 started.status().message());
      return ExitCodeFor(started.status());
    }
    metrics = std::move(started).value();
    spdlog::info("metrics on port {} (busy time over {} CPUs)", metrics->port(), cpus);
  }
  return Agent(std::move(spec).value(), args, metrics.get(), *host).Run();
}

}  // namespace spot::cli
