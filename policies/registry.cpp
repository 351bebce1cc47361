#include "policies/registry.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hwmodel/base/error.h"
#include "policies/continuous/continuous_policy.h"
#include "policies/example_sjf/example_sjf_policy.h"
#include "policies/sglang/sglang_policy.h"
#include "policies/static/static_policy.h"

namespace batchsim {

const std::vector<PolicyInfo>& registered_policies() {
  static const std::vector<PolicyInfo> policies = {
      {"static", "static", "static batching: a batch starts and ends together", {}},
      {"continuous", "continuous", "iteration-level scheduling (Orca, OSDI'22), paged KV, mixed prefill+decode", {}},
      {"chunked-prefill",
       "chunked-prefill",
       "stall-free batching with a per-iteration token budget (Sarathi-Serve, OSDI'24)",
       {}},
      {"hf-static",
       "static",
       "HF pipeline: padded prompts, every slot held until the longest ends",
       {{"pad", "true"}, {"release", "batch"}},
       "hf-transformers"},
      {"ft-static",
       "static",
       "FasterTransformer-like: no padding, finished rows stop computing, slots not refilled",
       {{"pad", "false"}, {"release", "request"}},
       "fastertransformer"},
      // Orca (OSDI'22, section 5) is a C++ engine with fused CUDA kernels, as FasterTransformer.
      {"orca",
       "continuous",
       "Orca: mixed iterations, contiguous KV reserved for max_model_len",
       {{"kv", "reserve"}, {"reserve_to", "max_model_len"}, {"prefill", "mixed"}},
       "fastertransformer"},
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
       "tgi"},
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
       "tgi"},
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
       "trtllm"},
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
       "vllm-v0"},
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
       "vllm-async"},
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
       "vllm"},
      // Sarathi-Serve is built on a vLLM fork of its time (the engine Vidur measured). Its
      // scheduler admits a request only when blocks for its whole prompt can be allocated
      // (sarathi/core/scheduler/sarathi_scheduler.py, block_manager.can_allocate).
      {"sarathi",
       "chunked-prefill",
       "Sarathi-Serve: chunked prefill with a 512-token budget, whole prompt's KV free to admit",
       {{"max_num_batched_tokens", "512"}, {"admission", "full_prompt"}},
       "vllm-v0"},
      // SGLang's scheduler (policies/sglang/sglang_policy.h): its own loop, with SGLang's defaults
      // (server_args.py, environ.py); schedule_policy=lpm is the cache-aware order.
      // The overlap scheduler (SGLang's default since 0.4) is on: its step of lag is the policy's
      // (disable_overlap_schedule=false), its CPU overlap the engine's.
      {"sglang",
       "sglang",
       "SGLang: prefill-first chunked prefill (chunk by GPU memory, 8192 on H100/H200), admission by new_token_ratio, "
       "retraction on KV shortage, radix prefix cache (page 1), fcfs | lpm, overlap scheduler, KV pool by "
       "mem_fraction_static (SGLang's rule, 0.835 on an H100 at TP 1)",
       {},
       "sglang"},
      // policies/README.md builds this one, line by line, as its worked example.
      {"example-sjf",
       "example-sjf",
       "the worked example of policies/README.md: mixed iterations, paged KV, shortest prompt first, the newest "
       "preempted",
       {}},
  };
  return policies;
}

const std::vector<PolicyOptionDoc>& policy_option_docs(std::string_view base) {
  static const std::vector<PolicyOptionDoc> static_docs = {
      {"batch_size", "8", "requests per batch"},
      {"batch_timeout_s", "0", "start a partial batch when the oldest waited this long (0: never)"},
      {"pad", "true", "pad prompts to the batch's longest"},
      {"release", "batch", "batch: finished rows compute until the longest ends; request: they stop"},
      {"max_new_tokens", "0",
       "output tokens reserved per row (0: the batch's longest max_tokens, = output without --max-tokens)"},
  };
  static const std::vector<PolicyOptionDoc> continuous_docs = {
      {"kv", "paged", "paged (PagedAttention blocks) | reserve (contiguous reservation)"},
      {"block_size", "16", "tokens per KV block (kv=paged)"},
      {"watermark", "0", "fraction of blocks kept free at admission (kv=paged)"},
      {"reserve_to", "output",
       "kv=reserve: reserve prompt+max_tokens (TRT-LLM no-evict, TGI; max_tokens = output without --max-tokens) | "
       "max_model_len (Orca)"},
      {"prefill", "mixed", "mixed (Orca) | exclusive (vLLM v0: prefill-only iterations)"},
      {"max_num_seqs", "256", "most sequences running at once"},
      {"max_num_batched_tokens", "max(max_model_len, 2048)", "tokens per iteration; a longer prompt is rejected"},
      {"preemption", "recompute",
       "newest running request is preempted: recompute | swap (KV over the GPU's PCIe, both ways)"},
      {"max_waiting_tokens", "0",
       "TGI wait rule: admit only after this many decode steps, or when enough fit at once (0: off)"},
      {"waiting_served_ratio", "1.2", "TGI wait rule: 'enough' = this x the running requests"},
      {"prefix_caching", "false",
       "share KV blocks of equal prompt prefixes (vLLM v1 APC; kv=paged; needs a trace's hash_ids or --prefix)"},
      {"usage_context", "none",
       "api_server | llm: max_num_batched_tokens and max_num_seqs not given follow vLLM's defaults for the GPU (vllm "
       "serve | offline LLM); none: the defaults above"},
      {"decode_after_admission", "false",
       "TGI's batching loop: an iteration that admitted into a running batch is followed by one that admits nobody"},
      {"capacity_scheduler", "none",
       "TensorRT-LLM capacity policy, instead of kv/reserve_to: guaranteed_no_evict (reserve "
       "ceil((prompt+max_tokens)/block_size) blocks) | max_utilization (paged, whole prompt free to admit, pause the "
       "last started) | none"},
      {"enable_chunked_context", "false",
       "TensorRT-LLM chunked context: decodes first, then prompt chunks rounded down to multiples of block_size "
       "(tokens_per_block) to fill max_num_batched_tokens"},
      {"scheduling_policy", "fcfs",
       "fcfs: arrival order, the newest running request preempted | priority: vLLM's --scheduling-policy priority, "
       "waiting by (priority, arrival), smaller first, the lowest-ranked running request preempted | sjf: the same "
       "ranked by job length (sjf_by)"},
      {"sjf_by", "output",
       "scheduling_policy=sjf's job length: output (the true output length, which no server knows: an oracle baseline) "
       "| prompt (known on arrival)"},
      {"preempt_for_waiting", "false",
       "prefill=exclusive with priority or sjf: while the best waiting request cannot be admitted, preempt running "
       "requests ranked below it (vLLM v0 _schedule_priority_preemption; on in vllm-v0)"},
      {"free_gpu_memory_fraction", "none",
       "TensorRT-LLM's KV pool: this share of the GPU memory left after the weights and a profile run of "
       "max_num_batched_tokens (KvCacheConfig.free_gpu_memory_fraction; 0.9 in trtllm), instead of "
       "--gpu-memory-utilization's share of the whole GPU | none: --gpu-memory-utilization's"},
      {"async_scheduling", "false",
       "vLLM's --async-scheduling (default since 0.14): each step is scheduled while the one before runs, so a request "
       "arriving during an iteration waits one more step (pair it with --engine vllm-async, whose CPU work overlaps "
       "the GPU)"},
  };
  static const std::vector<PolicyOptionDoc> chunked_docs = [] {
    std::vector<PolicyOptionDoc> docs = continuous_docs;
    docs.erase(std::remove_if(docs.begin(), docs.end(),
                              [](const PolicyOptionDoc& d) {
                                return d.key == "prefill" || d.key == "enable_chunked_context" ||
                                       d.key == "preempt_for_waiting" || d.key == "free_gpu_memory_fraction";
                              }),
               docs.end());
    for (auto& d : docs) {
      if (d.key == "max_num_batched_tokens") d = {d.key, "2048", "token budget per iteration"};
    }
    docs.push_back({"long_prefill_token_threshold", "0", "cap on one request's chunk (0: off)"});
    docs.push_back({"max_num_partial_prefills", "0",
                    "requests whose prefill may be unfinished after a step; a new one that would be cut waits (vLLM "
                    "v0's concurrent partial prefills; 0: no bound, as vLLM v1 and Sarathi-Serve)"});
    docs.push_back({"admission", "first_chunk",
                    "first_chunk: admit when the first chunk's KV fits | full_prompt: only when the KV of the whole "
                    "prompt is free (vLLM v1 scheduler_reserve_full_isl, Sarathi-Serve)"});
    return docs;
  }();
  // SGLang's server arguments and environment variables, under their own names
  // (policies/sglang/sglang_policy.h cites each).
  static const std::vector<PolicyOptionDoc> sglang_docs = {
      {"page_size", "1", "tokens per KV page (SGLang --page-size); also the radix cache's match granularity"},
      {"chunked_prefill_size", "auto",
       "prefill tokens per batch and the chunk size; auto: by GPU memory, 2048 below 35 GiB, 4096 below 60, 8192 below "
       "160 (H100, H200), else 16384"},
      {"max_prefill_tokens", "16384", "prefill tokens per batch (the first request may exceed it)"},
      {"max_running_requests", "auto",
       "most requests running; auto: min(clamp(KV tokens / context x 512, 2048, 4096), KV tokens / 2)"},
      {"schedule_policy", "fcfs",
       "fcfs: arrival order | lpm: longest radix-cache prefix first (fcfs above 128 waiting)"},
      {"prefix_caching", "true",
       "the radix cache: share KV of equal prompt prefixes (needs a trace's hash_ids or --prefix)"},
      {"init_new_token_ratio", "0.7",
       "admission's starting share of running requests' max_new_tokens reserved (SGLANG_INIT_NEW_TOKEN_RATIO)"},
      {"min_new_token_ratio_factor", "0.14",
       "floor of the ratio, as a fraction of its initial value (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR)"},
      {"new_token_ratio_decay_steps", "600",
       "decode steps over which the ratio decays from initial to floor (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS)"},
      {"schedule_conservativeness", "1.0", "multiplies the initial ratio (capped at 1)"},
      {"retract_decode_steps", "20",
       "decode steps per remaining request in the ratio set after a retraction (SGLANG_RETRACT_DECODE_STEPS)"},
      {"enable_mixed_chunk", "false",
       "a prefill batch also runs the running requests' decode steps, their tokens taken from its budgets "
       "(--enable-mixed-chunk)"},
      {"disable_overlap_schedule", "false",
       "false: the overlap scheduler chooses each batch while the one before runs, so a request arriving during an "
       "iteration waits one more (SGLang's default since 0.4) | true: --disable-overlap-schedule"},
      {"num_reserved_decode_tokens", "512",
       "a decode pool's KV kept free per request it holds before it preallocates another hand-off "
       "(--num-reserved-decode-tokens; only in a P/D decode pool)"},
      {"cuda_graph_max_bs", "auto",
       "largest decode batch run as a CUDA graph (--cuda-graph-max-bs), in place of the engine profile's; auto: "
       "SGLang's rule by GPU memory and TP < 4 / >= 4, 8 below 20 GiB, 24 / 80 below 35, 32 / 160 below 60, 256 / 512 "
       "below 160 (H100, H200), else 512"},
      {"mem_fraction_static", "auto",
       "share of GPU memory for weights + KV pool, the rest kept for activations and CUDA graphs "
       "(--mem-fraction-static; --gpu-memory-utilization does not apply); auto: SGLang's rule, (memory - reserved) / "
       "memory, reserved 512 MiB + 1.5 x chunked_prefill_size + 2 x cuda_graph_max_bs + TP/8 GiB, at least 10 GiB "
       "above 60 GiB (0.835 on an H100 at TP 1)"},
  };
  static const std::vector<PolicyOptionDoc> example_sjf_docs = {
      {"max_num_seqs", "64", "most requests running at once"},
  };
  if (base == "static") return static_docs;
  if (base == "continuous") return continuous_docs;
  if (base == "sglang") return sglang_docs;
  if (base == "example-sjf") return example_sjf_docs;
  return chunked_docs;
}

const std::vector<std::string>& policy_bases() {
  static const std::vector<std::string> bases = {"static", "continuous", "chunked-prefill", "sglang", "example-sjf"};
  return bases;
}

namespace {

const PolicyInfo& find_policy(std::string_view name) {
  for (const PolicyInfo& info : registered_policies()) {
    if (info.name == name) return info;
  }
  std::vector<std::string> names;
  for (const PolicyInfo& info : registered_policies()) names.push_back(info.name);
  throw UserError(fmt::format("--policy: unknown policy '{}' (known: {})", name, fmt::join(names, ", ")));
}

ContinuousPolicyConfig continuous_config(const PolicyOptions& o, bool chunked) {
  ContinuousPolicyConfig c;
  // TensorRT-LLM's chunked context on the continuous base (TRT-LLM's own option name).
  const bool context_chunking = !chunked && o.get_bool("enable_chunked_context", false);
  c.chunked = chunked || context_chunking;
  c.block_size = static_cast<int32_t>(o.get_int("block_size", kDefaultBlockSize, 1, 1024));
  if (context_chunking) {
    // ContextChunkingConfig{kFIRST_COME_FIRST_SERVED, tokensPerBlock}: the chunk unit is the
    // KV block (tensorrt_llm/_torch/pyexecutor/_util.py; trtGptModelInflightBatching.cpp).
    c.generation_first = true;
    c.chunk_unit = c.block_size;
  }
  const std::string capacity =
      o.get_choice("capacity_scheduler", "none", {"none", "guaranteed_no_evict", "max_utilization"});
  if (capacity == "none") {
    c.paged = o.get_choice("kv", "paged", {"paged", "reserve"}) == "paged";
    c.reserve_max_model_len = o.get_choice("reserve_to", "output", {"output", "max_model_len"}) == "max_model_len";
  } else {
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
  c.watermark = o.get_double("watermark", 0.0, 0.0, 0.5);
  if (!c.chunked) {
    c.mixed_prefill = o.get_choice("prefill", "mixed", {"mixed", "exclusive"}) == "mixed";
  }
  c.max_num_seqs = o.get_int("max_num_seqs", 256, 1, 1 << 20);
  c.max_num_batched_tokens = o.get_int("max_num_batched_tokens", chunked ? 2048 : 0, chunked ? 1 : 0, 1 << 24);
  const std::string usage = o.get_choice("usage_context", "none", {"none", "api_server", "llm"});
  c.usage_context = usage == "api_server" ? ContinuousPolicyConfig::UsageContext::api_server
                    : usage == "llm"      ? ContinuousPolicyConfig::UsageContext::llm_class
                                          : ContinuousPolicyConfig::UsageContext::none;
  c.max_num_seqs_set = o.values().count("max_num_seqs") > 0;
  c.max_num_batched_tokens_set = o.values().count("max_num_batched_tokens") > 0;
  c.swap = o.get_choice("preemption", "recompute", {"recompute", "swap"}) == "swap";
  // Read even with kv=reserve, where a preset's value is ignored (a user's is refused above).
  c.prefix_caching = o.get_bool("prefix_caching", false) && c.paged;
  c.max_waiting_tokens = o.get_int("max_waiting_tokens", 0, 0, 1 << 24);
  c.waiting_served_ratio = o.get_double("waiting_served_ratio", 1.2, 0.0, 1e6);
  c.decode_after_admission = o.get_bool("decode_after_admission", false);
  c.async_scheduling = o.get_bool("async_scheduling", false);
  const std::string order = o.get_choice("scheduling_policy", "fcfs", {"fcfs", "priority", "sjf"});
  c.scheduling_policy = order == "priority" ? SchedulingPolicy::priority
                        : order == "sjf"    ? SchedulingPolicy::sjf
                                            : SchedulingPolicy::fcfs;
  // Read whatever the order, so that a preset may set it; make_policy refuses a user's sjf_by
  // without sjf.
  c.sjf_by = o.get_choice("sjf_by", "output", {"output", "prompt"}) == "prompt" ? JobLength::prompt : JobLength::output;
  if (!chunked) {
    // v0's _schedule_priority_preemption exists in _schedule_default (exclusive prefill) only;
    // elsewhere a preset's value is ignored (a user's is refused by make_policy).
    c.preempt_for_waiting = o.get_bool("preempt_for_waiting", false) && !c.chunked && !c.mixed_prefill &&
                            c.scheduling_policy != SchedulingPolicy::fcfs;
  }
  if (!chunked) {
    // TensorRT-LLM's option on its base; "none" (as the docs show it) keeps vLLM's rule.
    if (o.has("free_gpu_memory_fraction") && o.values().at("free_gpu_memory_fraction") == "none") {
      (void)o.get_choice("free_gpu_memory_fraction", "none", {"none"});
    } else {
      c.free_gpu_memory_fraction = o.get_double("free_gpu_memory_fraction", 0.0, 0.01, 1.0);
    }
  }
  if (chunked) {
    c.long_prefill_token_threshold = o.get_int("long_prefill_token_threshold", 0, 0, 1 << 24);
    c.max_num_partial_prefills = o.get_int("max_num_partial_prefills", 0, 0, 1 << 20);
    // MAX_UTILIZATION needs the whole prompt free unless the user says otherwise.
    c.admit_full_prompt = o.get_choice("admission", c.admit_full_prompt ? "full_prompt" : "first_chunk",
                                       {"first_chunk", "full_prompt"}) == "full_prompt";
  }
  return c;
}

SglangPolicyConfig sglang_config(const PolicyOptions& o) {
  SglangPolicyConfig c;
  c.page_size = static_cast<int32_t>(o.get_int("page_size", 1, 1, 1024));
  // "auto" (0 inside): SGLang's own default, worked out when the policy meets the GPU and KV.
  auto is_auto = [&o](const std::string& key) {
    if (!o.has(key) || o.values().at(key) != "auto") return false;
    (void)o.get_choice(key, "auto", {"auto"});  // read, so that check_all_used accepts it
    return true;
  };
  auto int_or_auto = [&](const std::string& key, int64_t max) -> int64_t {
    return is_auto(key) ? 0 : o.get_int(key, 0, 1, max);
  };
  c.chunked_prefill_size = int_or_auto("chunked_prefill_size", 1 << 24);
  c.max_prefill_tokens = o.get_int("max_prefill_tokens", 16384, 1, 1 << 24);
  c.max_running_requests = int_or_auto("max_running_requests", 1 << 20);
  c.lpm = o.get_choice("schedule_policy", "fcfs", {"fcfs", "lpm"}) == "lpm";
  c.radix_cache = o.get_bool("prefix_caching", true);
  c.init_new_token_ratio = o.get_double("init_new_token_ratio", 0.7, 0.0, 1.0);
  c.min_new_token_ratio_factor = o.get_double("min_new_token_ratio_factor", 0.14, 0.0, 1.0);
  c.new_token_ratio_decay_steps = o.get_int("new_token_ratio_decay_steps", 600, 1, 1 << 30);
  c.schedule_conservativeness = o.get_double("schedule_conservativeness", 1.0, 0.0, 1e6);
  c.retract_decode_steps = o.get_int("retract_decode_steps", 20, 0, 1 << 20);
  c.mixed_chunk = o.get_bool("enable_mixed_chunk", false);
  c.overlap_schedule = !o.get_bool("disable_overlap_schedule", false);
  c.mem_fraction_static = is_auto("mem_fraction_static") ? 0.0 : o.get_double("mem_fraction_static", 0.0, 0.01, 0.99);
  c.cuda_graph_max_bs = int_or_auto("cuda_graph_max_bs", 1 << 20);
  c.num_reserved_decode_tokens = o.get_int("num_reserved_decode_tokens", 512, 0, 1 << 24);
  return c;
}

ExampleSjfConfig example_sjf_config(const PolicyOptions& o) {
  ExampleSjfConfig c;
  c.max_num_seqs = o.get_int("max_num_seqs", 64, 1, 1 << 20);
  return c;
}

StaticPolicyConfig static_config(const PolicyOptions& o) {
  StaticPolicyConfig c;
  c.batch_size = o.get_int("batch_size", 8, 1, 1 << 20);
  c.batch_timeout_s = o.get_double("batch_timeout_s", 0.0, 0.0, 1e9);
  c.pad = o.get_bool("pad", true);
  c.release_per_request = o.get_choice("release", "batch", {"batch", "request"}) == "request";
  c.max_new_tokens = o.get_int("max_new_tokens", 0, 0, 1 << 24);
  return c;
}

}  // namespace

const std::string& policy_base(std::string_view name) { return find_policy(name).base; }
const std::string& policy_engine(std::string_view name) { return find_policy(name).engine; }

std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& options) {
  const PolicyInfo& info = find_policy(name);
  PolicyOptions merged;
  for (const auto& [k, v] : info.preset) merged.set(k, v);
  for (const auto& [k, v] : options.values()) merged.set(k, v);  // the user's value wins

  // An option the user set explicitly that the resolved KV manager ignores is a mistake worth
  // naming (a preset's own values are not: `orca kv=paged` is a legitimate ablation).
  if (info.base == "continuous" || info.base == "chunked-prefill") {
    const auto& set = merged.values();
    const std::string capacity = set.count("capacity_scheduler") > 0 ? set.at("capacity_scheduler") : "none";
    // capacity_scheduler decides the KV manager when set (continuous_config refuses kv then).
    const bool paged = capacity == "max_utilization" ||
                       (capacity != "guaranteed_no_evict" && (set.count("kv") == 0 || set.at("kv") == "paged"));
    // GUARANTEED_NO_EVICT counts its reservations in blocks of block_size.
    const bool blocks = paged || capacity == "guaranteed_no_evict";
    for (const auto& [key, value] : options.values()) {
      const bool paged_only = (key == "block_size" && !blocks) || key == "watermark" || key == "prefix_caching";
      if ((paged_only && !paged) || (key == "reserve_to" && paged)) {
        throw UserError(
            fmt::format("--policy-opt {}={}: only applies with kv={} (policy '{}' "
                        "uses kv={})",
                        key, value, paged ? "reserve" : "paged", info.name, paged ? "paged" : "reserve"));
      }
    }
    // The scheduling order's own options, when the order (or the iteration mode) they need is
    // not the one the policy runs.
    const auto merged_value = [&set](const char* key, const char* fallback) {
      return set.count(key) > 0 ? set.at(key) : std::string(fallback);
    };
    const std::string order = merged_value("scheduling_policy", "fcfs");
    const bool exclusive = info.base == "continuous" && merged_value("prefill", "mixed") == "exclusive" &&
                           !PolicyOptions(set).get_bool("enable_chunked_context", false);
    for (const auto& [key, value] : options.values()) {
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

  std::unique_ptr<Policy> policy;
  if (info.base == "static") {
    policy = std::make_unique<StaticPolicy>(static_config(merged), info.name);
  } else if (info.base == "sglang") {
    policy = std::make_unique<SglangPolicy>(sglang_config(merged), info.name);
  } else if (info.base == "example-sjf") {
    policy = std::make_unique<ExampleSjfPolicy>(example_sjf_config(merged), info.name);
  } else {
    policy = std::make_unique<ContinuousPolicy>(continuous_config(merged, info.base == "chunked-prefill"), info.name);
  }
  merged.check_all_used(info.name);
  return policy;
}

}  // namespace batchsim
