// The static base and its presets (HF pipelines, FasterTransformer), registered with the policy
// registry (policies/common/policy_base.h).
#include "policies/common/policy_base.h"
#include "policies/static/static_policy.h"

namespace batchsim {

namespace {

PolicyOptionSchema static_options() {
  return PolicyOptionSchema({
      int_option("batch_size", "8", 1, 1 << 20, "requests per batch"),
      real_option("batch_timeout_s", "0", 0.0, 1e9,
                  "start a partial batch when the oldest waited this long (0: never)"),
      bool_option("pad", "true", "pad prompts to the batch's longest"),
      choice_option("release", "batch", {"batch", "request"},
                    "batch: finished rows compute until the longest ends; request: they stop"),
      int_option("max_new_tokens", "0", 0, 1 << 24,
                 "output tokens reserved per row (0: the batch's longest max_tokens, = output without --max-tokens)"),
  });
}

StaticPolicyConfig static_config(const PolicyOptionSchema& s, const PolicyOptions& o) {
  StaticPolicyConfig c;
  c.batch_size = s.get_int(o, "batch_size");
  c.batch_timeout_s = s.get_double(o, "batch_timeout_s");
  c.pad = s.get_bool(o, "pad");
  c.release_per_request = s.get_choice(o, "release") == "request";
  c.max_new_tokens = s.get_int(o, "max_new_tokens");
  return c;
}

}  // namespace

void register_static_policies(PolicyCatalog& catalog) {
  PolicyBase base{"static",
                  static_options(),
                  [](const PolicyBase& self, const PolicyInfo& info, const PolicyOptions& merged,
                     const PolicyOptions& /*user*/) -> std::unique_ptr<Policy> {
                    return std::make_unique<StaticPolicy>(static_config(self.options, merged), info.name);
                  },
                  {},
                  {}};
  base.traits.static_batching = true;
  // Measured as PolicyBaseTraits::host_bytes_per_request says: static batches keep per-slot
  // records, so a request costs about twice what it does under the continuous policies.
  base.traits.host_bytes_per_request = 1650;
  catalog.bases.push_back(std::move(base));
  catalog.policies.push_back({"static", "static", "static batching: a batch starts and ends together", {}, "vllm", 10});
  catalog.policies.push_back({"hf-static",
                              "static",
                              "HF pipeline: padded prompts, every slot held until the longest ends",
                              {{"pad", "true"}, {"release", "batch"}},
                              "hf-transformers",
                              40});
  catalog.policies.push_back({"ft-static",
                              "static",
                              "FasterTransformer-like: no padding, finished rows stop computing, slots not refilled",
                              {{"pad", "false"}, {"release", "request"}},
                              "fastertransformer",
                              50});
}

}  // namespace batchsim
