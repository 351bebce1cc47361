// SGLang's base, registered with the policy registry (policies/common/policy_base.h). Its
// options are SGLang's server arguments and environment variables, under their own names
// (policies/sglang/sglang_policy.h cites each).
#include "policies/common/policy_base.h"
#include "policies/sglang/sglang_policy.h"

namespace batchsim {

namespace {

PolicyOptionSchema sglang_options() {
  return PolicyOptionSchema({
      int_option("page_size", "1", 1, 1024,
                 "tokens per KV page (SGLang --page-size); also the radix cache's match granularity"),
      int_option("chunked_prefill_size", "auto", 1, 1 << 24,
                 "prefill tokens per batch and the chunk size; auto: by GPU memory, 2048 below 35 GiB, 4096 below 60, "
                 "8192 below 160 (H100, H200), else 16384"),
      int_option("max_prefill_tokens", "16384", 1, 1 << 24,
                 "prefill tokens per batch (the first request may exceed it)"),
      int_option("max_running_requests", "auto", 1, 1 << 20,
                 "most requests running; auto: min(clamp(KV tokens / context x 512, 2048, 4096), KV tokens / 2)"),
      choice_option("schedule_policy", "fcfs", {"fcfs", "lpm"},
                    "fcfs: arrival order | lpm: longest radix-cache prefix first (fcfs above 128 waiting)"),
      bool_option("prefix_caching", "true",
                  "the radix cache: share KV of equal prompt prefixes (needs a trace's hash_ids or --prefix)"),
      real_option("init_new_token_ratio", "0.7", 0.0, 1.0,
                  "admission's starting share of running requests' max_new_tokens reserved "
                  "(SGLANG_INIT_NEW_TOKEN_RATIO)"),
      real_option("min_new_token_ratio_factor", "0.14", 0.0, 1.0,
                  "floor of the ratio, as a fraction of its initial value (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR)"),
      int_option("new_token_ratio_decay_steps", "600", 1, 1 << 30,
                 "decode steps over which the ratio decays from initial to floor (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS)"),
      real_option("schedule_conservativeness", "1.0", 0.0, 1e6, "multiplies the initial ratio (capped at 1)"),
      int_option(
          "retract_decode_steps", "20", 0, 1 << 20,
          "decode steps per remaining request in the ratio set after a retraction (SGLANG_RETRACT_DECODE_STEPS)"),
      bool_option("enable_mixed_chunk", "false",
                  "a prefill batch also runs the running requests' decode steps, their tokens taken from its budgets "
                  "(--enable-mixed-chunk)"),
      bool_option("disable_overlap_schedule", "false",
                  "false: the overlap scheduler chooses each batch while the one before runs, so a request arriving "
                  "during an iteration waits one more (SGLang's default since 0.4) | true: --disable-overlap-schedule"),
      int_option("num_reserved_decode_tokens", "512", 0, 1 << 24,
                 "a decode pool's KV kept free per request it holds before it preallocates another hand-off "
                 "(--num-reserved-decode-tokens; only in a P/D decode pool)"),
      int_option("cuda_graph_max_bs", "auto", 1, 1 << 20,
                 "largest decode batch run as a CUDA graph (--cuda-graph-max-bs), in place of the engine profile's; "
                 "auto: SGLang's rule by GPU memory and TP < 4 / >= 4, 8 below 20 GiB, 24 / 80 below 35, 32 / 160 "
                 "below 60, 256 / 512 below 160 (H100, H200), else 512"),
      real_option("mem_fraction_static", "auto", 0.01, 0.99,
                  "share of GPU memory for weights + KV pool, the rest kept for activations and CUDA graphs "
                  "(--mem-fraction-static; --gpu-memory-utilization does not apply); auto: SGLang's rule, (memory - "
                  "reserved) / memory, reserved 512 MiB + 1.5 x chunked_prefill_size + 2 x cuda_graph_max_bs + TP/8 "
                  "GiB, at least 10 GiB above 60 GiB (0.835 on an H100 at TP 1)"),
  });
}

SglangPolicyConfig sglang_config(const PolicyOptionSchema& s, const PolicyOptions& o) {
  SglangPolicyConfig c;
  c.page_size = static_cast<int32_t>(s.get_int(o, "page_size"));
  // "auto" (0 inside): SGLang's own default, worked out when the policy meets the GPU and KV.
  auto int_or_auto = [&](std::string_view key) -> int64_t {
    return s.is_word(o, key, "auto") ? 0 : s.get_int(o, key, 0);
  };
  c.chunked_prefill_size = int_or_auto("chunked_prefill_size");
  c.max_prefill_tokens = s.get_int(o, "max_prefill_tokens");
  c.max_running_requests = int_or_auto("max_running_requests");
  c.lpm = s.get_choice(o, "schedule_policy") == "lpm";
  c.radix_cache = s.get_bool(o, "prefix_caching");
  c.init_new_token_ratio = s.get_double(o, "init_new_token_ratio");
  c.min_new_token_ratio_factor = s.get_double(o, "min_new_token_ratio_factor");
  c.new_token_ratio_decay_steps = s.get_int(o, "new_token_ratio_decay_steps");
  c.schedule_conservativeness = s.get_double(o, "schedule_conservativeness");
  c.retract_decode_steps = s.get_int(o, "retract_decode_steps");
  c.mixed_chunk = s.get_bool(o, "enable_mixed_chunk");
  c.overlap_schedule = !s.get_bool(o, "disable_overlap_schedule");
  c.mem_fraction_static =
      s.is_word(o, "mem_fraction_static", "auto") ? 0.0 : s.get_double(o, "mem_fraction_static", 0.0);
  c.cuda_graph_max_bs = int_or_auto("cuda_graph_max_bs");
  c.num_reserved_decode_tokens = s.get_int(o, "num_reserved_decode_tokens");
  return c;
}

}  // namespace

void register_sglang_policies(PolicyCatalog& catalog) {
  auto make = [](const PolicyBase& self, const PolicyInfo& info, const PolicyOptions& merged,
                 const PolicyOptions& /*user*/) -> std::unique_ptr<Policy> {
    return std::make_unique<SglangPolicy>(sglang_config(self.options, merged), info.name);
  };
  // SGLang chunks every prompt longer than chunked_prefill_size.
  auto chunks = [](const std::map<std::string, std::string>& /*options*/) { return true; };
  PolicyBase base{"sglang", sglang_options(), make, chunks, {}};
  // SGLang's chunk is chunked_prefill_size, and without enable_mixed_chunk a prefill batch runs
  // without the decodes (scheduler.py get_next_batch_to_run).
  base.traits.chunk_budget_option = "chunked_prefill_size";
  base.traits.prefill_batches_pause_decodes = [](const PolicyOptions& options) {
    return !options.get_bool("enable_mixed_chunk", false);
  };
  catalog.bases.push_back(std::move(base));
  // SGLang's scheduler (policies/sglang/sglang_policy.h): its own loop, with SGLang's defaults
  // (server_args.py, environ.py); schedule_policy=lpm is the cache-aware order.
  // The overlap scheduler (SGLang's default since 0.4) is on: its step of lag is the policy's
  // (disable_overlap_schedule=false), its CPU overlap the engine's.
  catalog.policies.push_back({"sglang",
                              "sglang",
                              "SGLang: prefill-first chunked prefill (chunk by GPU memory, 8192 on H100/H200), "
                              "admission by new_token_ratio, retraction on KV shortage, radix prefix cache (page 1), "
                              "fcfs | lpm, overlap scheduler, KV pool by mem_fraction_static (SGLang's rule, 0.835 on "
                              "an H100 at TP 1)",
                              {},
                              "sglang",
                              140});
}

}  // namespace batchsim
