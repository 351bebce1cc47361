// batchsim — one replica (a GPU group behind the router) of the discrete-event simulation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hwmodel/cost_model.h"
#include "sim/batch.h"
#include "sim/decode_cohort.h"
#include "sim/event_queue.h"
#include "sim/metrics.h"
#include "sim/policy.h"

namespace batchsim {

// Inter-token gaps: every one (exact percentiles), or sketched in a streaming run.
struct GapSamples {
  WeightedSamples exact;
  SketchedSamples sketched;
  bool sketch = false;
  void add(double gap_s, int64_t count = 1) { sketch ? sketched.add(gap_s, count) : exact.add(gap_s, count); }
};

// Everything one GPU group holds: its policy (queues, KV cache), the iteration in flight and
// its fast-forward state, and its running sums. Replicas never read each other's state; the
// Simulation's event loop drives them, its router (sim/router.h) reads their load.
struct Replica {
  Policy* policy = nullptr;
  PolicyEnv env;
  const CostModel* cost_model = nullptr;  // its pool's
  PoolRole role = PoolRole::kColocated;
  int64_t kv_capacity_tokens = 0;  // its KV memory, over which its KV fractions are taken
  std::string kv_sizing_rule;      // how that was sized (PolicyEnv::kv_sizing_rule)
  int64_t num_gpu_blocks = 0;      // its pool's SimulationOptions::num_gpu_blocks
  int64_t preemptions = 0;         // made by its policy
  int64_t schedules = 0;           // schedule() calls so far
  int32_t index = 0;
  bool busy = false;
  bool wake_pending = false;
  SimTime wake_time = SimTime::max();
  SimTime done_at = SimTime::max();  // when the iteration (or fast-forwarded run) in flight ends
  Batch batch;
  int64_t batch_first_item = 0;  // the batch's items in result_.iteration_items, when recorded
  int64_t iterations = 0;
  IterationRecord current;
  // Fast-forward state of the iteration in flight: its first iteration's end, how many
  // identical decode iterations follow it, and their durations.
  SimTime first_end;
  int64_t repeats = 0;
  std::vector<SimTime> repeat_gaps;
  SimTime max_repeat_gap;
  // repeat_gaps' suffix maxima (repeat_gap_maxima), found at the run's end for its cohorts.
  std::vector<std::pair<int64_t, SimTime>> repeat_gap_maxima;
  std::vector<BatchShape> repeat_rank_shapes;    // a DP attention step's ranks, as the run goes
  std::vector<IterationCost> repeat_rank_costs;  // and their costs (CostModel::advance_step)
  NonAttentionCache cost_memo;                   // its cost model's non-attention costs by key
  // Its policy's lockstep decodes (sim/decode_cohort.h), when the policy keeps them there:
  // one set per attention rank (DP attention's ranks each keep their own), sized at attach.
  std::vector<DecodeCohort> cohorts;
  // Running sums for the summary, so iteration records need not be kept.
  double busy_s = 0, kv_used_area = 0, kv_alloc_area = 0, kv_used_peak = 0, kv_alloc_peak = 0;
  int64_t bubble_slots = 0, useful_slots = 0;
  int64_t prefill_admitted_tokens = 0, prefill_cached_tokens = 0;
  // Every inter-token gap of this replica's requests, kept per replica so that the order in
  // which replicas' iterations interleave (which fast-forward changes) cannot change a sum.
  GapSamples tbt_s;
  int64_t routed = 0, outstanding = 0;  // requests routed here; of them, not yet settled
  int64_t completed = 0;                // streaming: of them, finished (an exact run counts records)
  // The last idle sample, and `iterations` when it was taken: a wake-up that finds the
  // replica as it was adds none.
  IdleSample last_idle;
  int64_t last_idle_iterations = -1;

  // A wake-up at `now` unless busy or one is already due then.
  void wake_now(EventQueue& events, SimTime now) {
    if (!busy) wake_at(events, now);
  }
  // A wake-up at `at` unless one is due by then.
  void wake_at(EventQueue& events, SimTime at);
  // Routed, unsettled and not in its running batch (llm-d's queue scorer's "waiting").
  int64_t waiting() const { return outstanding - (busy ? static_cast<int64_t>(batch.size()) : 0); }
  // Any of its cohorts holds request `id`.
  bool in_cohort(RequestId id) const;
  void set_counts(int32_t num_prefills, int64_t prefill_tokens);
  // KV memory while the iteration runs: as the policy's schedule() left it, before the
  // iteration's finished requests free theirs.
  void sample_kv();
  // Starts the `current` iteration record at `start` (KV sampled now) and returns its
  // duration: the cost model's time plus `extra_time` (swap transfers), at least 1 ns.
  SimTime open_iteration(SimTime start, const IterationCost& cost, SimTime extra_time);
  // Adds the finished `current` iteration to the running sums, and to `log` when one is kept.
  void close_iteration(std::vector<IterationRecord>* log);
  // Its state while it waits with nothing to run, added to `log` unless it is the last sample's.
  void record_idle(SimTime now, std::vector<IdleSample>& log);
};

}  // namespace batchsim
