#include "apps/spot/agent_metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "core/net.h"
#include "core/process_cpu.h"
#include "monitor/metrics.h"
#include "monitor/metrics_server.h"

namespace spot::cli {

namespace pm = prometheus;

struct AgentMetrics::Impl {
  AgentMetricsOptions o;
  std::shared_ptr<pm::Registry> registry = std::make_shared<pm::Registry>();
  pm::Counter* compute = nullptr;
  pm::Gauge* ranks = nullptr;
  pm::Counter* restarts = nullptr;
  // Read on the server's thread only (before_collect never overlaps itself).
  std::optional<ProcessTreeCpu> cpu;
  double counted_s = 0;  // CPU seconds already in `compute`
  bool warned = false;
  std::unique_ptr<monitor::MetricsServer> server;  // last: stops before the rest goes

  void Build() {
    const pm::Labels labels = {{"job_id", o.job}, {"worker_id", o.instance}};
    compute =
        &monitor::AddCounter(*registry, "spot_train_compute_seconds_total",
                             "CPU seconds (user + system) of the program's processes, ended ones "
                             "included, over the CPUs its ranks may use (busy time)")
             .Add(labels);
    ranks = &monitor::AddGauge(*registry, "spot_agent_ranks_running",
                               "Ranks of the program running on this instance")
                 .Add(labels);
    restarts = &monitor::AddCounter(*registry, "spot_agent_program_restarts_total",
                                    "Times the agent restarted the program because the gang "
                                    "changed (a node lost or joining)")
                    .Add(labels);
  }

  // A scrape: the CPU counter catches up with /proc. A sample that fails
  // (a damaged /proc line) leaves the counter where it was.
  void Collect() {
    auto s = cpu->Sample();
    if (!s.ok()) {
      if (!warned) spdlog::warn("CPU time of the program: {}", s.status().message());
      warned = true;
      return;
    }
    if (*s > counted_s) compute->Increment((*s - counted_s) / o.cpus);
    counted_s = std::max(counted_s, *s);
  }
};

AgentMetrics::AgentMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AgentMetrics::~AgentMetrics() = default;

Result<std::unique_ptr<AgentMetrics>> AgentMetrics::Start(const AgentMetricsOptions& options) {
  if (options.cpus < 1) {
    return InvalidArgumentError(fmt::format("cpus must be >= 1 (got {})", options.cpus));
  }
  if (options.port < 1 || options.port > 65535) {
    return InvalidArgumentError(fmt::format("port must be in [1, 65535] (got {})", options.port));
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->Build();
  SPOT_ASSIGN_OR_RETURN(ProcessTreeCpu cpu, ProcessTreeCpu::Open({}));
  impl->cpu.emplace(std::move(cpu));
  Impl* m = impl.get();
  SPOT_ASSIGN_OR_RETURN(
      impl->server, monitor::MetricsServer::Start(
                        impl->registry, {.host = options.host,
                                         .reachable_from_network = !IsLoopbackHost(options.host),
                                         .port = options.port,
                                         .before_collect = [m] { m->Collect(); }}));
  return std::unique_ptr<AgentMetrics>(new AgentMetrics(std::move(impl)));
}

void AgentMetrics::SetRanksRunning(int n) { impl_->ranks->Set(n); }
void AgentMetrics::CountRestart() { impl_->restarts->Increment(); }
int AgentMetrics::port() const { return impl_->server->port(); }

}  // namespace spot::cli
