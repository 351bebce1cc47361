// The worked example's registration (policies/README.md): its base, its one option, its factory.
#include "policies/common/policy_base.h"
#include "policies/example_sjf/example_sjf_policy.h"

namespace batchsim {

void register_example_sjf_policies(PolicyCatalog& catalog) {
  PolicyOptionSchema options({int_option("max_num_seqs", "64", 1, 1 << 20, "most requests running at once")});
  auto make = [](const PolicyBase& self, const PolicyInfo& info, const PolicyOptions& merged,
                 const PolicyOptions& /*user*/) -> std::unique_ptr<Policy> {
    ExampleSjfConfig c;
    c.max_num_seqs = self.options.get_int(merged, "max_num_seqs");
    return std::make_unique<ExampleSjfPolicy>(c, info.name);
  };
  // No traits: the example claims no feature (policies/common/policy_base.h, PolicyBaseTraits).
  catalog.bases.push_back({"example-sjf", std::move(options), make, {}, {}});
  catalog.policies.push_back({"example-sjf",
                              "example-sjf",
                              "the worked example of policies/README.md: mixed iterations, paged KV, shortest prompt "
                              "first, the newest preempted",
                              {},
                              "vllm",
                              150});
}

}  // namespace batchsim
