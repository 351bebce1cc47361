// batchsim — attention data parallelism: dp schedulers that step together.
//
// With DP attention (parallel_layout.h) one replica is dp attention ranks, each with its own
// scheduler, batch and KV cache, whose tokens meet in the MoE layers: vLLM runs one EngineCore
// per DP rank (v1/engine/core.py DPEngineCoreProc), SGLang one scheduler per attention-DP rank
// (layers/dp_attention.py), TensorRT-LLM one executor per rank under enable_attention_dp. Every
// MoE layer is a collective over all ranks, so the ranks step in lockstep: a rank with nothing to
// do runs a dummy batch while any other has work (vLLM's execute_dummy_batch; SGLang's IDLE
// forward mode), and a step lasts as long as its slowest rank (CostModel::step).
//
// DpAttentionPolicy is that replica: it owns dp policies of one kind (any base, built by the
// registry), gives each its own environment and KV cache of one rank's capacity, routes every
// arriving request to one rank, and merges the ranks' batches into the replica's batch, whose
// rank_shapes carry each rank's shape for the cost model.
//
// Routing follows vLLM's DP load balancer (v1/engine/core_client.py,
// DPLBAsyncMPClient.get_core_engine_for_request): the rank with the smallest 4 x waiting +
// running, the lowest-numbered on a tie. A rank's running requests are those of its last batch;
// its waiting ones the rest of what it was given and has not finished. (vLLM refreshes those
// counts every ~100 ms from the coordinator and counts its own sends in between; here they are
// exact at every arrival.)
//
// Invariants: every request lives on exactly one rank from arrival to finish; the merged
// batch's items are the ranks' items in rank order; the replica is idle when every rank is.
//
// Decode fast-forward (Policy::repeat_decode_step) repeats the lockstep step when every rank
// vouches for its own part: a rank with a batch through its own repeat_decode_step, an idle
// one by holding nothing. When a rank refuses after lower ranks vouched, those ranks have
// already taken their state through the next schedule(): their fast-forward run goes on one
// step longer than the replica's, so the next on_iteration_end and schedule() pass them by
// and keep their batches (no request of theirs finishes at that boundary: the simulation asks
// only when none does). Each rank keeps its own decode cohort (sim/decode_cohort.h) where the
// simulation offers one per rank (PolicyEnv::rank_cohorts): the merged batch lists them with
// Batch::add_rank_cohort, each ahead of its rank's items; a rank that vouched past the
// replica's run has that step of its cohort in flight until the next iteration ends.
//
// The same vouch also serves a full step's boundary (one that ends a fast-forward run, or a
// step that was not repeated because some rank changed): in a wide layout most ranks have
// nothing new when one rank admits or finishes a request. A rank none of whose requests
// finished at the boundary and to which nothing arrived since its last schedule() asks its
// own repeat_decode_step instead of on_iteration_end + schedule(): the rank's contract makes
// the two the same (Policy::repeat_decode_step), and it costs O(1) where a schedule() walks
// the rank's running set. Only where the simulation fast-forwards and keeps decode cohorts
// (PolicyEnv::rank_cohorts offered: no hook or log that reads the policy per iteration).
//
// In a disaggregated pool (policy.h, "Disaggregated pools") the ranks take the pool's role:
// TensorRT-LLM's wide-EP prefill workers run attention DP (aiconfigurator's silicon rows of
// DeepSeek-V3 on Dynamo: prefill TP 1 x attention DP 16 x EP 16), and SGLang's P/D guide names
// DP attention's prefill/decode imbalance as a reason to split the pools at all
// (docs/advanced_features/pd_disaggregation.md, "DP Attention Imbalance").
// A hand-off is routed to a rank like any arrival; its transfer lands on that rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/kv_cache.h"
#include "sim/policy.h"

namespace batchsim {

class DpAttentionPolicy final : public Policy {
 public:
  // `ranks` policies of one kind, each a rank's scheduler (at least two).
  explicit DpAttentionPolicy(std::vector<std::unique_ptr<Policy>> ranks);

  std::string_view name() const override { return name_; }
  void attach(PolicyEnv& env) override;
  void on_arrival(RequestId id, SimTime now) override;
  void schedule(SimTime now, Batch& batch) override;
  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) override;
  bool repeat_decode_step(const Batch& batch) override;
  bool idle() const override;
  // The ranks' KV caches summed (capacity, allocated and used tokens); holds_kv asks the rank.
  const KvCacheManager& kv_cache() const override;
  bool holds_kv(RequestId id) const override;
  std::optional<KvSizing> kv_sizing(const CostModel& cost_model, double gpu_memory_utilization) const override;
  int attention_ranks() const override { return ranks(); }
  std::optional<int64_t> cuda_graph_max_batch(const HardwareProfile& gpu, int tp) const override;
  // A pool of DP ranks serves what its ranks serve: each rank holds the KV of the requests
  // routed to it, so a landed transfer frees (prefill) or unblocks (decode) on that rank.
  std::string unsupported_role_reason(PoolRole role) const override;
  void release_held_kv(RequestId id) override;
  void on_kv_received(RequestId id, SimTime now) override;

  int ranks() const { return static_cast<int>(ranks_.size()); }
  // The rank request `id` was routed to (-1 before it arrived).
  int rank_of(RequestId id) const;
  const Policy& rank_policy(int rank) const { return *ranks_[static_cast<size_t>(rank)]; }
  // Ranks that repeated their batch at a full step's boundary so far (see the header comment).
  int64_t boundary_repeats() const { return boundary_repeats_; }

 private:
  // The ranks' caches as one, for the replica's totals; admitting through it is a bug. It
  // holds each rank's cache as the rank's attach made it (every policy makes its cache there,
  // once): the replica reads the totals at every iteration.
  class SummedKv final : public KvCacheManager {
   public:
    explicit SummedKv(const DpAttentionPolicy& owner) : KvCacheManager(0), owner_(owner) {}
    void set_ranks(std::vector<const KvCacheManager*> caches) { caches_ = std::move(caches); }
    std::string_view kind() const override { return "dp-ranks"; }
    bool try_admit(RequestId, int64_t, int64_t) override { return bug(); }
    bool try_grow(RequestId, int64_t) override { return bug(); }
    void release(RequestId) override { bug(); }
    bool fits_when_empty(int64_t reserve_tokens) const override;
    bool can_admit(RequestId, int64_t, int64_t) const override { return bug(); }
    int64_t admission_room() const override { return bug(); }
    int64_t admission_cost(int64_t, int64_t) const override { return bug(); }
    int64_t capacity_tokens() const override;
    int64_t allocated_tokens() const override;
    int64_t used_tokens() const override;
    int64_t decode_run_blocks() const override { return bug(); }
    bool decode_run_step() override { return bug(); }
    bool cohort_grows_by_count() const override { return false; }
    bool grow_cohort(int64_t, int64_t) override { return bug(); }
    bool grows_within(RequestId, int64_t) const override { return bug(); }

   protected:
    void start_decode_run() override { bug(); }
    bool decode_run_steps_in_place() const override { return bug(); }

   private:
    [[noreturn]] static bool bug();
    const DpAttentionPolicy& owner_;
    std::vector<const KvCacheManager*> caches_;  // per rank
  };

  // Whether rank `r`, unchanged since its last schedule(), takes its next step as a repeat of
  // its batch (its state then through that schedule()).
  bool vouches_for_next_step(size_t r);
  // The index of the rank request `id` was routed to; a request on no rank is a bug.
  size_t owning_rank(RequestId id) const;

  std::vector<std::unique_ptr<Policy>> ranks_;
  std::string name_;
  std::vector<PolicyEnv> envs_;       // each rank's environment (no cohort)
  std::vector<int32_t> rank_of_;      // per request, -1 before it arrives
  std::vector<int64_t> outstanding_;  // per rank: given and not finished
  std::vector<int64_t> running_;      // per rank: requests of its last batch
  std::vector<Batch> batches_;        // per rank: its part of the current step
  // Per rank, for the replica's batch (Batch::rank_shapes, rank_repeats): its part's shape
  // (batches_[r].shape, kept here side by side), and whether it repeats its step before.
  std::vector<BatchShape> rank_shapes_;
  std::vector<uint8_t> rank_repeats_;
  // Per rank: vouched for the next step while the replica's repeat was refused by a later rank
  // (see the header comment); cleared as the next schedule() keeps its batch.
  std::vector<uint8_t> vouched_;
  // Per rank: a request arrived, landed (on_kv_received) or gave back its KV since the rank's
  // last schedule(), so its next one may differ from a repeat.
  std::vector<uint8_t> changed_;
  bool vouch_at_boundaries_ = false;  // see the header comment
  int64_t boundary_repeats_ = 0;
  int64_t repeats_ = 0;                           // the replica's repeats of the step the last schedule() built
  std::vector<std::vector<RequestId>> finished_;  // per rank, scratch for on_iteration_end
  SummedKv summed_kv_{*this};
};

}  // namespace batchsim
