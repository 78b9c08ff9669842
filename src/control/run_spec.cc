#include "control/run_spec.h"

namespace spot::control {

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
  r.Double("changeover_hours", &s.resources.changeover_hours, {.min = 0});
  if (s.resources.min_nodes > s.resources.nodes) {
    r.AddError("min_nodes", "must be <= nodes (" + std::to_string(s.resources.nodes) + ")");
  }

  SpecReader& m = top.Section("market");
  m.StringList("traces", &s.market.traces);
  m.String("prices", &s.market.prices);
  m.Enum("when_missing", &s.market.when_missing, {"synthetic", "error"});
  m.Int("synthetic_seed", &s.market.synthetic_seed, {.min = 0});
  m.Int("start_tick", &s.market.start_tick, {.min = 0});
  m.Double("time_compression", &s.market.time_compression, {.min = 0, .min_exclusive = true});
  m.Double("notice_seconds", &s.market.notice_seconds, {.min = 0, .max = 3600});
  m.Enum("metadata", &s.market.metadata, {"aws", "gcp", "azure"});
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
  c.Double("reconcile_interval_s", &s.controller.reconcile_interval_s, {.min = 0.005, .max = 10});
  c.Double("terminate_grace_s", &s.controller.terminate_grace_s, {.min = 0, .max = 600});
  c.Double("unreachable_after_s", &s.controller.unreachable_after_s, {.min = 1, .max = 3600});
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
