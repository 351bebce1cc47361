// batchsim — the policy registry: every scheduler and engine preset by name.
//
// `batchsim list policies` prints this table. A preset is a base policy plus option values
// that mirror a documented engine; options given by the user (--policy-opt KEY=VALUE) override
// a preset's. Unknown options are an error naming the option.
//
// The registry knows no base by name: each base registers itself, its option schema and its
// presets from its own folder (policies/common/policy_base.h says how), and the registry calls
// those registrations once, in the order policies/CMakeLists.txt lists the bases.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "policies/common/policy_base.h"
#include "sim/policy.h"

namespace batchsim {

// Every policy, in the order `batchsim list policies` prints them.
const std::vector<PolicyInfo>& registered_policies();
// The option schema of a base (one of policy_bases()); UserError if unknown.
const std::vector<PolicyOptionDoc>& policy_option_docs(std::string_view base);
// The base policies, whose options `batchsim list policies` prints: "static", "continuous",
// "chunked-prefill", "sglang", "example-sjf".
const std::vector<std::string>& policy_bases();
// The base (one of policy_bases()) of a policy or preset name; UserError if unknown.
const std::string& policy_base(std::string_view name);
// The engine a policy or preset runs as by default; UserError if the policy is unknown.
const std::string& policy_engine(std::string_view name);
// What a base (one of policy_bases()) declares of itself; UserError if unknown.
const PolicyBaseTraits& policy_base_traits(std::string_view base);
// Whether policy `name` with the user's `options` chunks prefills; UserError if unknown.
bool policy_chunks_prefills(std::string_view name, const std::map<std::string, std::string>& options);
// Throws UserError for an unknown name (listing the known ones) or a bad option.
std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& options);

}  // namespace batchsim
