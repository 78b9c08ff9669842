#include "control/run_spec.h"

#include <signal.h>

#include <cctype>

#include "core/number_text.h"

namespace spot::control {

int NoticeSignalNumber(const std::string& name) {
  static const std::pair<const char*, int> kSignals[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGUSR1", SIGUSR1},
      {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP}, {"SIGQUIT", SIGQUIT}};
  for (const auto& [n, v] : kSignals) {
    if (name == n) return v;
  }
  return 0;
}

namespace {

// The command workload's fields: `run`, `setup`, `workdir`, `envs`,
// `output_dir`, `checkpoint_dir` at the top, `resources.nproc_per_node`, and
// the `job_recovery` section.
void ReadCommandFields(SpecReader& top, SpecReader& resources, RunSpec* s) {
  CommandSpec& c = s->command;
  top.String("run", &c.run);
  if (top.Has("run") && c.run.find_first_not_of(" \t\n") == std::string::npos) {
    top.AddError("run", "must be a command line (got an empty one)");
  }
  top.String("setup", &c.setup);
  top.String("workdir", &c.workdir);
  top.String("output_dir", &c.output_dir);
  top.String("checkpoint_dir", &c.checkpoint_dir);
  SpecReader& envs = top.Section("envs");
  for (const std::string& key : envs.Keys()) {
    const bool valid_name =
        !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
        key.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
            std::string::npos;
    std::string value;
    envs.String(key, &value, /*required=*/true);
    if (!valid_name) {
      envs.AddError(key, "is not an environment variable name (letters, digits, '_')");
    } else if (key.rfind("SPOT_", 0) == 0) {
      envs.AddError(key, "SPOT_ variables are set by SpotTrain itself");
    }
    c.envs.emplace_back(key, value);
  }
  resources.Int("nproc_per_node", &c.nproc_per_node, {.min = 1, .max = 64});
  SpecReader& r = top.Section("job_recovery");
  r.Int("max_restarts_on_errors", &c.max_restarts_on_errors, {.min = 0, .max = 1000});
  std::vector<std::string> codes;
  r.StringList("recover_on_exit_codes", &codes);
  for (const std::string& text : codes) {
    auto code = ParseInteger(text);
    if (!code.ok() || *code < 1 || *code > 255) {
      r.AddError("recover_on_exit_codes",
                 "each must be an exit code in [1, 255] (got '" + text + "')");
      continue;
    }
    c.recover_on_exit_codes.push_back(*code);
  }
  r.String("notice_signal", &c.notice_signal);
  if (NoticeSignalNumber(c.notice_signal) == 0) {
    r.AddError("notice_signal",
               "must be one of SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT (got '" +
                   c.notice_signal + "')");
  }
  r.Double("silence_seconds", &c.silence_seconds, {.min = 0, .max = 86400});
  // The command's fields mean nothing without a command.
  if (!c.enabled()) {
    for (const char* key : {"setup", "workdir", "envs", "checkpoint_dir", "job_recovery"}) {
      if (top.Has(key))
        top.AddError(key, "belongs to a command workload (`run:`), which this job is not");
    }
    if (resources.Has("nproc_per_node")) {
      resources.AddError("nproc_per_node",
                         "belongs to a command workload (`run:`), which this job is not");
    }
  }
}

}  // namespace

void ReadRunSpecFields(SpecReader& top, RunSpec* out) {
  RunSpec& s = *out;
  s.source = top.file();
  top.String("name", &s.name, /*required=*/true);
  // The name is a directory (runs/<name>) and part of the API's URLs.
  if (top.Has("name") && (s.name.empty() || s.name == "." || s.name == ".." ||
                          s.name.find_first_of("/\\ \t\n") != std::string::npos)) {
    top.AddError("name",
                 "must be a non-empty name without '/', '\\' or spaces (got '" + s.name + "')");
  }
  ReadComponent(top, "policy", &s.policy);
  ReadComponent(top, "provider", &s.provider);
  top.Double("compute_hours", &s.compute_hours, {.min = 0, .min_exclusive = true});
  top.Double("deadline_hours", &s.deadline_hours, {.min = 0, .min_exclusive = true});
  top.Double("budget_usd", &s.budget_usd, {.min = 0});
  if (s.deadline_hours < s.compute_hours) {
    top.AddError("deadline_hours",
                 "must be >= compute_hours (" + std::to_string(s.compute_hours) + ")");
  }

  SpecReader& r = top.Section("resources");
  r.String("instance_type", &s.resources.instance_type);
  r.String("region", &s.resources.region);
  r.StringList("zones", &s.resources.zones);
  r.Int("nodes", &s.resources.nodes, {.min = 1, .max = 64});
  r.Int("min_nodes", &s.resources.min_nodes, {.min = 1, .max = 64});
  r.Double("ondemand_price", &s.resources.ondemand_price, {.min = 0, .min_exclusive = true});
  s.resources.ondemand_price_given = r.Has("ondemand_price");
  r.Double("changeover_hours", &s.resources.changeover_hours, {.min = 0});
  if (s.resources.min_nodes > s.resources.nodes) {
    r.AddError("min_nodes", "must be <= nodes (" + std::to_string(s.resources.nodes) + ")");
  }

  ReadCommandFields(top, r, &s);

  SpecReader& m = top.Section("market");
  m.StringList("traces", &s.market.traces);
  m.Enum("trace_convention", &s.market.trace_convention, {"auto", "available", "preempted"});
  m.String("prices", &s.market.prices);
  m.Enum("when_missing", &s.market.when_missing, {"synthetic", "error"});
  m.Int("synthetic_seed", &s.market.synthetic_seed, {.min = 0});
  m.Int("start_tick", &s.market.start_tick, {.min = 0});
  m.Double("time_compression", &s.market.time_compression, {.min = 0, .min_exclusive = true});
  m.Double("notice_seconds", &s.market.notice_seconds, {.min = 0, .max = 3600});
  m.Enum("metadata", &s.market.metadata, {"aws", "gcp", "azure", "none"});
  std::string scale = "auto";
  m.String("capacity_scale", &scale);
  if (scale != "auto" && scale.find_first_of("0123456789") == std::string::npos) {
    m.AddError("capacity_scale", "must be auto or an integer in [1, " +
                                     std::to_string(kMaxCapacityScale) + "] (got '" + scale + "')");
  } else if (scale != "auto") {  // a number: parsed once, with its bounds
    m.Int("capacity_scale", &s.market.capacity_scale, {.min = 1, .max = kMaxCapacityScale});
  }

  SpecReader& c = top.Section("controller");
  c.String("state_dir", &s.controller.state_dir);
  c.Int("api_port", &s.controller.api_port, {.min = 0, .max = 65535});
  c.String("advertise_host", &s.controller.advertise_host);
  if (s.controller.advertise_host.empty() ||
      s.controller.advertise_host.find_first_of(" \t/:@[]") != std::string::npos) {
    c.AddError("advertise_host", "expected a host name or an IPv4 address (got '" +
                                     s.controller.advertise_host + "')");
  }
  c.String("rendezvous", &s.controller.rendezvous);  // checked by `spot run` (dist/c10d_stores.h)
  c.Double("reconcile_interval_s", &s.controller.reconcile_interval_s, {.min = 0.005, .max = 10});
  c.Double("terminate_grace_s", &s.controller.terminate_grace_s, {.min = 0, .max = 600});
  c.Double("unreachable_after_s", &s.controller.unreachable_after_s, {.min = 1, .max = 3600});
  c.Double("provider_outage_s", &s.controller.provider_outage_s, {.min = 1, .max = 7 * 86400});
  c.Double("handover_timeout_s", &s.controller.handover_timeout_s, {.min = 0, .max = 86400});
  c.Bool("replace_stragglers", &s.controller.replace_stragglers);
}

policy::JobSpec ToPolicyJob(const RunSpec& spec) {
  return {.compute_hours = spec.compute_hours,
          .deadline_hours = spec.deadline_hours,
          .changeover_hours = spec.resources.changeover_hours,
          .nodes = static_cast<int>(spec.resources.nodes),
          .ondemand_price = spec.resources.ondemand_price,
          .min_nodes = static_cast<int>(spec.resources.min_nodes)};
}

}  // namespace spot::control
