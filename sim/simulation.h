// batchsim — the discrete-event core: an event queue and one replica driving a policy.
//
// Events are ordered by (time, insertion sequence), so equal-time events run in a fixed order
// and the same inputs give byte-identical outputs (ns-3's Scheduler contract). Two kinds of
// event: a request arrives; the replica finishes an iteration (or a policy's wake-up is due).
// The replica asks its policy for the next batch, asks the cost model for its duration,
// schedules the iteration's end, and advances the requests' progress when it ends.
// Every request either finishes exactly once or is rejected with a reason; the loop ends when
// every request has done one or the other.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "hwmodel/cost_model.h"
#include "sim/metrics.h"
#include "sim/policy.h"
#include "sim/request.h"

namespace batchsim {

enum class EventKind : uint8_t { kArrival, kIterationDone, kWakeUp };

struct Event {
  SimTime time;
  uint64_t seq = 0;
  EventKind kind = EventKind::kArrival;
  int64_t payload = 0;  // request id for arrivals
};

// A binary heap keyed by (time, seq): O(log n) push and pop; equal times pop in push order.
class EventQueue {
 public:
  void push(SimTime time, EventKind kind, int64_t payload = 0);
  Event pop();
  SimTime next_time() const { return heap_.top().time; }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
};

struct SimulationOptions {
  double gpu_memory_utilization = 0.9;
  bool record_iterations = false;
  // Advance runs of identical decode iterations in one step where the policy vouches for it
  // (Policy::repeat_decode_step); the results are the same to the byte. Off while
  // `on_iteration` is set, since that wants every batch.
  bool fast_forward = true;
  // The workload's prompt-block hashes (BuiltWorkload::prefix_blocks), handed to the policy
  // for prefix caching; null or empty: none. Must outlive the run.
  const PrefixBlockHashes* prefix_blocks = nullptr;
  // Called after every iteration with the applied batch: tests hang invariant checks here.
  std::function<void(const Batch&, const IterationRecord&, const Policy&)> on_iteration;
};

class Simulation {
 public:
  Simulation(const Workload& workload, Policy& policy, const CostModel& cost_model,
             SimulationOptions options = {});
  SimulationResult run();

 private:
  void arrive(RequestId id);
  void try_start_iteration();
  void finish_iteration();
  void reject(RequestId id, std::string reason);
  SimTime fast_forward(SimTime end, int64_t min_remaining);
  void set_counts(IterationRecord& record, int32_t num_prefills, int64_t prefill_tokens) const;
  // KV memory while the iteration runs: as the policy's schedule() left it, before the
  // iteration's finished requests free theirs.
  void sample_kv(IterationRecord& record) const;
  // Adds the finished `current_` iteration to the run's sums (and to the log when recording).
  void close_iteration();
  void record_token(RequestProgress& p, SimTime at);
  void finish_if_done(RequestId id, RequestProgress& p);  // at its last output token

  const Workload& workload_;
  Policy& policy_;
  const CostModel& cost_model_;
  SimulationOptions options_;
  PolicyEnv env_;
  EventQueue events_;
  SimTime now_;
  bool busy_ = false;
  bool wake_pending_ = false;
  SimTime wake_time_ = SimTime::max();
  Batch batch_;
  std::vector<RequestId> finished_;
  std::vector<RequestProgress> progress_;
  std::vector<int64_t> scheduled_in_iteration_;  // catches a request listed twice in a batch
  SimulationResult result_;
  int64_t settled_ = 0;  // finished + rejected
  int64_t iterations_ = 0;
  IterationRecord current_;
  // Fast-forward state of the iteration in flight: its first iteration's end, how many
  // identical decode iterations follow it, and their durations.
  SimTime first_end_;
  int64_t repeats_ = 0;
  std::vector<SimTime> repeat_gaps_;
  SimTime max_repeat_gap_;
  // Running sums for the summary, so iteration records need not be kept.
  double busy_s_ = 0, kv_used_area_ = 0, kv_alloc_area_ = 0, kv_used_peak_ = 0, kv_alloc_peak_ = 0;
  int64_t bubble_slots_ = 0, useful_slots_ = 0;
  // Prefix caching: tokens found cached at each request's admission in progress (reset when it
  // is first scheduled), and the sums over all admissions of prefills.
  std::vector<int64_t> admission_hit_;
  int64_t prefill_admitted_tokens_ = 0, prefill_cached_tokens_ = 0;
};

Summary summarize(const SimulationResult& result, double busy_s);

}  // namespace batchsim
