#include "policies/registry.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hwmodel/base/error.h"

namespace batchsim {

// Calls every base's registration function, in the order of policies/CMakeLists.txt; CMake
// writes it (policies/policy_registrations.cpp.in).
void register_policy_bases(PolicyCatalog& catalog);

namespace {

struct Registry {
  PolicyCatalog catalog;
  std::vector<std::string> base_names;
};

const Registry& registry() {
  static const Registry r = [] {
    Registry built;
    register_policy_bases(built.catalog);
    std::stable_sort(built.catalog.policies.begin(), built.catalog.policies.end(),
                     [](const PolicyInfo& a, const PolicyInfo& b) { return a.list_rank < b.list_rank; });
    for (const PolicyBase& base : built.catalog.bases) built.base_names.push_back(base.name);
    return built;
  }();
  return r;
}

const PolicyInfo& find_policy(std::string_view name) {
  for (const PolicyInfo& info : registered_policies()) {
    if (info.name == name) return info;
  }
  std::vector<std::string> names;
  for (const PolicyInfo& info : registered_policies()) names.push_back(info.name);
  throw UserError(fmt::format("--policy: unknown policy '{}' (known: {})", name, fmt::join(names, ", ")));
}

const PolicyBase& find_base(std::string_view name) {
  for (const PolicyBase& base : registry().catalog.bases) {
    if (base.name == name) return base;
  }
  throw UserError(fmt::format("unknown policy base '{}' (known: {})", name, fmt::join(policy_bases(), ", ")));
}

}  // namespace

const std::vector<PolicyInfo>& registered_policies() { return registry().catalog.policies; }

const std::vector<PolicyOptionDoc>& policy_option_docs(std::string_view base) {
  return find_base(base).options.options();
}

const std::vector<std::string>& policy_bases() { return registry().base_names; }

const std::string& policy_base(std::string_view name) { return find_policy(name).base; }

const PolicyBaseTraits& policy_base_traits(std::string_view base) { return find_base(base).traits; }
const std::string& policy_engine(std::string_view name) { return find_policy(name).engine; }

bool policy_chunks_prefills(std::string_view name, const std::map<std::string, std::string>& options) {
  const PolicyBase& base = find_base(find_policy(name).base);
  return base.chunks_prefills && base.chunks_prefills(options);
}

std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& options) {
  const PolicyInfo& info = find_policy(name);
  PolicyOptions merged;
  for (const auto& [k, v] : info.preset) merged.set(k, v);
  for (const auto& [k, v] : options.values()) merged.set(k, v);  // the user's value wins
  const PolicyBase& base = find_base(info.base);
  std::unique_ptr<Policy> policy = base.make(base, info, merged, options);
  merged.check_all_used(info.name);
  return policy;
}

}  // namespace batchsim
