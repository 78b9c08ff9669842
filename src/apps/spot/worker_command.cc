// `spot worker` and `spot rendezvous`.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "apps/spot/commands.h"
#include "apps/spot/exit_code.h"
#include "apps/spot/port_retry.h"
#include "apps/spot/worker_monitor.h"
#include "cloud/termination_watcher.h"
#include "control/job_monitor.h"
#include "core/clock.h"
#include "core/file_io.h"
#include "core/logging.h"
#include "core/net.h"
#include "core/process.h"
#include "dist/c10d_stores.h"
#include "dist/elastic_trainer.h"
#include "monitor/chrome_trace.h"
#include "train/train_spec.h"

namespace spot::cli {
namespace {

std::atomic<int> g_signal_while_probing{0};
extern "C" void OnSignalWhileProbing(int sig) { g_signal_while_probing.store(sig); }

// Checks that the rendezvous answers as one before anything blocks on it,
// for up to the job's rendezvous_timeout_s, ending at once on SIGTERM or
// SIGINT meanwhile. Returns the exit code when the worker must stop.
std::optional<int> CheckRendezvous(const std::string& url, double timeout_s, const std::string& job,
                                   const std::string& tag) {
  struct sigaction sa {
  }, old_term{}, old_int{};
  sa.sa_handler = OnSignalWhileProbing;
  sigemptyset(&sa.sa_mask);
  g_signal_while_probing = 0;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  Status probed =
      dist::ProbeRendezvous(url, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                            [] { return g_signal_while_probing.load() != 0; });
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  if (int sig = g_signal_while_probing.load(); sig != 0) {
    fmt::print(stderr, "{}: {} stopped by {} while waiting for rendezvous {}\n", job, tag,
               strsignal(sig), url);
    return 128 + sig;
  }
  if (!probed.ok()) {
    fmt::print(stderr, "error: {}\n", probed.message());
    return ExitCodeFor(probed);
  }
  return std::nullopt;
}

}  // namespace

// Where the other workers of a job spread over machines reach this one, and
// the controller scrapes it (a worker on the rendezvous host itself:
// 127.0.0.1 for a rendezvous on loopback).
Result<std::string> AddressTowardRendezvous(const std::string& url) {
  SPOT_ASSIGN_OR_RETURN(dist::Endpoint e, dist::ParseRendezvousUrl(url));
  std::string host = e.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(e.port).c_str(), &hints, &found); rc != 0) {
    return UnavailableError(fmt::format("rendezvous host {}: {}", host, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  const bool routed = connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  close(fd);
  if (!routed) {
    return UnavailableError(
        fmt::format("no address of this machine reaches the rendezvous host "
                    "{}: {} (give --host)",
                    host, std::strerror(err)));
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  if (inet_ntop(local.ss_family, addr, text, sizeof(text)) == nullptr) {
    return UnavailableError(fmt::format("inet_ntop: {}", std::strerror(errno)));
  }
  return std::string(text);
}

void PublishMetricsAddress(dist::KvStore& kv, const std::string& job, const std::string& instance,
                           const std::string& host, int port) {
  const std::string at = HostPort(host, port);
  spdlog::info("metrics at http://{}/metrics", at);
  if (Status st = kv.Put(control::MetricsAddressKey(job, instance), at); !st.ok()) {
    spdlog::warn("publishing the metrics address {}: {}", at, st.message());
  }
}

CLI::App* AddWorkerCommand(CLI::App& app, WorkerArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "worker",
      "Run one elastic data-parallel worker of a job: join its rendezvous, train with the "
      "other workers, keep going as workers leave or arrive.");
  cmd->add_option("job", args->job_path, "Job file (YAML); see docs/job-spec.md")->required();
  cmd->add_option("--rendezvous", args->rendezvous,
                  "tcp://HOST:PORT (a store hosted by `spot rendezvous` or `spot train --nproc`) "
                  "or etcd://HOST:PORT[,HOST:PORT...] (etcd's client address, or every member's)")
      ->required();
  cmd->add_option("--id", args->id, "Unique worker id (default: <hostname>-<pid>-<random>)");
  cmd->add_option("--host", args->host,
                  "Address the other workers reach this one at (default: this machine's "
                  "address toward the rendezvous host, 127.0.0.1 for a rendezvous on loopback)");
  cmd->add_option("--threads", args->threads, "Intra-op threads (overrides the job's threads)")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--step-log", args->step_log,
                  "Append step,epoch,loss,lr per committed step (when this worker is rank 0)");
  cmd->add_option("--sample-log", args->sample_log,
                  "Append, per committed step, the global batch and this worker's part of it");
  cmd->add_option("--event-log", args->event_log, "Append one JSON line per generation");
  cmd->add_option("--slowdown", args->slowdown,
                  "Sleep this multiple of each step's compute time (emulates a slower machine)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--progress-file", args->progress_file,
                  "Rank 0 keeps this JSON file up to date (step, total_steps, loss, done, ...)");
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "This machine's checkpoint tier (overrides the job's checkpoint.dir)");
  cmd->add_option("--watch", args->watch,
                  "Termination notices to watch for: none, auto (the cloud whose metadata "
                  "variable is set: AWS_EC2_METADATA_SERVICE_ENDPOINT, GCE_METADATA_HOST, "
                  "SPOT_AZURE_METADATA_ENDPOINT), aws, gcp or azure")
      ->check(CLI::IsMember({"none", "auto", "aws", "gcp", "azure"}))
      ->capture_default_str();
  cmd->add_option("--notice-poll", args->notice_poll_s, "Seconds between metadata polls")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  cmd->add_option("--metrics-port", args->metrics_port,
                  "Serve Prometheus metrics at http://HOST:PORT/metrics, HOST the --host "
                  "address (0: any free port); published in the rendezvous")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--tensorboard", args->tensorboard,
                  "Write TensorBoard event files (loss, learning rate, gradient norm, "
                  "throughput, accuracy) into this run directory while this worker is rank 0");
  cmd->add_flag("--plain", args->plain_progress, "Periodic log lines, never a progress bar");
  cmd->add_option("--log-interval", args->log_interval_s, "Seconds between progress lines")
      ->check(CLI::PositiveNumber);
  return cmd;
}

int RunWorkerCommand(const WorkerArgs& args) {
  // Gloo writes to its peers with writev, which raises SIGPIPE when a peer
  // died (a SIGKILL, a reclaimed machine): the survivors must see the error
  // and re-form, not be ended by the signal.
  IgnoreBrokenPipes();
  auto spec = train::LoadTrainSpec(args.job_path);
  if (!spec.ok()) {
    fmt::print(stderr, "error: {}\n", spec.status().message());
    return ExitCodeFor(spec.status());
  }
  if (args.threads > 0) spec->threads = args.threads;
  if (!args.checkpoint_dir.empty()) spec->checkpoint.dir = args.checkpoint_dir;
  std::string tag = args.id.empty() ? fmt::format("worker {}", ::getpid()) : args.id;
  SetLogContext({{"job", spec->name}, {"role", std::string("worker")}, {"instance", tag}});
  SetTextLogPattern(fmt::format("[%H:%M:%S.%e] [{}] [%^%l%$] %v", tag));
  if (auto stop = CheckRendezvous(args.rendezvous, spec->distributed.rendezvous_timeout_s,
                                  spec->name, tag)) {
    return *stop;
  }
  std::string host = args.host;
  if (host.empty()) {
    auto toward = AddressTowardRendezvous(args.rendezvous);
    if (!toward.ok()) {
      fmt::print(stderr, "error: {}\n", toward.status().message());
      return ExitCodeFor(toward.status());
    }
    host = *toward;
  }
  // The termination watcher: a notice stops the worker as SIGTERM would, with
  // the notice's time as the deadline for the checkpoint.
  std::unique_ptr<cloud::TerminationWatcher> watcher;
  if (args.watch != "none") {
    auto source = cloud::NoticeSourceFromEnv(args.watch);
    if (source.ok()) {
      spdlog::info("watching {} termination notices at {}", cloud::FlavorName((*source)->flavor()),
                   (*source)->endpoint());
      watcher = std::make_unique<cloud::TerminationWatcher>(
          std::move(source).value(), args.notice_poll_s, [](const cloud::Notice& n) {
            const double now = RealClock()->NowUnixS();
            // GCP gives no time: its documented budget is 30 s.
            const double deadline = n.time_unix_s > 0 ? n.time_unix_s : now + 30;
            spdlog::warn("termination notice ({} {}): {:.1f} s left; saving and leaving",
                         cloud::FlavorName(n.flavor), n.action, deadline - now);
            dist::RequestWorkerStop(deadline);
          });
    } else if (args.watch != "auto" || source.status().code() != StatusCode::kNotFound) {
      fmt::print(stderr, "error: --watch {}: {}\n", args.watch, source.status().message());
      return ExitCodeFor(source.status());
    }
  }
  auto monitor =
      StartOnPortOrAnother<std::unique_ptr<WorkerMonitor>>(args.metrics_port, [&](int port) {
        return WorkerMonitor::Start({.job_id = spec->name,
                                     .worker_id = tag,
                                     .metrics_port = port,
                                     .metrics_host = host,
                                     .tensorboard_dir = args.tensorboard,
                                     .trace_path = monitor::TracePathFor(spec->output_dir, tag)});
      });
  if (!monitor.ok()) {
    fmt::print(stderr, "error: --metrics-port {}: {}\n", args.metrics_port,
               monitor.status().message());
    return ExitCodeFor(monitor.status());
  }
  if ((*monitor)->metrics_port() > 0) {
    // Where the controller scrapes it: published in the job's rendezvous.
    auto rdzv = dist::OpenRendezvous(args.rendezvous, spec->name, std::chrono::seconds(3),
                                     std::chrono::seconds(20));
    if (rdzv.ok()) {
      PublishMetricsAddress(*rdzv->kv, spec->name, tag, host, (*monitor)->metrics_port());
    } else {
      spdlog::warn("publishing the metrics address: {}", rdzv.status().message());
    }
  }
  auto summary = dist::RunWorker(*spec, {.rendezvous = args.rendezvous,
                                         .id = args.id,
                                         .host = host,
                                         .step_log_path = args.step_log,
                                         .sample_log_path = args.sample_log,
                                         .event_log_path = args.event_log,
                                         .plain_progress = args.plain_progress,
                                         .log_interval_s = args.log_interval_s,
                                         .handle_signals = true,
                                         .progress_path = args.progress_file,
                                         .slowdown = args.slowdown,
                                         .observer = (*monitor)->Observer()});
  if (!summary.ok()) {
    fmt::print(stderr, "error: {}\n", summary.status().message());
    return ExitCodeFor(summary.status());
  }
  const dist::WorkerSummary& s = *summary;
  if (s.stopped_by_request) {
    fmt::print(
        "{}: {} stopped by a termination notice at step {} and left the group{}\n", spec->name, tag,
        s.steps,
        s.stop_flush_seconds >= 0
            ? fmt::format(" (checkpoint flushed {:.3f} s after the notice)", s.stop_flush_seconds)
            : "");
    return kExitOk;
  }
  if (s.stopped_by_signal != 0) {
    fmt::print("{}: {} stopped by {} at step {} and left the group\n", spec->name, tag,
               strsignal(s.stopped_by_signal), s.steps);
    return 128 + s.stopped_by_signal;
  }
  fmt::print(
      "{}: {} done at step {} (took part in {} steps, {} generations, {} abandoned); "
      "rank {} of {}; test accuracy {:.2f}%; {:.0f} samples/s; {:.1f} MB of gradients "
      "sent{}\n",
      spec->name, tag, s.steps, s.steps_here, s.generations, s.abandoned_steps, s.final_rank,
      s.final_world, s.test_accuracy * 100, s.samples_per_s, s.bytes_sent / 1e6,
      s.shards > 0 ? fmt::format("; data shards: {} of {} held, {} loaded as its own, {} on demand",
                                 s.shards_held, s.shards, s.shards_loaded, s.shards_on_demand)
                   : "");
  return kExitOk;
}

CLI::App* AddRendezvousCommand(CLI::App& app, RendezvousArgs* args) {
  CLI::App* cmd =
      app.add_subcommand("rendezvous",
                         "Host a rendezvous store (c10d TCPStore) for `spot worker --rendezvous "
                         "tcp://HOST:PORT` until SIGTERM or SIGINT.");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--port-file", args->port_file,
                  "Write the port listened on to this file once listening (with --port 0: "
                  "how a starter learns the port)");
  return cmd;
}

int RunRendezvous(const RendezvousArgs& args) {
  SetLogContext("role", std::string("rendezvous"));
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the store starts its threads
  auto store = dist::HostTcpStore(args.host, args.port, std::chrono::seconds(30));
  if (!store.ok()) {
    fmt::print(stderr, "error: {}\n", store.status().message());
    return kExitFailure;
  }
  const int port = (*store)->getPort();
  if (!args.port_file.empty()) {
    if (Status st = WriteFileAtomically(args.port_file, fmt::format("{}\n", port)); !st.ok()) {
      fmt::print(stderr, "error: --port-file: {}\n", st.message());
      return kExitFailure;
    }
  }
  const std::string listening =
      fmt::format("rendezvous store listening on tcp://{}:{}", args.host, port);
  // To a log file (JSON) as a log line; to a person as it always was.
  const bool json = StderrLogFormat() == LogFormat::kJson;
  if (json) {
    spdlog::info("{}", listening);
  } else {
    fmt::print("{}\n", listening);
    std::fflush(stdout);
  }
  int sig = 0;
  sigwait(&set, &sig);
  if (json) spdlog::info("rendezvous store stopped ({})", strsignal(sig));
  return kExitOk;
}

}  // namespace spot::cli
