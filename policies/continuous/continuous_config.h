// batchsim — the options of ContinuousPolicy (policies/continuous/continuous_policy.h), as the
// registration parses them (continuous_registration.cpp). What each mechanism does, and the engine
// it comes from, is said beside the part that implements it: admission, KV and preemption in
// continuous_capacity.h, the token budget and chunks in continuous_packing.h, the iteration's
// order in continuous_policy.h.
#pragma once

#include <cstdint>

#include "policies/common/scheduling_order.h"
#include "sim/kv_cache.h"

namespace batchsim {

struct ContinuousPolicyConfig {
  bool paged = true;
  int32_t block_size = kDefaultBlockSize;  // vLLM CacheConfig's default
  double watermark = 0.0;                  // fraction of blocks kept free at admission (v0: 0.01)
  bool reserve_max_model_len = false;      // kv=reserve: reserve max_model_len, not prompt+output
  bool mixed_prefill = true;               // false: vLLM v0 exclusive prefill iterations
  bool chunked = false;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 0;        // 0: max(max_model_len, 2048) (vLLM v0 default)
  int64_t long_prefill_token_threshold = 0;  // 0: off; caps one request's chunk
  int64_t max_num_partial_prefills = 0;      // requests whose prefill may be unfinished; 0: any
  bool admit_full_prompt = false;            // admission=full_prompt (chunked only)
  bool swap = false;                         // preemption=swap (else recompute)
  bool prefix_caching = false;               // share cached prompt prefixes (kv=paged only)
  int64_t max_waiting_tokens = 0;            // TGI --max-waiting-tokens (20); 0: off
  double waiting_served_ratio = 1.2;         // TGI --waiting-served-ratio
  bool decode_after_admission = false;       // TGI: an admission into a running batch, then a decode
  // TensorRT-LLM GUARANTEED_NO_EVICT (kv=reserve): reserve ceil((prompt + max_tokens) /
  // block_size) blocks, the last output token included, instead of prompt + max_tokens - 1
  // tokens.
  bool reserve_blocks_to_completion = false;
  // TensorRT-LLM's micro-batch order with chunked context: decodes before any prefill chunk,
  // and a chunk cut by the budget rounded down to a multiple of chunk_unit (0: no rounding).
  bool generation_first = false;
  int32_t chunk_unit = 0;
  // vLLM's defaults by GPU and usage context, for the limits the user did not set
  // (vllm_batch_defaults): none keeps max_num_seqs and max_num_batched_tokens as they are.
  enum class UsageContext { none, api_server, llm_class };
  UsageContext usage_context = UsageContext::none;
  bool max_num_seqs_set = true;            // false: from usage_context at attach
  bool max_num_batched_tokens_set = true;  // false: from usage_context at attach
  // The waiting queue's order and the preemption victim (policies/common/scheduling_order.h).
  SchedulingPolicy scheduling_policy = SchedulingPolicy::fcfs;
  JobLength sjf_by = JobLength::output;
  // vLLM v0 _schedule_priority_preemption (exclusive prefill, ranked policies only).
  bool preempt_for_waiting = false;
  // vLLM's async scheduling (--async-scheduling; on by default since vLLM 0.14, vllm #27614):
  // the engine core schedules step N+1 while step N runs (vllm/v1/engine/core.py
  // step_with_batch_queue, a queue of two batches), so a request that reaches the engine while
  // an iteration runs is first scheduled in the iteration after the next one. Its CPU overlap
  // is the engine profile's (hwmodel/engines/vllm-async.yaml).
  bool async_scheduling = false;
  // TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction (0.9 by default in its LLM API,
  // tensorrt_llm/llmapi/llm_args.py): the KV pool takes this share of the memory left after the
  // weights and a profile run of max_num_tokens (CostModel::kv_capacity_tokens_of_free), instead
  // of --gpu-memory-utilization's share of the whole GPU. 0: --gpu-memory-utilization's.
  double free_gpu_memory_fraction = 0;
};

}  // namespace batchsim
