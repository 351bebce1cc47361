#include "sim/replica.h"

#include <algorithm>

namespace batchsim {

void Replica::wake_at(EventQueue& events, SimTime at) {
  // One pending wake-up per replica, the earliest: a later event it replaces still pops and
  // lets the replica schedule, but no longer clears the pending flag (Simulation::run).
  if (wake_pending && wake_time <= at) return;
  wake_pending = true;
  wake_time = at;
  events.push(at, EventKind::kWakeUp, index);
}

bool Replica::in_cohort(RequestId id) const {
  return std::any_of(cohorts.begin(), cohorts.end(),
                     [id](const DecodeCohort& c) { return c.enabled() && c.member(id); });
}

void Replica::set_counts(int32_t num_prefills, int64_t prefill_tokens) {
  IterationRecord& record = current;
  record.num_requests = static_cast<int32_t>(batch.size());
  record.num_prefills = num_prefills;
  record.num_decodes = record.num_requests - num_prefills;
  record.prefill_tokens = prefill_tokens;
  record.bubble_slots = batch.bubble_slots;
}

void Replica::sample_kv() {
  const KvCacheManager& kv = policy->kv_cache();
  current.kv_used_tokens = kv.used_tokens();
  current.kv_allocated_tokens = kv.allocated_tokens();
}

SimTime Replica::open_iteration(SimTime start, const IterationCost& cost, SimTime extra_time) {
  // At least 1 ns, so that simulated time moves on with every iteration.
  const SimTime duration = std::max(SimTime::from_ns(1), SimTime::from_seconds(cost.total_s) + extra_time);
  current = IterationRecord{};
  current.index = iterations;
  current.replica = index;
  current.start = start;
  current.duration = duration;
  current.cost = cost;
  current.waiting = static_cast<int32_t>(outstanding - static_cast<int64_t>(batch.size()));
  current.first_item = batch_first_item;
  sample_kv();
  return duration;
}

void Replica::close_iteration(std::vector<IterationRecord>* log) {
  ++iterations;
  const double dur_s = current.duration.seconds();
  // Over the KV memory (summary.json's kv.capacity_tokens, which the KV plot divides by too),
  // not over the manager's own capacity: a paged cache carves whole blocks from that memory,
  // and the tokens left over hold no block — they are memory that is never allocated.
  const double capacity = static_cast<double>(std::max<int64_t>(1, kv_capacity_tokens));
  const double used = static_cast<double>(current.kv_used_tokens) / capacity;
  const double alloc = static_cast<double>(current.kv_allocated_tokens) / capacity;
  busy_s += dur_s;
  kv_used_area += used * dur_s;
  kv_alloc_area += alloc * dur_s;
  kv_used_peak = std::max(kv_used_peak, used);
  kv_alloc_peak = std::max(kv_alloc_peak, alloc);
  bubble_slots += current.bubble_slots;
  useful_slots += current.num_requests;
  if (log != nullptr) log->push_back(current);
}

void Replica::record_idle(SimTime now, std::vector<IdleSample>& log) {
  const KvCacheManager& kv = policy->kv_cache();
  const IdleSample sample{index, now, kv.used_tokens(), kv.allocated_tokens(), static_cast<int32_t>(outstanding)};
  if (iterations == last_idle_iterations && sample.kv_used_tokens == last_idle.kv_used_tokens &&
      sample.kv_allocated_tokens == last_idle.kv_allocated_tokens && sample.waiting == last_idle.waiting) {
    return;
  }
  last_idle = sample;
  last_idle_iterations = iterations;
  log.push_back(sample);
}

}  // namespace batchsim
