// Registry<Interface, Args...>: components chosen by name with typed
// parameters (policies, forecasters, providers). Registration is explicit:
// a RegisterBuiltin...() call fills a registry (static self-registration
// silently vanishes from static libraries).
//
// A component with options registers a factory taking its options struct;
// the struct's fields are declared once by DeclareFields(Options&,
// FieldVisitor&) (found by argument-dependent lookup; see config_fields.h),
// which gives validation of a job file's parameters, --help and the docs the
// same names, defaults and bounds. Not thread-safe while registering; Create
// and the lookups are const.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config_fields.h"
#include "core/status.h"

namespace spot {

template <typename Interface, typename... Args>
class Registry {
 public:
  using Product = std::unique_ptr<Interface>;
  using Factory = std::function<Product(Args...)>;

  // `kind` names what is registered in messages ("policy", "provider").
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  // A component without parameters. InvalidArgument if `name` is taken or empty.
  Status Register(const std::string& name, std::string help, Factory make) {
    return Add(name, std::move(help), nullptr,
               [make = std::move(make)](const ComponentConfig& c, Args... args) -> Result<Product> {
                 SPOT_RETURN_IF_ERROR(ReadParams(c, nullptr));
                 return make(args...);
               });
  }

  // A component whose parameters are the fields of `Options`, declared by
  // DeclareFields(Options&, FieldVisitor&).
  template <typename Options>
  Status RegisterWithOptions(const std::string& name, std::string help,
                             std::function<Product(const Options&, Args...)> make,
                             Options defaults = {}) {
    return RegisterWithFields<Options>(
        name, std::move(help), [](Options& o, FieldVisitor& v) { DeclareFields(o, v); },
        std::move(make), std::move(defaults));
  }
  // The same with the fields declared by `declare` (several components
  // sharing one options struct, each with its own fields of it).
  template <typename Options>
  Status RegisterWithFields(const std::string& name, std::string help,
                            std::function<void(Options&, FieldVisitor&)> declare,
                            std::function<Product(const Options&, Args...)> make,
                            Options defaults = {}) {
    DeclareFn describe = [declare, defaults](FieldVisitor& v) {
      Options o = defaults;
      declare(o, v);
    };
    return Add(name, std::move(help), std::move(describe),
               [declare, make = std::move(make), defaults](const ComponentConfig& c,
                                                           Args... args) -> Result<Product> {
                 Options o = defaults;
                 SPOT_RETURN_IF_ERROR(ReadParams(c, [&](FieldVisitor& v) { declare(o, v); }));
                 return make(o, args...);
               });
  }

  // A component whose factory can fail (a cloud client that finds no
  // credentials, a required parameter left empty): its Status is Create's.
  template <typename Options>
  Status RegisterWithOptionsOrError(const std::string& name, std::string help,
                                    std::function<Result<Product>(const Options&, Args...)> make,
                                    Options defaults = {}) {
    DeclareFn describe = [defaults](FieldVisitor& v) {
      Options o = defaults;
      DeclareFields(o, v);
    };
    return Add(name, std::move(help), std::move(describe),
               [make = std::move(make), defaults](const ComponentConfig& c,
                                                  Args... args) -> Result<Product> {
                 Options o = defaults;
                 SPOT_RETURN_IF_ERROR(ReadParams(c, [&](FieldVisitor& v) { DeclareFields(o, v); }));
                 return make(o, args...);
               });
  }

  // A fresh component. NotFound (naming the known ones) for an unknown
  // name; InvalidArgument for bad parameters (each with its place).
  Result<Product> Create(const ComponentConfig& config, Args... args) const {
    SPOT_ASSIGN_OR_RETURN(const Entry* e, Find(config.name));
    return e->create(config, args...);
  }
  Result<Product> Create(const std::string& name, Args... args) const {
    return Create(ComponentConfig{.name = name}, args...);
  }
  // Whether Create(config) would accept the name and parameters.
  Status Validate(const ComponentConfig& config) const {
    SPOT_ASSIGN_OR_RETURN(const Entry* e, Find(config.name));
    if (!e->describe) return ReadParams(config, nullptr);
    return ReadParams(config, e->describe);
  }

  std::vector<std::string> Names() const {  // sorted
    std::vector<std::string> names;
    for (const auto& [n, e] : entries_) names.push_back(n);
    return names;
  }
  bool Has(const std::string& name) const { return entries_.count(name) > 0; }
  const std::string& Help(const std::string& name) const {  // REQUIRES: Has(name)
    return entries_.at(name).help;
  }
  std::vector<FieldInfo> Fields(const std::string& name) const {  // REQUIRES: Has(name)
    return CollectFields(entries_.at(name).describe);
  }
  const std::string& kind() const { return kind_; }

 private:
  struct Entry {
    std::string help;
    DeclareFn describe;  // null: no parameters
    std::function<Result<Product>(const ComponentConfig&, Args...)> create;
  };

  Status Add(const std::string& name, std::string help, DeclareFn describe,
             std::function<Result<Product>(const ComponentConfig&, Args...)> create) {
    if (name.empty()) return InvalidArgumentError(kind_ + " name is empty");
    if (entries_.count(name))
      return InvalidArgumentError(kind_ + " '" + name + "' registered twice");
    entries_[name] = {std::move(help), std::move(describe), std::move(create)};
    return Status::Ok();
  }
  Result<const Entry*> Find(const std::string& name) const {
    auto it = entries_.find(name);
    if (it != entries_.end()) return &it->second;
    std::string known;
    for (const auto& [n, e] : entries_) known += (known.empty() ? "" : ", ") + n;
    return NotFoundError("unknown " + kind_ + " '" + name + "' (known: " + known + ")");
  }

  std::string kind_;
  std::map<std::string, Entry> entries_;
};

}  // namespace spot
