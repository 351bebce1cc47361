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
// Disaggregated pools (sim/policy.h, "Disaggregated pools"): both roles, as SGLang serves them
// with --disaggregation-mode prefill|decode. Sources, python/sglang/srt/ on main (2026):
// disaggregation/prefill.py @ 000c2b9 (PrefillBootstrapQueue, event_loop_normal_disagg_prefill,
// get_next_disagg_prefill_batch_to_run, process_disagg_prefill_inflight_queue);
// disaggregation/decode.py @ 0035ca4 (DecodePreallocQueue: pop_preallocated,
// _allocatable_token_budgets, resume_retracted_reqs; DecodeTransferQueue.pop_transferred;
// get_new_prebuilt_batch, process_decode_queue, event_loop_normal/overlap_disagg_decode);
// managers/scheduler.py (init_disaggregation: 2 x max_running_requests metadata buffers on either
// side; update_running_batch); managers/schedule_batch.py (release_req: in decode mode a
// retracted request's KV is copied to the host first, offload_kv_cache);
// model_executor/model_runner_kv_cache_mixin.py (DecodeReqToTokenPool's pre_alloc_size);
// server_args.py (num_reserved_decode_tokens 512, before it SGLANG_NUM_RESERVED_DECODE_TOKENS;
// disaggregation_decode_enable_radix_cache off).
//  Prefill. Requests arrive with max_new_tokens 1 (the role's view; PrefillBootstrapQueue.
//  _process_req sets it so that PrefillAdder's estimate is exact). An arrival waits in the
//  bootstrap queue until one of the 2 x max_running_requests metadata buffers is free
//  (pop_bootstrapped), then in the waiting queue. Batches are the colocated prefill batches
//  (PrefillAdder, chunked_prefill_size, max_prefill_tokens), with batch_is_full cleared before each
//  (get_next_disagg_prefill_batch_to_run) and no running batch: a request whose prefill is done
//  goes to the inflight queue with its KV held (locked in the radix cache) until its transfer has
//  landed; then its KV stays cached, evictable, and its metadata buffer is free. No decode step
//  runs there.
//  Decode. An arrival (its prompt computed elsewhere, its first token sampled) waits in the
//  prealloc queue. Every step, before its batch is built (process_decode_queue), requests leave it
//  first come first served while a request slot (max_running_requests, plus pre_alloc_size = 2 x
//  that when it is at most 32) and a metadata buffer (2 x max_running_requests) are free and
//  max(prompt + R, prompt + min(max_new_tokens, 4096) - retractable) <= allocatable, where R is
//  num_reserved_decode_tokens, retractable the running requests' prompt + output tokens, and
//  allocatable the free KV less max(R x the requests that will decode here — running, in
//  transfer, waiting, those taken before in this pass —, the largest running request's prompt +
//  min(max_new_tokens, 4096) - retractable). Each gets KV for its prompt and its transfer starts
//  (the transfer queue): the decode radix cache is off, so nothing is shared and the whole prompt
//  moves. A landed request joins the waiting queue, and the running batch while it holds fewer
//  than max_running_requests (get_new_prebuilt_batch: a PrebuiltExtendBatch, no compute), decoding
//  in that very step. Decoding is update_running_batch's, new_token_ratio and retract_decode
//  included, except that a retracted request's KV is copied to the host (its PCIe time added to
//  the step, as swap preemption's) and freed; it waits in the retracted queue and is resumed, its
//  KV copied back (PCIe time again), first come first served while a slot is free and its tokens +
//  R fit the free KV less R per request that will decode here (resume_retracted_reqs). While a
//  request is retracted nothing is preallocated and no landed transfer is taken
//  (process_decode_queue returns early). A decode server never prefills.
//  Overlap scheduling (overlap_schedule): the prefill side lags arrivals by one step as the
//  colocated loop does (event_loop_overlap_disagg_prefill); the decode side lags landed transfers
//  (event_loop_overlap_disagg_decode polls the transfer queue while building the step after the
//  running one), not hand-offs: SGLang's router sends each request to the decode server when it
//  sends it to the prefill server, so it is preallocated while its prefill runs.
//  Differences: the simulation prefills first and hands off afterwards (sim/simulation.h), while
//  SGLang's prefill server starts a request only once the decode server has preallocated its KV
//  (the bootstrap handshake waits for it): decode memory pressure holds requests in SGLang's
//  bootstrap queue with no KV, here as prefilled KV awaiting its transfer; the handshake takes no
//  time. A decode server rejects on arrival a request for which an empty pool is too small
//  (prompt + R, prompt + min(max_new_tokens, 4096) or prompt + output tokens), where SGLang aborts
//  only a prompt beyond the pool and would wait forever for the others. Where SGLang would assert
//  (no KV left for the last running request's next token: a pool filled by requests in transfer or
//  waiting), the simulation stops with std::logic_error, and where it would hang (a retracted
//  request that never fits while the landed requests it keeps waiting hold the KV), it reports a
//  stall. Not modelled: requests that finished in the last step still count in SGLang's running
//  batch at the next preallocation pass (it is filtered afterwards, in update_running_batch); the
//  decode radix cache (--disaggregation-decode-enable-radix-cache), HiCache, a polling interval
//  above 1, the staging buffer, failed or aborted transfers.
// Invariants (asserted by tests/policies): an iteration is prefill-only or decode-only; its
// prefill tokens <= chunked_prefill_size (and <= max_prefill_tokens unless one request alone
// exceeds it); running + chunked <= max_running_requests; each request's KV covers exactly its
// computed tokens.
#pragma once

#include <deque>
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
  // Decode role: KV tokens kept free per request that will decode here when preallocating
  // (--num-reserved-decode-tokens, 512; SGLANG_NUM_RESERVED_DECODE_TOKENS before it). Not a
  // --policy-opt yet (policies/registry.cpp's sglang options do not list it).
  int64_t num_reserved_decode_tokens = 512;
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
  // KV held for transfers (prefill role) is no work: nothing is left to schedule for it.
  bool idle() const override {
    return waiting_.empty() && running_.empty() && chunked_ < 0 && intake_.empty() && bootstrap_.empty() &&
           prealloc_.empty() && transfer_queue_.empty() && retracted_.empty();
  }
  bool repeat_decode_step(const Batch& batch) override;
  // Both disaggregated roles, as SGLang's --disaggregation-mode prefill|decode serves them (the
  // header comment, "Disaggregated pools").
  std::string unsupported_role_reason(PoolRole /*role*/) const override { return ""; }
  void release_held_kv(RequestId id) override;
  void on_kv_received(RequestId id, SimTime now) override;
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
  // Disaggregated roles. Prefill: requests waiting for a metadata buffer (the bootstrap queue),
  // and the buffers taken (by waiting, prefilling and inflight requests). Decode: requests
  // waiting for their KV to be preallocated, in transfer (landed ones not yet taken included),
  // landed and waiting for a place in the running batch, and retracted to the host; the request
  // slots (max_running_requests plus pre_alloc_size).
  size_t num_bootstrapping() const { return bootstrap_.size(); }
  int64_t metadata_buffers_in_use() const { return metadata_buffers_in_use_; }
  size_t num_preallocating() const { return prealloc_.size(); }
  size_t num_transferring() const { return transfer_queue_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_retracted() const { return retracted_.size(); }
  int64_t decode_request_slots() const { return request_slots_; }

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
  // PrefillAdder's answer after a request (schedule_policy.py AddReqResult): go on, stop for
  // want of KV tokens (the batch is full), or stop for another budget.
  enum class AddResult { kContinue, kNoToken, kOther };
  struct PrefillBudget;
  // PrefillAdder.add_chunked_req: the next chunk of the request being chunked.
  void add_chunked_request(PrefillBudget& budget, Batch& batch);
  // PrefillAdder.add_one_req for waiting request `id`; `added` when it joined the batch (which
  // may still end admission).
  AddResult add_waiting_request(PrefillBudget& budget, RequestId id, Batch& batch, bool& added);
  // update_running_batch: retraction if needed, then one decode step for every running request.
  void schedule_decode(Batch& batch);
  int64_t pages_for_next_decode(std::span<const RequestId> requests) const;
  // One decode step for each of `requests`, whose next tokens' pages were counted free.
  void grow_and_decode(std::span<const RequestId> requests, Batch& batch);
  // retract_decode's victim: back to the waiting queue to be prefilled again (colocated), or,
  // in the decode role, its KV copied to the host and the request to the retracted queue.
  void retract(RequestId id, Batch& batch);
  void add_step(RequestId id, int64_t new_tokens, Batch& batch);
  // Where a request the scheduler receives goes: the waiting queue (colocated), the bootstrap
  // queue (prefill role); in the decode role what it receives through the overlap intake is a
  // landed transfer.
  void receive(RequestId id);

  // Prefill role: get_next_disagg_prefill_batch_to_run, after pop_bootstrapped.
  void build_prefill_role_batch(Batch& batch);
  // Decode role: process_decode_queue, then get_next_disagg_decode_batch_to_run.
  void build_decode_role_batch(Batch& batch);
  // A hand-off reaching the decode role: checked, then queued for preallocation.
  void arrive_for_decode(RequestId id);
  // The running requests' figures that DecodePreallocQueue's budget reads: their prompt +
  // output tokens (what retracting them all would free) and the room the largest of them may
  // still need beyond that (_need_space_for_single_req; 0 with nothing running).
  struct RunningFootprint {
    int64_t retractable = 0;
    int64_t single_request_need = 0;
  };
  RunningFootprint running_footprint() const;
  // Requests that will decode here and hold a request slot: running, in transfer, waiting.
  int64_t decoding_requests() const {
    return static_cast<int64_t>(running_.size() + transfer_queue_.size() + waiting_.size());
  }
  int64_t free_kv_tokens() const { return kv_->free_blocks() * config_.page_size; }
  // pop_preallocated's test of request `id` (changes nothing).
  bool preallocation_fits(RequestId id, const RunningFootprint& footprint) const;
  // resume_retracted_reqs's test of request `id` with `allocatable` tokens left in this pass.
  bool resumption_fits(RequestId id, int64_t allocatable) const;
  // resume_retracted_reqs' budget at the start of a pass: the free KV less R per request that
  // will decode here.
  int64_t resumption_allocatable() const {
    return free_kv_tokens() - config_.num_reserved_decode_tokens * decoding_requests();
  }
  // process_decode_queue's parts; each returns whether it moved a request.
  bool resume_retracted(Batch& batch);
  bool preallocate();
  bool take_landed();
  // get_new_prebuilt_batch: waiting requests join the running batch while it has room.
  bool join_running();
  // Whether the decode role's next schedule() would move no request between its queues (the
  // rest of the repeat test is the colocated one).
  bool decode_queues_settled() const;
  // A copy of `tokens` tokens of KV between the GPU and the host, over each GPU's PCIe link.
  SimTime host_copy_time(int64_t tokens) const;

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
  // Disaggregated roles (sim/policy.h). Prefill: the bootstrap queue, the metadata buffers
  // taken, and which finished requests' KV is held for its transfer.
  PoolRole role_ = PoolRole::kColocated;
  std::deque<RequestId> bootstrap_;
  int64_t metadata_buffers_in_use_ = 0;
  std::vector<uint8_t> held_;
  // Decode: the prealloc queue, the transfer queue (in preallocation order), the retracted
  // queue, each request's stage, how many landed requests the transfer queue holds, and the
  // request slots. (waiting_ is SGLang's waiting queue of landed and resumed requests.)
  enum class RemoteStage : uint8_t { kNone, kTransferring, kLanded };
  std::deque<RequestId> prealloc_;
  std::vector<RequestId> transfer_queue_;
  std::deque<RequestId> retracted_;
  std::vector<RemoteStage> remote_stage_;
  int64_t landed_ = 0;
  int64_t request_slots_ = 0;
};

}  // namespace batchsim
