// batchsim — iteration-level (continuous) batching, with or without chunked prefill.
//
// One scheduler whose mechanisms switch on and off independently, so that an ablation can
// isolate each (the presets in registry.cpp combine them as real engines do). Two levels, as
// in TensorRT-LLM (capacityScheduler.cpp / microBatchScheduler.cpp): *capacity* (who holds KV:
// admission, preemption) and *packing* (token budget, chunks).
//   (chunked=true, max_num_partial_prefills and enable_chunked_context: the packing part,
//   ContinuousPacking in continuous_packing.h, says what they do.)
//   kv=paged|reserve       PagedAttention blocks allocated just in time as tokens are written
//                          (vLLM block_manager / v1 kv_cache_manager.allocate_slots), or a
//                          contiguous reservation at admission of prompt + max_tokens
//                          (reserve_to=output: TensorRT-LLM GUARANTEED_NO_EVICT and TGI reserve
//                          for the client's max_new_tokens, PolicyEnv::output_limit; without
//                          --max-tokens that is the request's output length) or of max_model_len
//                          (reserve_to=max_model_len: Orca, which cannot know the output length;
//                          the over-reservation the vLLM paper measures, section 2.3).
//   prefill=exclusive|mixed  vLLM v0 `_schedule_default` (vllm/core/scheduler.py): an iteration
//                          is all prefill or all decode, new prefills first, so a prompt
//                          arriving while others decode stalls them for an iteration; Orca
//                          (OSDI'22) selective batching: decodes and whole new prefills share an
//                          iteration.
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
//   decode_after_admission TGI's batching_task (text-generation-inference v3.3.7
//                          backends/v3/src/backend.rs; 1.x router/src/infer.rs): a batch
//                          prefilled into a running one is always followed by a decode of
//                          everything (`cached_batch = decode(...)` ends every pass of the inner
//                          loop), so an iteration that admitted while others were running is
//                          followed by one that admits nobody. A batch prefilled when nothing
//                          ran (the outer loop) may be followed at once by another prefill.
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
// Admission is head-of-line in the waiting queue's order (arrival order under fcfs): the first
// waiting request that does not fit stops admission (vLLM v0 and v1: allocate_slots returning None breaks the WAITING
// loop of v1 schedule(), which skips ahead only past requests waiting for remote KV, a grammar or more of a streamed
// input, or over the LoRA limit). A request that can never be served (prompt + output beyond max_model_len, prompt
// beyond max_num_batched_tokens without chunking — v0 prompt_limit —, footprint beyond the whole KV cache — v0
// AllocStatus.NEVER) is rejected on arrival with its reason. Invariants (asserted per iteration by tests/policies): Σ
// new_tokens <= max_num_batched_tokens; running <= max_num_seqs; each running request's KV covers exactly its computed
// tokens plus this step's.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "policies/common/schedule_ahead.h"
#include "policies/common/scheduling_order.h"
#include "policies/continuous/continuous_config.h"
#include "policies/continuous/continuous_packing.h"
#include "sim/policy.h"

namespace batchsim {

// vLLM's max_num_batched_tokens and max_num_seqs defaults (vllm/engine/arg_utils.py,
// EngineArgs.get_batch_defaults, v0.10-0.12): on GPUs of at least 70 GiB that are not A100s
// (H100, H200, MI300X) 8192 tokens / 1024 sequences for the API server and 16384 / 1024 for the
// offline LLM class; elsewhere 2048 / 256 and 8192 / 256. `gpu_name` is the profile's name (vLLM
// reads the device name; an A100 profile says "a100").
struct BatchDefaults {
  int64_t max_num_batched_tokens = 0;
  int64_t max_num_seqs = 0;
};
BatchDefaults vllm_batch_defaults(ContinuousPolicyConfig::UsageContext context, int64_t gpu_memory_bytes,
                                  const std::string& gpu_name);

// Arrival checks shared by the continuous schedulers (ContinuousPolicy, SglangPolicy): each
// rejects `id` through env.reject with its reason and returns true when it can never be
// served. Over the context: prompt + output beyond max_model_len. Over the cache: a footprint
// of `footprint_tokens` that even an empty cache cannot hold (vLLM v0 AllocStatus.NEVER).
bool reject_over_context(PolicyEnv& env, RequestId id);
bool reject_over_cache(PolicyEnv& env, const KvCacheManager& kv, RequestId id, int64_t footprint_tokens);

class ContinuousPolicy final : public Policy {
 public:
  ContinuousPolicy(ContinuousPolicyConfig config, std::string name);
  std::string_view name() const override { return name_; }
  void attach(PolicyEnv& env) override;
  void on_arrival(RequestId id, SimTime now) override;
  void schedule(SimTime now, Batch& batch) override;
  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) override;
  // KV held for transfers (prefill role) is no work: nothing is left to schedule for it.
  bool idle() const override {
    return waiting_.empty() && running_.empty() && swapped_.empty() && receiving_ == 0 && received_.empty() &&
           intake_.empty();
  }
  bool repeat_decode_step(const Batch& batch) override;
  const KvCacheManager& kv_cache() const override { return *kv_; }
  // vLLM's rule after a profile run of this policy's budget, or TensorRT-LLM's with
  // free_gpu_memory_fraction (the definition says where each comes from).
  std::optional<KvSizing> kv_sizing(const CostModel& cost_model, double gpu_memory_utilization) const override;
  // Both disaggregated roles, as vLLM v1 serves them with a KV connector (sim/policy.h).
  std::string unsupported_role_reason(PoolRole /*role*/) const override { return ""; }
  void release_held_kv(RequestId id) override;
  void on_kv_received(RequestId id, SimTime now) override;

  const ContinuousPolicyConfig& config() const { return config_; }
  int64_t token_budget() const { return packing_.token_budget(); }
  size_t num_running() const { return running_.size(); }

 private:
  // The configuration with the limits the user left to vLLM's defaults for the GPU
  // (usage_context) filled in; `cost_model` null: as given.
  ContinuousPolicyConfig resolved_limits(const CostModel* cost_model) const;
  int64_t reserve_tokens(RequestId id) const;
  // Schedules running requests in admission order, preempting the newest when KV runs out.
  // Returns false when a preemption happened.
  bool schedule_running(Batch& batch, int64_t& budget);
  // One pass of schedule_running over the running requests of one kind.
  enum class RunningPass { all, decodes, prefills };
  bool schedule_running_pass(Batch& batch, int64_t& budget, RunningPass pass);
  // The pass's first part: the running requests from the front that are plain decodes (one
  // token after all they know but the last is in the paged KV cache), each one token while
  // budget is left, until one is not a decode or cannot grow, which is left to the pass (a
  // preemption); returns how many it scheduled. What the pass would do for them, without its
  // rules for chunks and victims: most running requests are such decodes at most steps.
  size_t schedule_leading_decodes(Batch& batch, int64_t& budget);
  // schedule_leading_decodes with a decode cohort (sim/decode_cohort.h): the leading decodes
  // are its members, running_[0, cohort size), stepped in O(1), and the plain decodes right
  // behind them join it. When the step's KV growth does not fit, it preempts from the back as
  // the per-request pass would (setting `preempted`); when the budget does not reach every
  // member, the cohort is dissolved and the per-request loop decides.
  size_t schedule_cohort(Batch& batch, int64_t& budget, bool& preempted);
  // Member `id` leaves the cohort, its progress and KV tokens exact again.
  void leave_cohort(RequestId id);
  // Every member leaves the cohort.
  void dissolve_cohort();
  // The running request to preempt when one cannot grow: the newest (fcfs) or the lowest-ranked
  // (priority, sjf), or with generation_first the newest / lowest-ranked not already in the
  // batch (a decode scheduled before the prefill chunks).
  RequestId preemption_victim(const Batch& batch) const;
  // vLLM v0 _schedule_priority_preemption; true when it preempted.
  bool preempt_for_best_waiting(Batch& batch);
  void schedule_swapped(Batch& batch, int64_t& budget);
  // The scheduling steps of one iteration; false when a preemption cut them short.
  bool fill_batch(Batch& batch, int64_t& budget);
  // schedule() on the requests the engine has seen (all but intake_'s).
  void build_batch(Batch& batch);
  // schedule() with async_scheduling (policies/common/schedule_ahead.h).
  void schedule_ahead(SimTime now, Batch& batch);
  void schedule_waiting(Batch& batch, int64_t& budget);
  // What admitting waiting request `id` would compute with `budget` tokens left while
  // `partial_prefills` items of the batch leave their prefill unfinished: its cached prefix,
  // the tokens it still needs beyond it, this step's tokens (0: it must wait) and the tokens
  // whose KV must be free to admit it (cached + tokens, or cached + need when admission needs
  // room for its whole prefill). Shared by the admission and its dry run, so that both apply
  // the same rules.
  struct AdmissionStep {
    int64_t cached = 0;
    int64_t need = 0;
    int64_t tokens = 0;
    int64_t fit = 0;
  };
  AdmissionStep admission_step(RequestId id, int64_t budget, int64_t partial_prefills) const;
  // TGI's wait rule (max_waiting_tokens): whether new requests may be admitted now.
  bool admission_allowed(int64_t budget) const;
  // How many waiting requests schedule_waiting would admit with `budget` tokens left, counting
  // no further than `enough`; changes nothing.
  int64_t count_admissible(int64_t budget, int64_t enough) const;
  // Swap or recompute as configured; `allow_swap` false forces recompute.
  void preempt(RequestId victim, Batch& batch, bool allow_swap = true);
  int64_t need_of(RequestId id) const { return env_->known_tokens(id) - env_->progress_of(id).computed_tokens; }
  // kv_->try_grow, without a virtual call for the paged cache (final), whose growth then
  // inlines: schedule() grows every running request at every step.
  bool grow(RequestId id, int64_t tokens) {
    return paged_kv_ != nullptr ? paged_kv_->try_grow(id, tokens) : kv_->try_grow(id, tokens);
  }
  SimTime transfer_time(int64_t tokens) const;
  // Decode role: allocates the prompt's KV of remote request `id` at the head of `waiting_` and
  // starts its transfer; false, changing nothing, when it does not fit (head-of-line, as any
  // admission).
  bool admit_remote(RequestId id);
  // Decode role: requests whose KV has arrived join the running ones while max_num_seqs allows.
  void promote_received();

  ContinuousPolicyConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<KvCacheManager> kv_;
  PagedKvCache* paged_kv_ = nullptr;  // kv_ when it is paged
  // The replica's decode cohort, when the simulation offers one and the configuration keeps
  // its decodes in lockstep: reserved KV, or paged KV without prefix caching (block order
  // matters there), fcfs (a ranked victim may be any member), no generation_first, colocated.
  DecodeCohort* cohort_ = nullptr;
  ContinuousPacking packing_;  // the token budget and each step's tokens
  // The most KV tokens a speculating request may take: its reservation, or with paged KV
  // prompt + max_tokens.
  int64_t speculative_cap(RequestId id) const {
    if (!config_.paged) return reserve_tokens(id);
    const Request& r = env_->request(id);
    return r.prompt_tokens + r.output_limit();
  }
  RequestRanking ranking_;          // empty under fcfs
  WaitingQueue waiting_;            // in the order admission takes requests
  std::vector<RequestId> running_;  // admission order: the newest is at the back
  std::deque<RequestId> swapped_;
  std::vector<int64_t> swapped_tokens_;
  std::vector<uint8_t> finished_flag_;  // bytes, not bits: read for every running request at each finish
  // Whether the last schedule() returned decodes only, without preempting, with nothing
  // swapped out: then every reason that kept new requests out persists until a request
  // finishes or arrives (see repeat_decode_step).
  bool repeatable_ = false;
  bool admitted_ = false;               // the batch being built admitted a waiting request
  bool held_back_ = false;              // ... or TGI's wait rule kept the waiting requests out
  bool forced_decode_ = false;          // ... or decode_after_admission did
  bool admitted_into_running_ = false;  // the last schedule() admitted while others ran
  bool into_running_ = false;           // the batch being built admits into a running one
  int64_t steps_since_admission_ = 0;   // schedule() calls since one last admitted (TGI: waiting_tokens - 1)
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
  ScheduleAheadIntake intake_;    // async_scheduling: arrivals not yet in the waiting queue
};

}  // namespace batchsim
