#include "cloud/bootstrap.h"

#include <utility>

namespace spot::cloud {

std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Result<std::string> RenderBootstrap(const BootstrapSpec& s) {
  if (s.argv.empty()) return InvalidArgumentError("bootstrap: the worker command is empty");
  if (s.local_dir.empty()) {
    return InvalidArgumentError("bootstrap: the instance's local directory is empty");
  }
  auto has_nul = [](const std::string& v) { return v.find('\0') != std::string::npos; };
  std::vector<std::pair<const char*, const std::string*>> vars = {
      {"SPOT_JOB", &s.job}, {"SPOT_INSTANCE_ID", &s.instance_id}, {"SPOT_LOCAL_DIR", &s.local_dir}};
  if (!s.rendezvous_url.empty()) vars.emplace_back("SPOT_RENDEZVOUS", &s.rendezvous_url);
  if (!s.checkpoint_location.empty()) vars.emplace_back("SPOT_CHECKPOINT", &s.checkpoint_location);
  if (has_nul(s.comment) || s.comment.find('\n') != std::string::npos) {
    return InvalidArgumentError("bootstrap: the comment must be one line");
  }
  std::string out = "#!/bin/sh\n";
  if (!s.comment.empty()) out += "# " + s.comment + "\n";
  out += "set -eu\n";
  for (const auto& [name, value] : vars) {
    if (has_nul(*value)) {
      return InvalidArgumentError(std::string("bootstrap: ") + name + " holds a NUL byte");
    }
    out += std::string("export ") + name + "=" + ShellQuote(*value) + "\n";
  }
  out += "mkdir -p " + ShellQuote(s.local_dir) + "\ncd " + ShellQuote(s.local_dir) + "\n";
  out += "exec";
  for (const std::string& a : s.argv) {
    if (has_nul(a)) return InvalidArgumentError("bootstrap: a worker argument holds a NUL byte");
    out += " " + ShellQuote(a);
  }
  return out + "\n";
}

}  // namespace spot::cloud
