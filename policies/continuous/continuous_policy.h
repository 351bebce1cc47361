// batchsim — iteration-level (continuous) batching, with or without chunked prefill.
//
// One scheduler whose mechanisms switch on and off independently, so that an ablation can
// isolate each (the presets in continuous_registration.cpp combine them as real engines do). Two
// levels, as in TensorRT-LLM's batch manager, each a part of its own:
//   ContinuousCapacity     (continuous_capacity.h; TensorRT-LLM's CapacityScheduler,
//                          cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp) who holds KV: the
//                          waiting, running and swapped queues, admission, growth, the preemption
//                          victim, swap, and the disaggregated roles' KV;
//   ContinuousPacking      (continuous_packing.h; TensorRT-LLM's MicroBatchScheduler,
//                          cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp) how many tokens
//                          each of them computes within the step's token budget: chunks, partial
//                          prefills, drafts.
// ContinuousPolicy keeps the Policy interface and the order of one step: which queue is offered
// to the two parts, and when (the options below, and generation_first's decodes before chunks),
// the decode cohort's fast path, and the fast-forward of repeated decode steps. TensorRT-LLM runs
// its capacity scheduler over every request before the micro-batch scheduler packs; here, as in
// vLLM's schedule(), a step interleaves the two: each running request is sized by the packing and
// then grown by the capacity, which may preempt, before the next one is offered.
// The options of the step's order (ContinuousPolicyConfig, continuous_config.h):
//   prefill=exclusive|mixed  vLLM v0 `_schedule_default` (vllm/core/scheduler.py): an iteration
//                          is all prefill or all decode, new prefills first, so a prompt
//                          arriving while others decode stalls them for an iteration; Orca
//                          (OSDI'22) selective batching: decodes and whole new prefills share an
//                          iteration.
//   decode_after_admission TGI's batching_task (text-generation-inference v3.3.7
//                          backends/v3/src/backend.rs; 1.x router/src/infer.rs): a batch
//                          prefilled into a running one is always followed by a decode of
//                          everything (`cached_batch = decode(...)` ends every pass of the inner
//                          loop), so an iteration that admitted while others were running is
//                          followed by one that admits nobody. A batch prefilled when nothing
//                          ran (the outer loop) may be followed at once by another prefill.
// Admission is head-of-line in the waiting queue's order (arrival order under fcfs): the first
// waiting request that does not fit stops admission (vLLM v0 and v1: allocate_slots returning None breaks the WAITING
// loop of v1 schedule(), which skips ahead only past requests waiting for remote KV, a grammar or more of a streamed
// input, or over the LoRA limit). A request that can never be served (prompt + output beyond max_model_len, prompt
// beyond max_num_batched_tokens without chunking — v0 prompt_limit —, footprint beyond the whole KV cache — v0
// AllocStatus.NEVER) is rejected on arrival with its reason. Invariants (asserted per iteration by tests/policies): Σ
// new_tokens <= max_num_batched_tokens; running <= max_num_seqs; each running request's KV covers exactly its computed
// tokens plus this step's.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "policies/common/schedule_ahead.h"
#include "policies/common/scheduling_order.h"
#include "policies/continuous/continuous_capacity.h"
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
  bool idle() const override { return capacity_.idle() && intake_.empty(); }
  bool repeat_decode_step(const Batch& batch) override;
  const KvCacheManager& kv_cache() const override { return capacity_.kv(); }
  // vLLM's rule after a profile run of this policy's budget, or TensorRT-LLM's with
  // free_gpu_memory_fraction (the definition says where each comes from).
  std::optional<KvSizing> kv_sizing(const CostModel& cost_model, double gpu_memory_utilization) const override;
  // Both disaggregated roles, as vLLM v1 serves them with a KV connector (sim/policy.h).
  std::string unsupported_role_reason(PoolRole /*role*/) const override { return ""; }
  void release_held_kv(RequestId id) override { capacity_.release_held_kv(id); }
  void on_kv_received(RequestId id, SimTime /*now*/) override { capacity_.on_kv_received(id); }

  const ContinuousPolicyConfig& config() const { return config_; }
  int64_t token_budget() const { return packing_.token_budget(); }
  size_t num_running() const { return capacity_.running().size(); }

 private:
  // The configuration with the limits the user left to vLLM's defaults for the GPU
  // (usage_context) filled in; `cost_model` null: as given.
  ContinuousPolicyConfig resolved_limits(const CostModel* cost_model) const;
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
  // are its members, running[0, cohort size), stepped in O(1), and the plain decodes right
  // behind them join it. When the step's KV growth does not fit, it preempts from the back as
  // the per-request pass would (setting `preempted`); when the budget does not reach every
  // member, the cohort is dissolved and the per-request loop decides.
  size_t schedule_cohort(Batch& batch, int64_t& budget, bool& preempted);
  // Whether a repeated decode step's `new_blocks` would evict a cached block that a waiting
  // request's admission counts on, so that schedule() must look again.
  bool growth_evicts_a_waiting_hit(const PagedKvCache& paged, int64_t new_blocks) const;
  // Member `id` leaves the cohort, its progress and KV tokens exact again.
  void leave_cohort(RequestId id);
  // Every member leaves the cohort.
  void dissolve_cohort();
  // vLLM v0 _schedule_swapped: swapped requests back in FCFS order while the budget, a sequence
  // slot and their KV (ContinuousCapacity::swap_in) allow.
  void schedule_swapped(Batch& batch, int64_t& budget);
  // The scheduling steps of one iteration; false when a preemption cut them short.
  bool fill_batch(Batch& batch, int64_t& budget);
  // schedule() on the requests the engine has seen (all but intake_'s).
  void build_batch(Batch& batch);
  // schedule() with async_scheduling (policies/common/schedule_ahead.h).
  void schedule_ahead(SimTime now, Batch& batch);
  // Admission from the waiting queue, head-of-line, while TGI's rules, the budget, a sequence slot
  // and KV (ContinuousCapacity::admission_step and admit) allow.
  void schedule_waiting(Batch& batch, int64_t& budget);

  ContinuousPolicyConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  // The replica's decode cohort, when the simulation offers one and the configuration keeps
  // its decodes in lockstep: reserved KV, or paged KV without prefix caching (block order
  // matters there), fcfs (a ranked victim may be any member), no generation_first, colocated.
  DecodeCohort* cohort_ = nullptr;
  ContinuousCapacity capacity_;  // who holds KV: the queues, admission, preemption
  ContinuousPacking packing_;    // the token budget and each step's tokens
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
  ScheduleAheadIntake intake_;          // async_scheduling: arrivals not yet in the waiting queue
};

}  // namespace batchsim
