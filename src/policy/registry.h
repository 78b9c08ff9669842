// Policies by name. Registration is explicit: call RegisterBuiltinPolicies()
// (static self-registration silently vanishes from static libraries).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "policy/policy.h"

namespace spot::policy {

class PolicyRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Policy>()>;

  // InvalidArgument if `name` is taken or empty.
  Status Register(const std::string& name, std::string help, Factory factory);
  // A fresh policy; NotFound (naming the known ones) for an unknown name.
  Result<std::unique_ptr<Policy>> Create(const std::string& name) const;
  std::vector<std::string> Names() const;  // sorted
  const std::string& Help(const std::string& name) const;  // REQUIRES: registered

 private:
  struct Entry {
    std::string help;
    Factory factory;
  };
  std::map<std::string, Entry> entries_;
};

// od, greedy, up, omniscient, hazard-up, forecast-up.
void RegisterBuiltinPolicies(PolicyRegistry& registry);

}  // namespace spot::policy
