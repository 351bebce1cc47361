// batchsim — the policy registry: every scheduler and engine preset by name.
//
// `batchsim list policies` prints this table. A preset is a base policy plus option values
// that mirror a documented engine; options given by the user (--policy-opt KEY=VALUE) override
// a preset's. Unknown options are an error naming the option.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/policy.h"

namespace batchsim {

struct PolicyOptionDoc {
  std::string key;
  std::string default_value;
  std::string description;
};

struct PolicyInfo {
  std::string name;
  std::string base;                                         // one of policy_bases()
  std::string description;                                  // one line, with the source it mirrors
  std::vector<std::pair<std::string, std::string>> preset;  // options the preset sets
  // The engine profile (hwmodel/engines/) the preset's engine runs as, unless --engine says
  // otherwise; the base policies run as current vLLM.
  std::string engine = "vllm";
};

const std::vector<PolicyInfo>& registered_policies();
const std::vector<PolicyOptionDoc>& policy_option_docs(std::string_view base);
// The base policies, whose options `batchsim list policies` prints: "static", "continuous",
// "chunked-prefill", "sglang", "example-sjf".
const std::vector<std::string>& policy_bases();
// The base (one of policy_bases()) of a policy or preset name; UserError if unknown.
const std::string& policy_base(std::string_view name);
// The engine a policy or preset runs as by default; UserError if the policy is unknown.
const std::string& policy_engine(std::string_view name);
// Throws UserError for an unknown name (listing the known ones) or a bad option.
std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& options);

}  // namespace batchsim
