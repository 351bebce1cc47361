// batchsim — SGLang's scheduler (the `sglang` preset).
//
// SGLang schedules unlike vLLM in ways that are not options of one loop, so it has its own
// class; the KV cache (PagedKvCache with prefix caching, the radix cache's stand-in) and the
// arrival checks are shared with ContinuousPolicy. Sources, sgl-project/sglang under
// python/sglang/srt/ (read 2026 from the stored copies; the rules below have the same shape
// from v0.4 to main, and where versions differ the newest is followed):
//   managers/schedule_policy.py @ 00550cd (main): SchedulePolicy.calc_priority, PrefillAdder;
//   managers/scheduler.py (v0.4-v0.5 and main @ 0003215): get_next_batch_to_run,
//     get_new_batch_prefill, update_running_batch, self_check_during_idle;
//   managers/schedule_batch.py @ 000eaff (v0.5): check_decode_mem, retract_decode, release_req;
//   managers/scheduler_components/new_token_ratio_tracker.py @ 1a882c5 (main);
//   environ.py (SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
//     SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600, SGLANG_RETRACT_DECODE_STEPS 20,
//     SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096);
//   server_args.py (main): schedule_policy "fcfs", max_prefill_tokens 16384, page_size 1,
//     _handle_gpu_memory_settings (chunked_prefill_size);
//   model_executor model_runner's _resolve_max_num_reqs (main): max_running_requests.
//
// One iteration, as SGLang's get_next_batch_to_run:
//  1. Prefill first. Unless the running batch is marked full (batch_is_full) or nothing waits,
//     and no chunked prefill is in progress, a PrefillAdder packs a prefill-only batch: the
//     chunked request's next chunk, then waiting requests in schedule_policy order (fcfs, or lpm:
//     longest cached prefix first). Budgets: chunked_prefill_size tokens per batch (the chunk
//     size; the one request that does not fit is cut there and becomes the chunked request,
//     at most one at a time), max_prefill_tokens, max_running_requests, and KV: a request is
//     admitted only while its extend tokens + min(max_new_tokens left, 4096) + one page stay below
//     free (and evictable) KV minus what the running requests are expected to still write:
//     Σ min(max_new_tokens left, 4096) × new_token_ratio, plus what this batch has taken.
//     A request refused for KV (NO_TOKEN) or for max_running_requests marks the batch full:
//     no prefill until a running request finishes or is retracted.
//  2. Otherwise every running request decodes one token. If the KV for that step is not free,
//     retract_decode retracts requests — fewest generated tokens first, the longest prompt
//     among equals — until it is (always at least one, never the last), sends them to the back of
//     the waiting queue to be prefilled again (prompt + generated, like vLLM's recompute), and
//     sets new_token_ratio to (Σ generated + 20 × remaining) / Σ max_new_tokens of those left,
//     capped at 1. A decode step without retraction lowers new_token_ratio by its decay, down to
//     its minimum; an idle server resets it to its initial value.
// enable_mixed_chunk (--enable-mixed-chunk, off by default; aiconfigurator's generated
// deployments turn it on): a prefill batch formed while requests are running takes every running
// request's decode step too (get_new_batch_prefill: prepare_for_decode, then
// ScheduleBatch.mix_with_running), and PrefillAdder starts with the prefill budgets
// (max_prefill_tokens, chunked_prefill_size) and the KV budget less one token per running request
// (mixed_with_decode_tokens = running_bs). Such a step neither decays the ratio nor retracts
// (that is update_running_batch's, the decode-only path). If the decodes' next tokens do not fit
// after the prefill took its KV, the step stays prefill-only (SGLang would fail to allocate).
// The overlap scheduler's one step of lag for a new request (overlap_schedule, option
// disable_overlap_schedule, off as in SGLang) is policies/common/schedule_ahead.h's;
// hwmodel/engines/sglang.yaml models its CPU overlap.
// Not modelled: priority scheduling and its preemption,
// hierarchical cache, speculative decoding, the ignore_eos admission path. Differences of the
// stand-in cache: prefixes are matched in whole hash blocks of the workload (a trace's hash_ids
// or --prefix), not token by token; a prefix is shared within the prefill batch that computes
// it (vLLM v1's rule) where SGLang's tree holds it only after that prefill; admission's budget
// counts an evictable prefix the request itself pins as still free (SGLang re-checks after
// locking it), and the cache then refuses the admission if it does not fit; eviction follows
// vLLM v1's free queue (least recently freed block first, a request's tail before its head)
// where SGLang's RadixCache.evict takes the least recently accessed leaves.
// Where SGLang would assert (no KV left for the one request left after retraction, which a
// chunked prefill can hold), the chunked request is retracted too.
// Invariants (asserted by tests/policies): an iteration is prefill-only or decode-only; its
// prefill tokens <= chunked_prefill_size (and <= max_prefill_tokens unless one request alone
// exceeds it); running + chunked <= max_running_requests; each request's KV covers exactly its
// computed tokens.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "policies/common/schedule_ahead.h"
#include "policies/continuous/continuous_policy.h"
#include "sim/policy.h"

namespace batchsim {

struct SglangPolicyConfig {
  // SGLang's default page_size is 1 (one token per page): KV is allocated token by token and
  // the radix tree matches any prefix length. PagedKvCache with block_size 1 is exactly that.
  int32_t page_size = 1;
  int64_t chunked_prefill_size = 0;  // 0: from the GPU's memory (sglang_chunked_prefill_size)
  int64_t max_prefill_tokens = 16384;
  int64_t max_running_requests = 0;           // 0: from the KV capacity (sglang_max_running_requests)
  bool lpm = false;                           // schedule_policy=lpm (else fcfs, SGLang's default)
  bool radix_cache = true;                    // prefix sharing (disable_radix_cache=False)
  double init_new_token_ratio = 0.7;          // SGLANG_INIT_NEW_TOKEN_RATIO
  double min_new_token_ratio_factor = 0.14;   // SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
  int64_t new_token_ratio_decay_steps = 600;  // SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
  double schedule_conservativeness = 1.0;
  int64_t retract_decode_steps = 20;   // SGLANG_RETRACT_DECODE_STEPS
  int64_t clip_max_new_tokens = 4096;  // SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
  bool mixed_chunk = false;            // --enable-mixed-chunk (off by default)
  // The overlap scheduler (on unless --disable-overlap-schedule): its one step of lag for a new
  // request (policies/common/schedule_ahead.h); its CPU overlap is the engine's (hwmodel/engines/sglang.yaml).
  bool overlap_schedule = true;
  // The share of GPU memory for weights + KV pool (--mem-fraction-static); 0: SGLang's rule for
  // the GPU and TP degree (sglang_mem_fraction_static). The KV pool is what it leaves after the
  // weights (CostModel::kv_capacity_tokens_static); --gpu-memory-utilization does not apply.
  double mem_fraction_static = 0;
  // The largest decode batch captured as a CUDA graph (--cuda-graph-max-bs); 0: SGLang's rule
  // for the GPU and TP (sglang_cuda_graph_max_bs). It replaces the engine profile's
  // cuda_graphs.max_tokens and enters the auto mem_fraction_static's reserve.
  int64_t cuda_graph_max_bs = 0;
};

// chunked_prefill_size by total GPU memory (server_args.py _handle_gpu_memory_settings):
// < 35 GiB 2048, < 60 GiB 4096, < 160 GiB 8192 (H100, H200), else 16384 (B200, MI300).
int64_t sglang_chunked_prefill_size(int64_t gpu_memory_bytes);
// mem_fraction_static when not given, as SGLang works it out from the device's total memory
// (server_args.py _handle_gpu_memory_settings since sglang #10975, 2025-09-27, and #11076):
// (gpu_mem - reserved) / gpu_mem rounded to 3 decimals, gpu_mem in MiB, reserved = 512 MiB +
// 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + tp / 8 GiB, at least 10 GiB
// on a GPU of more than 60 GiB; cuda_graph_max_bs by memory: 8 below 20 GiB, 24 below 35 (80
// at TP >= 4), 32 below 60 (160), 256 below 160 (512), else 512. H100 80 GB at TP 1: 13,440 MiB,
// 0.835. Not modelled: DP attention, speculative decoding and piecewise CUDA graphs (off by
// default there) reserve more.
// `cuda_graph_max_bs` 0: sglang_cuda_graph_max_bs's.
double sglang_mem_fraction_static(int64_t gpu_memory_bytes, int tp, int64_t chunked_prefill_size,
                                  int64_t cuda_graph_max_bs = 0);
// cuda_graph_max_bs when not given, by the same chain over the device's memory (server_args.py
// _handle_gpu_memory_settings): 8 below 20 GiB, 24 below 35 (80 at TP >= 4), 32 below 60 (160),
// 256 below 160 (512: H100, H200), else 512; 160 without a known device. (Before sglang
// #10975, 0.4 to 0.5.2, 160 on every GPU of 25 GB or more: the `sglang` engine profile's.)
int64_t sglang_cuda_graph_max_bs(int64_t gpu_memory_bytes, int tp);
// The rule before #10975 (sglang #7054, 2025-06-10: SGLang 0.4.7 to 0.5.2): reserved = (2.8 +
// tp / 10) GiB below 35 GiB, (9.5 + tp / 2) GiB below 90 (H100, A100-80GB), (12 + tp / 2) GiB
// below 160 (H20, H200), else 32 GiB. H100 80 GB at TP 1: 0.874.
double sglang_mem_fraction_static_2025(int64_t gpu_memory_bytes, int tp);
// max_running_requests when not given (model_runner _resolve_max_num_reqs):
// min(clamp(capacity / context_len x 512, 2048, 4096), capacity / 2).
int64_t sglang_max_running_requests(int64_t kv_capacity_tokens, int64_t context_len);

class SglangPolicy final : public Policy {
 public:
  SglangPolicy(SglangPolicyConfig config, std::string name);
  std::string_view name() const override { return name_; }
  void attach(PolicyEnv& env) override;
  void on_arrival(RequestId id, SimTime now) override;
  void schedule(SimTime now, Batch& batch) override;
  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) override;
  bool idle() const override { return waiting_.empty() && running_.empty() && chunked_ < 0 && intake_.empty(); }
  bool repeat_decode_step(const Batch& batch) override;
  // SGLang's own disaggregation (--disaggregation-mode prefill|decode: a bootstrap server,
  // the decode side's prealloc and transfer queues) is not modelled.
  std::string unsupported_role_reason(PoolRole role) const override {
    if (role == PoolRole::kColocated) return "";
    return "the sglang policy does not model SGLang's disaggregation mode (--disaggregation-mode "
           "prefill|decode); use a continuous or chunked-prefill policy in the pools";
  }
  const KvCacheManager& kv_cache() const override { return *kv_; }
  // SGLang sizes its KV pool by mem_fraction_static (SglangPolicyConfig::mem_fraction_static).
  std::optional<KvSizing> kv_sizing(const CostModel& cost_model, double gpu_memory_utilization) const override;
  // cuda_graph_max_bs, given or by SGLang's rule.
  std::optional<int64_t> cuda_graph_max_batch(const HardwareProfile& gpu, int tp) const override;

  const SglangPolicyConfig& config() const { return config_; }
  double new_token_ratio() const { return new_token_ratio_; }
  double min_new_token_ratio() const { return min_ratio_; }
  double new_token_ratio_decay() const { return decay_; }
  size_t num_running() const { return running_.size() + (chunked_ >= 0 ? 1 : 0); }
  bool batch_is_full() const { return batch_is_full_; }
  // Whether the last schedule() returned a prefill batch (else decodes only).
  bool last_was_prefill() const { return last_was_prefill_; }
  // Decode items the last prefill batch carried after its prefill items (enable_mixed_chunk).
  size_t last_mixed_decodes() const { return mixed_decodes_; }

 private:
  // The configured chunked_prefill_size, or SGLang's default for a device of this memory.
  int64_t chunked_prefill_size(int64_t gpu_memory_bytes) const;
  // schedule() on the requests the scheduler has received (all but intake_'s).
  void build_batch(Batch& batch);
  // SGLang's max_new_tokens: the client's limit (PolicyEnv::output_limit), within the KV pool.
  int64_t max_new_tokens(RequestId id) const;
  // min(max_new_tokens - generated, clip): what admission expects a request still to write.
  int64_t expected_new_tokens(RequestId id) const;
  int64_t ceil_page(int64_t tokens) const;
  // SchedulePolicy.calc_priority for lpm: the waiting queue by longest cached prefix.
  void sort_waiting_by_prefix();
  // get_new_batch_prefill; false when no prefill batch was formed.
  bool schedule_prefill(Batch& batch);
  // update_running_batch: retraction if needed, then one decode step for every running request.
  void schedule_decode(Batch& batch);
  int64_t pages_for_next_decode(std::span<const RequestId> requests) const;
  // One decode step for each of `requests`, whose next tokens' pages were counted free.
  void grow_and_decode(std::span<const RequestId> requests, Batch& batch);
  void retract(RequestId id);
  void add_step(RequestId id, int64_t new_tokens, Batch& batch);

  SglangPolicyConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<PagedKvCache> kv_;
  std::vector<RequestId> waiting_;
  std::vector<RequestId> running_;      // the running (decoding) batch, in merge order
  RequestId chunked_ = -1;              // the request whose prefill is cut into chunks
  std::vector<RequestId> prefilled_;    // admitted by the last prefill batch, merged at its end
  size_t mixed_decodes_ = 0;            // running requests the last prefill batch decoded
  std::vector<uint8_t> finished_flag_;  // bytes, not bits: read for every running request at each finish
  bool batch_is_full_ = false;
  bool decode_shrank_ = false;     // a running request finished since the last decode step
  bool repeatable_ = false;        // the last schedule() decoded without retracting
  ScheduleAheadIntake intake_;     // overlap_schedule: arrivals not yet in the waiting queue
  bool last_was_prefill_ = false;  // the last schedule() returned a prefill batch
  double new_token_ratio_ = 0;
  double init_ratio_ = 0, min_ratio_ = 0, decay_ = 0;
};

}  // namespace batchsim
