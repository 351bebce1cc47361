// The continuous and chunked-prefill bases, served by ContinuousPolicy, and their presets (Orca,
// vLLM v0 and v1, Sarathi-Serve, TensorRT-LLM, TGI), registered with the policy registry
// (policies/common/policy_base.h).
#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "policies/common/policy_base.h"
#include "policies/continuous/continuous_policy.h"

namespace batchsim {

namespace {

PolicyOptionSchema continuous_options() {
  return PolicyOptionSchema({
      choice_option("kv", "paged", {"paged", "reserve"},
                    "paged (PagedAttention blocks) | reserve (contiguous reservation)"),
      int_option("block_size", "16", 1, 1024, "tokens per KV block (kv=paged)"),
      real_option("watermark", "0", 0.0, 0.5, "fraction of blocks kept free at admission (kv=paged)"),
      choice_option("reserve_to", "output", {"output", "max_model_len"},
                    "kv=reserve: reserve prompt+max_tokens (TRT-LLM no-evict, TGI; max_tokens = output without "
                    "--max-tokens) | max_model_len (Orca)"),
      choice_option("prefill", "mixed", {"mixed", "exclusive"},
                    "mixed (Orca) | exclusive (vLLM v0: prefill-only iterations)"),
      int_option("max_num_seqs", "256", 1, 1 << 20, "most sequences running at once"),
      int_option("max_num_batched_tokens", "max(max_model_len, 2048)", 0, 1 << 24,
                 "tokens per iteration; a longer prompt is rejected"),
      choice_option("preemption", "recompute", {"recompute", "swap"},
                    "newest running request is preempted: recompute | swap (KV over the GPU's PCIe, both ways)"),
      int_option("max_waiting_tokens", "0", 0, 1 << 24,
                 "TGI wait rule: admit only after this many decode steps, or when enough fit at once (0: off)"),
      real_option("waiting_served_ratio", "1.2", 0.0, 1e6, "TGI wait rule: 'enough' = this x the running requests"),
      bool_option("prefix_caching", "false",
                  "share KV blocks of equal prompt prefixes (vLLM v1 APC; kv=paged; needs a trace's hash_ids or "
                  "--prefix)"),
      choice_option("usage_context", "none", {"none", "api_server", "llm"},
                    "api_server | llm: max_num_batched_tokens and max_num_seqs not given follow vLLM's defaults for "
                    "the GPU (vllm serve | offline LLM); none: the defaults above"),
      bool_option("decode_after_admission", "false",
                  "TGI's batching loop: an iteration that admitted into a running batch is followed by one that "
                  "admits nobody"),
      choice_option("capacity_scheduler", "none", {"none", "guaranteed_no_evict", "max_utilization"},
                    "TensorRT-LLM capacity policy, instead of kv/reserve_to: guaranteed_no_evict (reserve "
                    "ceil((prompt+max_tokens)/block_size) blocks) | max_utilization (paged, whole prompt free to "
                    "admit, pause the last started) | none"),
      bool_option("enable_chunked_context", "false",
                  "TensorRT-LLM chunked context: decodes first, then prompt chunks rounded down to multiples of "
                  "block_size (tokens_per_block) to fill max_num_batched_tokens"),
      choice_option("scheduling_policy", "fcfs", {"fcfs", "priority", "sjf"},
                    "fcfs: arrival order, the newest running request preempted | priority: vLLM's "
                    "--scheduling-policy priority, waiting by (priority, arrival), smaller first, the lowest-ranked "
                    "running request preempted | sjf: the same ranked by job length (sjf_by)"),
      choice_option("sjf_by", "output", {"output", "prompt"},
                    "scheduling_policy=sjf's job length: output (the true output length, which no server knows: an "
                    "oracle baseline) | prompt (known on arrival)"),
      bool_option("preempt_for_waiting", "false",
                  "prefill=exclusive with priority or sjf: while the best waiting request cannot be admitted, preempt "
                  "running requests ranked below it (vLLM v0 _schedule_priority_preemption; on in vllm-v0)"),
      real_option("free_gpu_memory_fraction", "none", 0.01, 1.0,
                  "TensorRT-LLM's KV pool: this share of the GPU memory left after the weights and a profile run of "
                  "max_num_batched_tokens (KvCacheConfig.free_gpu_memory_fraction; 0.9 in trtllm), instead of "
                  "--gpu-memory-utilization's share of the whole GPU | none: --gpu-memory-utilization's"),
      bool_option("async_scheduling", "false",
                  "vLLM's --async-scheduling (default since 0.14): each step is scheduled while the one before runs, "
                  "so a request arriving during an iteration waits one more step (pair it with --engine vllm-async, "
                  "whose CPU work overlaps the GPU)"),
  });
}

// The continuous base's options less those of its iteration modes and TensorRT-LLM's, with a
// token budget of its own and the chunking options.
PolicyOptionSchema chunked_prefill_options() {
  std::vector<PolicyOptionDoc> docs = continuous_options().options();
  std::erase_if(docs, [](const PolicyOptionDoc& d) {
    return d.key == "prefill" || d.key == "enable_chunked_context" || d.key == "preempt_for_waiting" ||
           d.key == "free_gpu_memory_fraction";
  });
  for (auto& d : docs) {
    if (d.key == "max_num_batched_tokens") d = int_option(d.key, "2048", 1, 1 << 24, "token budget per iteration");
  }
  docs.push_back(int_option("long_prefill_token_threshold", "0", 0, 1 << 24, "cap on one request's chunk (0: off)"));
  docs.push_back(int_option("max_num_partial_prefills", "0", 0, 1 << 20,
                            "requests whose prefill may be unfinished after a step; a new one that would be cut waits "
                            "(vLLM v0's concurrent partial prefills; 0: no bound, as vLLM v1 and Sarathi-Serve)"));
  docs.push_back(choice_option("admission", "first_chunk", {"first_chunk", "full_prompt"},
                               "first_chunk: admit when the first chunk's KV fits | full_prompt: only when the KV of "
                               "the whole prompt is free (vLLM v1 scheduler_reserve_full_isl, Sarathi-Serve)"));
  return PolicyOptionSchema(std::move(docs));
}

// The KV manager: kv and reserve_to, or TensorRT-LLM's capacity_scheduler in their place.
void read_kv_manager(const PolicyOptionSchema& s, const PolicyOptions& o, ContinuousPolicyConfig& c) {
  const std::string capacity = s.get_choice(o, "capacity_scheduler");
  if (capacity == "none") {
    c.paged = s.get_choice(o, "kv") == "paged";
    c.reserve_max_model_len = s.get_choice(o, "reserve_to") == "max_model_len";
    return;
  }
  for (const char* key : {"kv", "reserve_to"}) {
    if (o.values().count(key) > 0) {
      throw UserError(
          fmt::format("--policy-opt {}={}: capacity_scheduler={} decides the KV "
                      "manager; leave {} out",
                      key, o.values().at(key), capacity, key));
    }
  }
  // GUARANTEED_NO_EVICT: blocks to completion reserved at admission; MAX_UTILIZATION: paged,
  // the whole prompt's blocks free to start (getNeededBlocksOneStep of a first chunk).
  c.paged = capacity == "max_utilization";
  c.reserve_blocks_to_completion = !c.paged;
  c.admit_full_prompt = c.paged;
}

// The options only the continuous base reads (its iteration modes, v0's forced preemption,
// TensorRT-LLM's KV pool), or only the chunked-prefill base (its chunking and admission).
void read_mode_options(const PolicyOptionSchema& s, const PolicyOptions& o, bool chunked, ContinuousPolicyConfig& c) {
  if (!chunked) {
    // v0's _schedule_priority_preemption exists in _schedule_default (exclusive prefill) only;
    // elsewhere a preset's value is ignored (a user's is refused by check_order_options).
    c.preempt_for_waiting = s.get_bool(o, "preempt_for_waiting") && !c.chunked && !c.mixed_prefill &&
                            c.scheduling_policy != SchedulingPolicy::fcfs;
    // TensorRT-LLM's option on its base; "none" (as the docs show it) keeps vLLM's rule.
    if (!s.is_word(o, "free_gpu_memory_fraction", "none")) {
      c.free_gpu_memory_fraction = s.get_double(o, "free_gpu_memory_fraction", 0.0);
    }
    return;
  }
  c.long_prefill_token_threshold = s.get_int(o, "long_prefill_token_threshold");
  c.max_num_partial_prefills = s.get_int(o, "max_num_partial_prefills");
  // MAX_UTILIZATION needs the whole prompt free unless the user says otherwise.
  c.admit_full_prompt =
      s.get_choice(o, "admission", c.admit_full_prompt ? "full_prompt" : "first_chunk") == "full_prompt";
}

ContinuousPolicyConfig continuous_config(const PolicyOptionSchema& s, const PolicyOptions& o, bool chunked) {
  ContinuousPolicyConfig c;
  // TensorRT-LLM's chunked context on the continuous base (TRT-LLM's own option name).
  const bool context_chunking = !chunked && s.get_bool(o, "enable_chunked_context");
  c.chunked = chunked || context_chunking;
  c.block_size = static_cast<int32_t>(s.get_int(o, "block_size"));
  if (context_chunking) {
    // ContextChunkingConfig{kFIRST_COME_FIRST_SERVED, tokensPerBlock}: the chunk unit is the
    // KV block (tensorrt_llm/_torch/pyexecutor/_util.py; trtGptModelInflightBatching.cpp).
    c.generation_first = true;
    c.chunk_unit = c.block_size;
  }
  read_kv_manager(s, o, c);
  c.watermark = s.get_double(o, "watermark");
  if (!c.chunked) c.mixed_prefill = s.get_choice(o, "prefill") == "mixed";
  c.max_num_seqs = s.get_int(o, "max_num_seqs");
  c.max_num_batched_tokens = s.get_int(o, "max_num_batched_tokens", chunked ? 2048 : 0);
  const std::string usage = s.get_choice(o, "usage_context");
  c.usage_context = usage == "api_server" ? ContinuousPolicyConfig::UsageContext::api_server
                    : usage == "llm"      ? ContinuousPolicyConfig::UsageContext::llm_class
                                          : ContinuousPolicyConfig::UsageContext::none;
  c.max_num_seqs_set = o.values().count("max_num_seqs") > 0;
  c.max_num_batched_tokens_set = o.values().count("max_num_batched_tokens") > 0;
  c.swap = s.get_choice(o, "preemption") == "swap";
  // Read even with kv=reserve, where a preset's value is ignored (a user's is refused).
  c.prefix_caching = s.get_bool(o, "prefix_caching") && c.paged;
  c.max_waiting_tokens = s.get_int(o, "max_waiting_tokens");
  c.waiting_served_ratio = s.get_double(o, "waiting_served_ratio");
  c.decode_after_admission = s.get_bool(o, "decode_after_admission");
  c.async_scheduling = s.get_bool(o, "async_scheduling");
  const std::string order = s.get_choice(o, "scheduling_policy");
  c.scheduling_policy = order == "priority" ? SchedulingPolicy::priority
                        : order == "sjf"    ? SchedulingPolicy::sjf
                                            : SchedulingPolicy::fcfs;
  // Read whatever the order, so that a preset may set it; check_order_options refuses a user's
  // sjf_by without sjf.
  c.sjf_by = s.get_choice(o, "sjf_by") == "prompt" ? JobLength::prompt : JobLength::output;
  read_mode_options(s, o, chunked, c);
  return c;
}

// An option the user set explicitly that the resolved KV manager ignores is a mistake worth
// naming (a preset's own values are not: `orca kv=paged` is a legitimate ablation).
void check_kv_options(const PolicyInfo& info, const PolicyOptions& merged, const PolicyOptions& user) {
  const auto& set = merged.values();
  const std::string capacity = set.count("capacity_scheduler") > 0 ? set.at("capacity_scheduler") : "none";
  // capacity_scheduler decides the KV manager when set (read_kv_manager refuses kv then).
  const bool paged = capacity == "max_utilization" ||
                     (capacity != "guaranteed_no_evict" && (set.count("kv") == 0 || set.at("kv") == "paged"));
  // GUARANTEED_NO_EVICT counts its reservations in blocks of block_size.
  const bool blocks = paged || capacity == "guaranteed_no_evict";
  for (const auto& [key, value] : user.values()) {
    const bool paged_only = (key == "block_size" && !blocks) || key == "watermark" || key == "prefix_caching";
    if ((paged_only && !paged) || (key == "reserve_to" && paged)) {
      throw UserError(
          fmt::format("--policy-opt {}={}: only applies with kv={} (policy '{}' "
                      "uses kv={})",
                      key, value, paged ? "reserve" : "paged", info.name, paged ? "paged" : "reserve"));
    }
  }
}

// The scheduling order's own options, when the order (or the iteration mode) they need is not
// the one the policy runs.
void check_order_options(const PolicyInfo& info, const PolicyOptions& merged, const PolicyOptions& user, bool chunked) {
  const auto& set = merged.values();
  const auto merged_value = [&set](const char* key, const char* fallback) {
    return set.count(key) > 0 ? set.at(key) : std::string(fallback);
  };
  const std::string order = merged_value("scheduling_policy", "fcfs");
  const bool exclusive = !chunked && merged_value("prefill", "mixed") == "exclusive" &&
                         !PolicyOptions(set).get_bool("enable_chunked_context", false);
  for (const auto& [key, value] : user.values()) {
    if (key == "sjf_by" && order != "sjf") {
      throw UserError(
          fmt::format("--policy-opt sjf_by={}: only applies with scheduling_policy=sjf "
                      "(policy '{}' uses scheduling_policy={})",
                      value, info.name, order));
    }
    if (key == "preempt_for_waiting" &&
        PolicyOptions(std::map<std::string, std::string>{{key, value}}).get_bool(key, false)) {
      if (order == "fcfs") {
        throw UserError(
            fmt::format("--policy-opt preempt_for_waiting={}: only applies with "
                        "scheduling_policy=priority or sjf (policy '{}' uses fcfs)",
                        value, info.name));
      }
      if (!exclusive) {
        throw UserError(
            fmt::format("--policy-opt preempt_for_waiting={}: only applies with "
                        "prefill=exclusive on the continuous base (vLLM v0 "
                        "_schedule_default); policy '{}' runs mixed or chunked iterations",
                        value, info.name));
      }
    }
  }
}

// A base of ContinuousPolicy: `chunked` for chunked-prefill.
PolicyBase continuous_base(bool chunked) {
  PolicyBase base;
  base.name = chunked ? "chunked-prefill" : "continuous";
  base.options = chunked ? chunked_prefill_options() : continuous_options();
  // The paged prefix cache's host tier (docs/kv-offload.md) and speculative steps (docs/speculative.md)
  // are modelled on this scheduler alone.
  base.traits.kv_offload = true;
  base.traits.speculative_decoding = true;
  base.make = [chunked](const PolicyBase& self, const PolicyInfo& info, const PolicyOptions& merged,
                        const PolicyOptions& user) -> std::unique_ptr<Policy> {
    check_kv_options(info, merged, user);
    check_order_options(info, merged, user, chunked);
    return std::make_unique<ContinuousPolicy>(continuous_config(self.options, merged, chunked), info.name);
  };
  // TensorRT-LLM's chunked context chunks prompts on the continuous base.
  base.chunks_prefills = [chunked](const std::map<std::string, std::string>& options) {
    const auto context = options.find("enable_chunked_context");
    return chunked || (context != options.end() && context->second == "true");
  };
  return base;
}

// The presets of the continuous base: engines that iterate without chunking prompts.
std::vector<PolicyInfo> continuous_presets() {
  return {
      // Orca (OSDI'22, section 5) is a C++ engine with fused CUDA kernels, as FasterTransformer.
      {"orca",
       "continuous",
       "Orca: mixed iterations, contiguous KV reserved for max_model_len",
       {{"kv", "reserve"}, {"reserve_to", "max_model_len"}, {"prefill", "mixed"}},
       "fastertransformer",
       60},
      // text-generation-inference 1.x router: a new batch is prefilled on its own and then
      // concatenated (router/src/infer.rs batching_task, v1.4.5), with the 20-step / 1.2 wait
      // rule, and every prefill into the running batch is followed by a decode; admission
      // counts input + max_new_tokens of every running request against max_batch_total_tokens
      // (router/src/queue.rs next_batch), and the server allocates those blocks up front
      // (flash_causal_lm.py), which is a reservation of prompt + output; prefill budget
      // --max-batch-prefill-tokens 4096. (Until issue 13 `tgi` was a simplified TGI:
      // continuous, mixed, paged; that is `--policy continuous --engine tgi`.)
      {"tgi-router",
       "continuous",
       "TGI 1.x router: prefill-only iterations after a wait rule, a decode after each, KV reserved for prompt + "
       "max_new_tokens",
       {{"kv", "reserve"},
        {"reserve_to", "output"},
        {"prefill", "exclusive"},
        {"max_num_batched_tokens", "4096"},
        {"max_waiting_tokens", "20"},
        {"waiting_served_ratio", "1.2"},
        {"decode_after_admission", "true"}},
       "tgi",
       80},
      // TensorRT-LLM in-flight batching (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp,
      // microBatchScheduler.cpp, main 2026-05) with trtllm-serve's defaults: the capacity
      // policy GUARANTEED_NO_EVICT (SchedulerConfig.capacity_scheduler_policy,
      // tensorrt_llm/llmapi/llm_args.py), tokens_per_block 32 (KvCacheConfig), max_batch_size
      // 2048 and max_num_tokens 8192 (BuildConfig, tensorrt_llm/builder.py, which
      // tensorrt_llm/commands/serve.py takes its defaults from), chunked context off
      // (enable_chunked_prefill False). Without chunking the micro-batch scheduler takes the
      // generation requests first and then whole contexts in order until max_num_tokens, which
      // is the mixed mode of the continuous base. Its KV pool is free_gpu_memory_fraction 0.9
      // (KvCacheConfig, tensorrt_llm/llmapi/llm_args.py) of the memory left after the weights and
      // a profile run (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator._cal_max_memory).
      // Not modelled: KV block reuse (enable_block_reuse).
      {"trtllm",
       "continuous",
       "TensorRT-LLM in-flight batching: GUARANTEED_NO_EVICT (blocks to completion) or MAX_UTILIZATION, max_num_tokens "
       "8192, max_batch_size 2048, tokens_per_block 32, KV pool 0.9 of the memory free after the weights and a profile "
       "run",
       {{"capacity_scheduler", "guaranteed_no_evict"},
        {"block_size", "32"},
        {"max_num_batched_tokens", "8192"},
        {"max_num_seqs", "2048"},
        {"free_gpu_memory_fraction", "0.9"}},
       "trtllm",
       90},
      // With scheduling_policy=priority (or sjf) it follows v0's priority scheduling, forced
      // preemption for a better-ranked waiting request included (_schedule_priority_preemption);
      // the chunked presets below follow v1, which has none.
      {"vllm-v0",
       "continuous",
       "vLLM v0 _schedule_default: prefill-only or decode-only iterations, paged, recompute",
       {{"kv", "paged"},
        {"prefill", "exclusive"},
        {"preemption", "recompute"},
        {"watermark", "0.01"},
        {"preempt_for_waiting", "true"}},
       "vllm-v0",
       100},
  };
}

// The presets of the chunked-prefill base.
std::vector<PolicyInfo> chunked_prefill_presets() {
  return {
      // text-generation-inference v3 (v3.3.7, backends/v3/src/backend.rs batching_task and
      // queue.rs next_batch) on a model that supports chunking (the flash models; the server's
      // PREFILL_CHUNKING defaults to 1): new requests are prefilled together with the running
      // batch's next tokens (prefill(new_batch, cached_batch)), within max_batch_prefill_tokens
      // less the running batch's current_tokens, the last entry cut to the budget left; the
      // wait rule is ignored ("`waiting_served_ratio` and `max_waiting_tokens` will be
      // ignored"); every such prefill is followed by a decode of the whole batch. The queue
      // allocates input + max_new_tokens + speculate - 1 tokens of blocks at admission
      // (block_allocator.rs SimpleAllocator::allocate; BLOCK_SIZE 1 with the default flashinfer
      // attention, server/text_generation_server/models/globals.py), so KV is reserved for
      // prompt + max_new_tokens. max_batch_prefill_tokens: the launcher's fallback 4096
      // (launcher/src/main.rs; it uses the card's f16 FLOP/s over the model's FLOP per token,
      // capped at max_position_embeddings, when it knows the card: set it to match);
      // max_batch_size: none. Not modelled: the radix prefix cache (on by default), the
      // server's choice of the running chunks' sizes (newest first, at least one token each).
      // Its KV pool needs no rule of its own: after a warm-up prefill of max_batch_prefill_tokens
      // the server takes what get_free_memory(MEMORY_FRACTION * TGI_WIGGLE_ROOM) leaves, 1.0 x
      // 0.90 of the GPU less what is in use (flash_causal_lm.py warmup, models/globals.py, v3.3.7),
      // which is --gpu-memory-utilization 0.9's form after a profile run of the budget
      // (ContinuousPolicy::kv_sizing).
      {"tgi",
       "chunked-prefill",
       "TGI v3: chunked prefill mixed with the running decodes (max_batch_prefill_tokens 4096), a decode after every "
       "admission, KV reserved for prompt + max_new_tokens",
       {{"kv", "reserve"},
        {"reserve_to", "output"},
        {"max_num_batched_tokens", "4096"},
        {"max_num_seqs", "1048576"},
        {"decode_after_admission", "true"}},
       "tgi",
       70},
      // Budget and sequence cap from the GPU and usage context as vLLM sets them
      // (vllm_batch_defaults; usage_context=none with explicit values for the old 2048 / 256).
      // No bound on partial prefills (the base's max_num_partial_prefills=0): v1's scheduler
      // never reads the option.
      {"vllm",
       "chunked-prefill",
       "vLLM v1 scheduler (v0.19 on): chunked prefill, budget and seqs from the GPU (8192/1024 on H100-class, else "
       "2048/256), whole prompt's KV free to admit, recompute, prefix caching, async scheduling",
       {{"usage_context", "api_server"},
        {"preemption", "recompute"},
        // scheduler_reserve_full_isl, on by default since v0.19.0 (vllm/config/scheduler.py).
        {"admission", "full_prompt"},
        // v1 enables automatic prefix caching by default (EngineArgs.enable_prefix_caching).
        {"prefix_caching", "true"},
        // On by default since v0.14 (vllm #27614; vllm/config/vllm.py); its CPU overlap is the
        // engine's (vllm-async).
        {"async_scheduling", "true"}},
       "vllm-async",
       110},
      // The same scheduler before scheduler_reserve_full_isl (v0.8 to v0.18, the V1 engine of
      // 2025): a request is admitted once its first chunk's KV fits, and may be preempted by its
      // own later chunks. Synchronous, as up to v0.13 (NVIDIA's vLLM 0.12 rows); v0.14 to v0.18
      // scheduled asynchronously: async_scheduling=true with --engine vllm-async.
      {"vllm-v1-2025",
       "chunked-prefill",
       "vLLM v1 scheduler before v0.19: as vllm, but a request is admitted when its first chunk's KV fits, and "
       "synchronous (as up to v0.13)",
       {{"usage_context", "api_server"},
        {"preemption", "recompute"},
        {"admission", "first_chunk"},
        {"prefix_caching", "true"}},
       "vllm",
       120},
      // Sarathi-Serve is built on a vLLM fork of its time (the engine Vidur measured). Its
      // scheduler admits a request only when blocks for its whole prompt can be allocated
      // (sarathi/core/scheduler/sarathi_scheduler.py, block_manager.can_allocate).
      {"sarathi",
       "chunked-prefill",
       "Sarathi-Serve: chunked prefill with a 512-token budget, whole prompt's KV free to admit",
       {{"max_num_batched_tokens", "512"}, {"admission", "full_prompt"}},
       "vllm-v0",
       130},
  };
}

}  // namespace

void register_continuous_policies(PolicyCatalog& catalog) {
  catalog.bases.push_back(continuous_base(false));
  catalog.bases.push_back(continuous_base(true));
  catalog.policies.push_back({"continuous",
                              "continuous",
                              "iteration-level scheduling (Orca, OSDI'22), paged KV, mixed prefill+decode",
                              {},
                              "vllm",
                              20});
  catalog.policies.push_back({"chunked-prefill",
                              "chunked-prefill",
                              "stall-free batching with a per-iteration token budget (Sarathi-Serve, OSDI'24)",
                              {},
                              "vllm",
                              30});
  for (PolicyInfo& p : continuous_presets()) catalog.policies.push_back(std::move(p));
  for (PolicyInfo& p : chunked_prefill_presets()) catalog.policies.push_back(std::move(p));
}

}  // namespace batchsim
