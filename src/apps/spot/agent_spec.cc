#include "apps/spot/agent_spec.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/strict_json.h"

namespace spot::cli {

using nlohmann::json;

std::string AgentSpecJson(const AgentSpec& s) {
  json envs = json::object();
  for (const auto& [k, v] : s.envs) envs[k] = v;
  return json{{"job", s.job},
              {"run", s.run},
              {"setup", s.setup},
              {"workdir", s.workdir},
              {"envs", envs},
              {"checkpoint_dir", s.checkpoint_dir},
              {"nproc_per_node", s.nproc_per_node},
              {"notice_signal", s.notice_signal},
              {"min_nodes", s.min_nodes},
              {"max_nodes", s.max_nodes},
              {"liveness_ttl_s", s.liveness_ttl_s},
              {"stop_grace_s", s.stop_grace_s},
              {"token_file", s.token_file}}
             .dump(2) +
         "\n";
}

Result<AgentSpec> ParseAgentSpec(const std::string& text, const std::string& file) {
  SPOT_ASSIGN_OR_RETURN(json j, ParseStrictJson(text, file));
  if (!j.is_object()) return InvalidArgumentError(file + ": expected a JSON object");
  AgentSpec s;
  auto bad = [&](const char* field, const char* want) {
    return InvalidArgumentError(fmt::format("{}: {}: expected {}", file, field, want));
  };
  auto str = [&](const char* field, std::string* out, bool required) -> Status {
    if (!j.contains(field)) {
      return required ? bad(field, "a string (it is missing)") : Status::Ok();
    }
    if (!j[field].is_string()) return bad(field, "a string");
    *out = j[field].get<std::string>();
    return Status::Ok();
  };
  auto integer = [&](const char* field, int* out, int lo, int hi) -> Status {
    if (!j.contains(field)) return Status::Ok();
    const json& v = j[field];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      return bad(field, fmt::format("an integer in [{}, {}]", lo, hi).c_str());
    }
    *out = static_cast<int>(v.get<int64_t>());
    return Status::Ok();
  };
  auto number = [&](const char* field, double* out, double lo, double hi) -> Status {
    if (!j.contains(field)) return Status::Ok();
    const json& v = j[field];
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
      return bad(field, fmt::format("a number in [{}, {}]", lo, hi).c_str());
    }
    *out = v.get<double>();
    return Status::Ok();
  };
  SPOT_RETURN_IF_ERROR(str("job", &s.job, true));
  SPOT_RETURN_IF_ERROR(str("run", &s.run, true));
  SPOT_RETURN_IF_ERROR(str("setup", &s.setup, false));
  SPOT_RETURN_IF_ERROR(str("workdir", &s.workdir, true));
  SPOT_RETURN_IF_ERROR(str("checkpoint_dir", &s.checkpoint_dir, true));
  SPOT_RETURN_IF_ERROR(str("notice_signal", &s.notice_signal, false));
  SPOT_RETURN_IF_ERROR(str("token_file", &s.token_file, false));
  SPOT_RETURN_IF_ERROR(integer("nproc_per_node", &s.nproc_per_node, 1, 64));
  SPOT_RETURN_IF_ERROR(integer("min_nodes", &s.min_nodes, 1, 64));
  SPOT_RETURN_IF_ERROR(integer("max_nodes", &s.max_nodes, 1, 64));
  SPOT_RETURN_IF_ERROR(number("liveness_ttl_s", &s.liveness_ttl_s, 0.1, 3600));
  SPOT_RETURN_IF_ERROR(number("stop_grace_s", &s.stop_grace_s, 0, 3600));
  if (j.contains("envs")) {
    if (!j["envs"].is_object()) return bad("envs", "an object of strings");
    for (const auto& [k, v] : j["envs"].items()) {
      if (!v.is_string()) return bad("envs", "an object of strings");
      s.envs.emplace_back(k, v.get<std::string>());
    }
  }
  if (s.run.empty()) return bad("run", "a command line");
  if (s.min_nodes > s.max_nodes) return bad("min_nodes", "at most max_nodes");
  return s;
}

}  // namespace spot::cli
