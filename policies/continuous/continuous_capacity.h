// batchsim — ContinuousPolicy's capacity: which requests hold KV, who is admitted into it, and who
// leaves it when it runs out.
//
// The first of TensorRT-LLM's two scheduling levels: its CapacityScheduler
// (cpp/include/tensorrt_llm/batch_manager/capacityScheduler.h and
// cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp) decides, under a CapacitySchedulerPolicy,
// which active requests fit in the KV cache (MaxUtilizationScheduler, GuaranteedNoEvictScheduler)
// and which started ones are paused; only those it returns reach the micro-batch scheduler,
// which is this policy's packing (continuous_packing.h). vLLM's counterparts are the KV cache
// manager's allocate_slots and the `waiting` / `running` / `swapped` queues of its scheduler.
// ContinuousCapacity owns the KV cache manager (sim/kv_cache.h) and those queues: admission from
// `waiting` (the room it needs, the watermark, the prefix-cache hit, TGI's wait rule), the growth
// of running requests, the preemption victim and its swap or recompute, swap-in, and the
// disaggregated roles' held and remote KV. How many tokens a step computes is the packing's
// answer, and the order of a step's parts ContinuousPolicy's (continuous_policy.h).
//
// The options it reads (ContinuousPolicyConfig, continuous_config.h):
//   kv=paged|reserve       PagedAttention blocks allocated just in time as tokens are written
//                          (vLLM block_manager / v1 kv_cache_manager.allocate_slots), or a
//                          contiguous reservation at admission of prompt + max_tokens
//                          (reserve_to=output: TensorRT-LLM GUARANTEED_NO_EVICT and TGI reserve
//                          for the client's max_new_tokens, PolicyEnv::output_limit; without
//                          --max-tokens that is the request's output length) or of max_model_len
//                          (reserve_to=max_model_len: Orca, which cannot know the output length;
//                          the over-reservation the vLLM paper measures, section 2.3).
//   admission=full_prompt|first_chunk  (chunked only) whether a waiting request is admitted
//                          only when KV for all the tokens it knows (its prompt, plus what it
//                          generated before a recompute preemption) is free, counting its
//                          prefix-cache hit, or as soon as its first chunk fits.
//                          full_prompt: vLLM v1 `scheduler_reserve_full_isl` (default True;
//                          vllm/config/scheduler.py, checked by allocate_slots with
//                          full_sequence_must_fit in vllm/v1/core/kv_cache_manager.py; added by
//                          PR #37307, 2026-03, first released in v0.19.0) and Sarathi-Serve
//                          (sarathi/core/scheduler/sarathi_scheduler.py: can_allocate then
//                          _allocate of every prompt block, sarathi-serve main 2024-07). Only
//                          the check is modelled: the blocks are allocated chunk by chunk as v1
//                          does, whereas Sarathi-Serve holds them from admission on, so here its
//                          later chunks grow just in time like any running request.
//                          first_chunk: vLLM v1 before v0.19 (and with the option off), where a
//                          request admitted for its first chunk may be preempted by its own
//                          later chunks, recomputing what it had prefilled.
//                          Without chunking admission always needs room for the whole prefill
//                          (v0 can_allocate).
//   preemption=recompute|swap  when a running request cannot grow, the newest running request
//                          is preempted (vLLM `running.pop()`; TRT-LLM MAX_UTILIZATION pauses the
//                          last started), possibly the one being grown; no new request is
//                          admitted in a step that preempted (v1 step 2, v0 swap-in). recompute
//                          (v0 RECOMPUTE, the only mode of v1) frees its KV and sends it to the
//                          head of `waiting`, to prefill prompt + generated tokens again; swap
//                          (v0 SWAP) moves its KV to host memory over PCIe (the GPU spec's
//                          pcie_bytes_per_s, added to the iteration's time) and back when it is
//                          readmitted, before any new request (v0: no prefills while `swapped`
//                          is non-empty).
//   prefix_caching=true    vLLM v1 automatic prefix caching (vllm/v1/core/kv_cache_manager.py
//                          get_computed_blocks; SGLang RadixAttention): kv=paged only. At
//                          admission the longest cached run of the request's blocks (its
//                          prompt's, and after a recompute preemption its own output's) is shared
//                          instead of computed (sim/kv_cache.h, "Prefix caching"): the request's
//                          computed tokens start there (PolicyEnv::use_cached_prefix) and its
//                          first chunk attends to them. Needs the workload's prompt-block
//                          hashes (a trace's hash_ids or --prefix); without them nothing is
//                          shared and the results are those of prefix_caching=false.
//   max_waiting_tokens     TGI's router (text-generation-inference router/src/infer.rs
//                          batching_task): while a batch runs, new requests are prefilled only
//                          when at least floor(waiting_served_ratio x running) of them would be
//                          admitted at once, or when max_waiting_tokens decode steps have passed
//                          since the last admission (TGI's waiting_tokens counter, 1 after a
//                          prefill); meanwhile the batch decodes undisturbed. The count is a dry
//                          run of admission (KvCacheManager::admission_room). 0: off, admit
//                          whenever possible (vLLM, Orca).
//   capacity_scheduler     TensorRT-LLM's capacity policies (executor::CapacitySchedulerPolicy;
//                          cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp, main 2026-05):
//                          guaranteed_no_evict reserves ceil((prompt + max_tokens) /
//                          tokens_per_block) blocks to completion (kvCacheManager.cpp
//                          getRemainingBlocksToCompletion) and admits in order while they are
//                          free (NoEvictScheduledBlocksManager), breaking at the first that does
//                          not fit: kv=reserve counted in blocks of block_size; max_utilization
//                          needs only the next step's blocks (getNeededBlocksOneStep: the whole
//                          prompt for a first chunk, a block when a decode crosses one) and
//                          pauses the last started request (recompute) when they run out:
//                          kv=paged with admission of the whole prompt. TensorRT-LLM allocates
//                          the whole prompt's blocks at the first chunk (allocateKvCache.cpp
//                          addSequence); here later chunks grow just in time, so with chunking
//                          a later chunk may preempt where TensorRT-LLM would not.
//   watermark              fraction of blocks kept free when admitting (v0 can_allocate /
//                          can_swap_in: NEVER if total - required < watermark_blocks, OK if
//                          free - required >= watermark_blocks); growth ignores it.
//   scheduling_policy=fcfs|priority|sjf  the order of the waiting queue and the choice of the
//                          victim (policies/common/scheduling_order.h): fcfs as described here;
//                          priority as vLLM v1's --scheduling-policy priority (scheduler.py
//                          schedule(), 28be48f): waiting requests by (priority, arrival), a
//                          preempted one back at its rank, and when a running request cannot
//                          grow the victim is the lowest-ranked running request, which may be
//                          one already scheduled in this step (it leaves the batch and its
//                          tokens go back to the budget, as v1 refunds num_scheduled_tokens);
//                          when the request being grown is itself the victim, no later running
//                          request is scheduled in this step (v1: `if new_blocks is None:
//                          break`). sjf ranks the same way by prompt or output length (sjf_by;
//                          output is an oracle). The swapped queue stays FCFS (v0 keeps
//                          `swapped` in arrival order under every policy).
//   preempt_for_waiting    (prefill=exclusive, scheduling_policy priority or sjf) vLLM v0's
//                          _schedule_priority_preemption (vllm/core/scheduler.py, last at
//                          5f5271f, 2025-09, before V0's removal): in a step that admitted no
//                          prefill, while the best waiting request cannot be admitted (KV,
//                          max_num_seqs or budget) and the lowest-ranked running request ranks
//                          below it, that running request is preempted by recompute (v0 puts it
//                          back in `waiting` even in swap mode, dropping the swap-out list), so
//                          the next step admits the waiting one. v1 has no such rule: a
//                          high-priority arrival waits for room like any other. Not modelled:
//                          v0 re-sorts `waiting` only in steps that admitted no prefill, so
//                          arrivals in between keep arrival order among themselves until then;
//                          here the queue is always in rank order.
//
// Invariants: a request is in at most one of `waiting`, `running` and `swapped`; `running` is in
// admission order (the newest at the back) and its size never exceeds max_num_seqs; every running
// request holds KV, and a swapped one holds none on the GPU (swapped_tokens_ on the host).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "policies/common/scheduling_order.h"
#include "policies/continuous/continuous_config.h"
#include "policies/continuous/continuous_packing.h"
#include "sim/batch.h"
#include "sim/kv_cache.h"
#include "sim/policy.h"

namespace batchsim {

class ContinuousCapacity {
 public:
  // Makes the KV cache (paged or reserved, as `config`, with its limits resolved, says) and the
  // queues for the replica's requests; throws UserError, naming `policy_name`, when the KV
  // memory or the host tier cannot serve the configuration.
  void attach(const ContinuousPolicyConfig& config, PolicyEnv& env, const std::string& policy_name);

  KvCacheManager& kv() { return *kv_; }
  const KvCacheManager& kv() const { return *kv_; }
  PagedKvCache* paged_kv() const { return paged_kv_; }  // kv() when it is paged, else null
  const RequestRanking& ranking() const { return ranking_; }
  WaitingQueue& waiting() { return waiting_; }
  const WaitingQueue& waiting() const { return waiting_; }
  std::vector<RequestId>& running() { return running_; }  // admission order: the newest is at the back
  const std::vector<RequestId>& running() const { return running_; }
  bool has_swapped() const { return !swapped_.empty(); }
  // Nothing waits, runs, is swapped out, or waits for its KV to land.
  bool idle() const {
    return waiting_.empty() && running_.empty() && swapped_.empty() && receiving_ == 0 && received_.empty();
  }

  // The KV tokens a request reserves (kv=reserve) or may at most hold (its footprint): what
  // admission reserves and what decides whether it can ever fit.
  int64_t reserve_tokens(RequestId id) const;
  // The most KV tokens a speculating request may take: its reservation, or with paged KV
  // prompt + max_tokens.
  int64_t speculative_cap(RequestId id) const {
    if (!config_.paged) return reserve_tokens(id);
    const Request& r = env_->request(id);
    return r.prompt_tokens + r.output_limit();
  }
  // kv_->try_grow, without a virtual call for the paged cache (final), whose growth then
  // inlines: schedule() grows every running request at every step.
  bool grow(RequestId id, int64_t tokens) {
    return paged_kv_ != nullptr ? paged_kv_->try_grow(id, tokens) : kv_->try_grow(id, tokens);
  }

  // A request arrived in slot `id` (a streaming run reuses a settled request's slot).
  void on_arrival(RequestId id) { finished_flag_[id] = 0; }
  // Decode role: request `id`, prefilled elsewhere, waits for its prompt's KV to be allocated.
  void add_remote(RequestId id) {
    remote_pending_[id] = 1;
    waiting_.add(id);
  }
  bool is_remote_pending(RequestId id) const { return !remote_pending_.empty() && remote_pending_[id] != 0; }

  // What admitting waiting request `id` would compute with `budget` tokens left while
  // `partial_prefills` items of the batch leave their prefill unfinished: its cached prefix,
  // the tokens it still needs beyond it, this step's tokens (0: it must wait; the packing's
  // answer) and the tokens whose KV must be free to admit it (cached + tokens, or cached + need
  // when admission needs room for its whole prefill). Shared by the admission and its dry run,
  // so that both apply the same rules.
  struct AdmissionStep {
    int64_t cached = 0;
    int64_t need = 0;
    int64_t tokens = 0;
    int64_t fit = 0;
  };
  AdmissionStep admission_step(RequestId id, int64_t budget, int64_t partial_prefills,
                               const ContinuousPacking& packing) const;
  // Admits the head of the waiting queue, `id`, for `step` (admission_step's) when its KV fits:
  // shares its cached prefix (loading what the host tier holds, whose copy time goes to
  // `batch`), and moves it to the back of `running`. False, changing nothing, when it must wait.
  bool admit(RequestId id, const AdmissionStep& step, Batch& batch);
  // TGI's wait rule (max_waiting_tokens), `steps_since_admission` schedule() calls after the
  // last admission: whether new requests may be admitted now.
  bool admission_allowed(int64_t budget, int64_t steps_since_admission, const ContinuousPacking& packing) const;
  // How many waiting requests admission would take with `budget` tokens left, counting no
  // further than `enough`; changes nothing.
  int64_t count_admissible(int64_t budget, int64_t enough, const ContinuousPacking& packing) const;

  // The running request to preempt when one cannot grow: the newest (fcfs) or the lowest-ranked
  // (priority, sjf), or with generation_first the newest / lowest-ranked not already in the
  // batch (a decode scheduled before the prefill chunks).
  RequestId preemption_victim(const Batch& batch) const;
  // Swap or recompute as configured; `allow_swap` false forces recompute.
  void preempt(RequestId victim, Batch& batch, bool allow_swap = true);
  // vLLM v0 _schedule_priority_preemption; true when it preempted.
  bool preempt_for_best_waiting(Batch& batch, const ContinuousPacking& packing);
  // The swapped request to bring back first, in FCFS order (has_swapped() must hold).
  RequestId swapped_front() const { return swapped_.front(); }
  // Brings swapped_front(), `id`, back with blocks for its KV and the `new_tokens` this step
  // writes, charging the copy to `batch`; false, changing nothing, when they do not fit.
  bool swap_in(RequestId id, int64_t new_tokens, Batch& batch);

  // Decode role: allocates the prompt's KV of remote request `id` at the head of `waiting` and
  // starts its transfer; false, changing nothing, when it does not fit (head-of-line, as any
  // admission).
  bool admit_remote(RequestId id);
  // Decode role: requests whose KV has arrived join the running ones while max_num_seqs allows.
  // Starts a schedule(): remote_admitted() is false until admit_remote allocates.
  void promote_received();
  bool remote_admitted() const { return remote_admitted_; }
  void on_kv_received(RequestId id);
  void release_held_kv(RequestId id);

  // The requests of an iteration that finished leave `running` in order, and their KV is freed
  // (or held for its transfer, prefill role); `settle_cohort` when the decode cohort is on.
  void release_finished(std::span<const RequestId> finished, bool settle_cohort);

 private:
  SimTime transfer_time(int64_t tokens) const;

  ContinuousPolicyConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<KvCacheManager> kv_;
  PagedKvCache* paged_kv_ = nullptr;  // kv_ when it is paged
  RequestRanking ranking_;            // empty under fcfs
  WaitingQueue waiting_;              // in the order admission takes requests
  std::vector<RequestId> running_;    // admission order: the newest is at the back
  std::deque<RequestId> swapped_;
  std::vector<int64_t> swapped_tokens_;
  std::vector<uint8_t> finished_flag_;  // bytes, not bits: read for every running request at each finish
  // Disaggregated roles (sim/policy.h). Prefill: finished requests whose KV is held for their
  // transfer. Decode: arrived requests whose prompt KV is not allocated yet (in `waiting_`),
  // how many wait for their KV to land, and those whose KV has landed but found no sequence
  // slot yet. vLLM v1 keeps the last two in WAITING_FOR_REMOTE_KVS and then WAITING, outside
  // `running` (vllm/v1/core/sched/scheduler.py, _update_waiting_for_remote_kv).
  std::vector<uint8_t> held_;
  std::vector<uint8_t> remote_pending_;
  int64_t receiving_ = 0;
  std::deque<RequestId> received_;
  bool remote_admitted_ = false;  // the schedule() being built allocated a remote request's KV
};

}  // namespace batchsim
