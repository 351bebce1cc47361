#include "sim/latency_breakdown.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <fmt/format.h>

namespace batchsim {

std::string_view latency_part_name(LatencyPart part) {
  switch (part) {
    case LatencyPart::kQueueing: return "queueing";
    case LatencyPart::kPrefill: return "prefill";
    case LatencyPart::kDecode: return "decode";
    case LatencyPart::kStall: return "stall";
    case LatencyPart::kPreemption: return "preemption";
    case LatencyPart::kKvTransfer: return "kv_transfer";
    case LatencyPart::kOverhead: return "overhead";
  }
  return "?";
}

int64_t LatencyBreakdown::total_ns() const { return std::accumulate(ns.begin(), ns.end(), int64_t{0}); }

IterationSplit& IterationSplit::operator+=(const IterationSplit& o) {
  swap_ns += o.swap_ns;
  overhead_ns += o.overhead_ns;
  compute_ns += o.compute_ns;
  decode_ns += o.decode_ns;
  return *this;
}

IterationSplit split_iteration(SimTime duration, const IterationCost& cost, SimTime extra_time,
                               const IterationCost* decode_only) {
  // Each piece is cut from what the earlier ones left, so that they never exceed the duration
  // (which is at least 1 ns, and rounds the cost model's seconds once) and sum to it exactly.
  IterationSplit s;
  const int64_t duration_ns = duration.ns();
  s.swap_ns = std::clamp<int64_t>(extra_time.ns(), 0, duration_ns);
  const int64_t rest_ns = duration_ns - s.swap_ns;
  s.overhead_ns = std::clamp<int64_t>(SimTime::from_seconds(cost.overhead_s).ns(), 0, rest_ns);
  s.compute_ns = rest_ns - s.overhead_ns;
  s.decode_ns = s.compute_ns;
  if (decode_only != nullptr) {
    // The decodes alone: their kernels' time without the prefill chunks (its overhead is the
    // engine's, counted as overhead above whatever the batch).
    const int64_t alone_ns = SimTime::from_seconds(decode_only->total_s - decode_only->overhead_s).ns();
    s.decode_ns = std::clamp<int64_t>(alone_ns, 0, s.compute_ns);
  }
  return s;
}

void LatencyAccounting::reset(size_t num_requests, size_t num_replicas) {
  requests_.assign(num_requests, RequestAccount{});
  replicas_.assign(num_replicas, ReplicaAccount{});
}

void LatencyAccounting::advance(ReplicaAccount& r, SimTime at) {
  if (at <= r.until) return;  // already there (or mid-iteration: nothing to add)
  r.shares.stall_ns += (at - r.until).ns();
  r.until = at;
}

void LatencyAccounting::arrived(RequestId id, SimTime at) {
  RequestAccount& a = requests_[static_cast<size_t>(id)];
  a.attributed_until = at;
  a.waiting = Waiting::kForAdmission;
}

void LatencyAccounting::joined(RequestId id, int32_t replica, SimTime at) {
  RequestAccount& a = requests_[static_cast<size_t>(id)];
  if (a.waiting == Waiting::kRunning || a.waiting == Waiting::kDone) {
    throw std::logic_error(fmt::format("latency breakdown: request {} joined while running or done", id));
  }
  if (at < a.attributed_until) time_went_backwards(a.attributed_until, at);
  const LatencyPart wait = a.waiting == Waiting::kForAdmission    ? LatencyPart::kQueueing
                           : a.waiting == Waiting::kAfterPreemption ? LatencyPart::kPreemption
                                                                    : LatencyPart::kKvTransfer;
  a.parts[wait] += (at - a.attributed_until).ns();
  ReplicaAccount& r = replicas_[static_cast<size_t>(replica)];
  advance(r, at);
  a.joined_at = r.shares;
  a.replica = replica;
  a.running_index = static_cast<int32_t>(r.running.size());
  r.running.push_back(id);
  a.waiting = Waiting::kRunning;
}

void LatencyAccounting::leave(RequestAccount& a, SimTime at) {
  if (a.waiting != Waiting::kRunning) throw std::logic_error("latency breakdown: a request left without running");
  ReplicaAccount& r = replicas_[static_cast<size_t>(a.replica)];
  advance(r, at);
  if (r.until != at) time_went_backwards(r.until, at);
  a.parts[LatencyPart::kOverhead] += r.shares.overhead_ns - a.joined_at.overhead_ns;
  a.parts[LatencyPart::kPreemption] += r.shares.preemption_ns - a.joined_at.preemption_ns;
  a.parts[LatencyPart::kDecode] += r.shares.decode_ns - a.joined_at.decode_ns;
  a.parts[LatencyPart::kStall] += r.shares.stall_ns - a.joined_at.stall_ns;
  a.attributed_until = at;
  // Swap-remove from the running list.
  const RequestId moved = r.running.back();
  r.running[static_cast<size_t>(a.running_index)] = moved;
  requests_[static_cast<size_t>(moved)].running_index = a.running_index;
  r.running.pop_back();
  a.running_index = -1;
}

void LatencyAccounting::preempted(RequestId id, SimTime at, int64_t computed_tokens, int64_t known_tokens,
                                  int32_t generated_tokens, bool keeps_kv) {
  RequestAccount& a = requests_[static_cast<size_t>(id)];
  if (a.waiting == Waiting::kForKv) {
    // Preempted on a decode replica before its first iteration there: its wait so far was for
    // its KV. (It leaves `landed` when that list is next read.)
    a.parts[LatencyPart::kKvTransfer] += (at - a.attributed_until).ns();
    a.attributed_until = at;
  } else {
    leave(a, at);
  }
  a.waiting = Waiting::kAfterPreemption;
  if (!keeps_kv) a.recompute_until = std::max(a.recompute_until, generated_tokens > 0 ? known_tokens : computed_tokens);
}

void LatencyAccounting::kv_transfer_started(RequestId id, SimTime at) {
  RequestAccount& a = requests_[static_cast<size_t>(id)];
  if (a.waiting == Waiting::kRunning) leave(a, at);
  a.waiting = Waiting::kForKv;
}

void LatencyAccounting::iteration_started(int32_t replica, SimTime start, const Batch& batch,
                                          const IterationCost& cost, SimTime duration, const CostModel& cost_model,
                                          std::span<const int64_t> batch_stamp, int64_t stamp) {
  const BatchShape& shape = batch.shape;
  IterationCost decode_only;
  const bool mixed = !shape.prefills.empty() && shape.num_decodes > 0;
  if (mixed) {
    // The same decode rows, no prefill chunks; only the decodes sample (a policy that pads
    // counts its rows in num_decodes). A shape without prefills allocates nothing.
    BatchShape decodes;
    decodes.num_decodes = shape.num_decodes;
    decodes.decode_context_sum = shape.decode_context_sum;
    decodes.decode_context_max = shape.decode_context_max;
    decodes.num_sampled = std::min(shape.num_sampled, shape.num_decodes);
    decode_only = cost_model.iteration(decodes);
  }
  ReplicaAccount& r = replicas_[static_cast<size_t>(replica)];
  advance(r, start);
  if (!r.landed.empty()) {
    // Requests whose KV landed here join in the first iteration that runs them; those no
    // longer waiting for it (preempted or rejected first) are dropped.
    size_t kept = 0;
    for (const RequestId id : r.landed) {
      if (requests_[static_cast<size_t>(id)].waiting != Waiting::kForKv) continue;
      if (batch_stamp[static_cast<size_t>(id)] == stamp) {
        joined(id, replica, start);
      } else {
        r.landed[kept++] = id;
      }
    }
    r.landed.resize(kept);
  }
  r.run_start = start;
  r.split = split_iteration(duration, cost, batch.extra_time, mixed ? &decode_only : nullptr);
  r.left_out.clear();
  // Every item's request is running here, so the batch leaves some out only when it is smaller.
  if (batch.items.size() < r.running.size()) {
    for (const RequestId id : r.running) {
      if (batch_stamp[static_cast<size_t>(id)] != stamp) r.left_out.push_back(id);
    }
  }
}

void LatencyAccounting::iteration_ended(int32_t replica, SimTime end) {
  ReplicaAccount& r = replicas_[static_cast<size_t>(replica)];
  const IterationSplit& s = r.split;
  if (r.run_start + SimTime::from_ns(s.duration_ns()) != end) time_went_backwards(r.run_start, end);
  r.shares.overhead_ns += s.overhead_ns;
  r.shares.preemption_ns += s.swap_ns;
  r.shares.decode_ns += s.decode_ns;
  r.shares.stall_ns += s.compute_ns - s.decode_ns;
  r.until = end;
  // A request left out of the iteration waited for all of it: stall, not a decode step's shares.
  for (const RequestId id : r.left_out) {
    LatencyBreakdown& parts = requests_[static_cast<size_t>(id)].parts;
    parts[LatencyPart::kOverhead] -= s.overhead_ns;
    parts[LatencyPart::kPreemption] -= s.swap_ns;
    parts[LatencyPart::kDecode] -= s.decode_ns;
    parts[LatencyPart::kStall] += s.duration_ns() - (s.compute_ns - s.decode_ns);
  }
}

void LatencyAccounting::prefill_chunk_done(RequestId id, int64_t context_before, int64_t new_tokens) {
  RequestAccount& a = requests_[static_cast<size_t>(id)];
  const IterationSplit& s = replicas_[static_cast<size_t>(a.replica)].split;
  // Not a decode step: its compute leaves decode and stall ...
  a.parts[LatencyPart::kDecode] -= s.decode_ns;
  a.parts[LatencyPart::kStall] -= s.compute_ns - s.decode_ns;
  // ... for the recomputed tokens' share of the chunk (preemption; floored) and its own prefill
  // (the remainder, so that the two sum to the compute exactly).
  const int64_t recomputed = std::clamp<int64_t>(a.recompute_until - context_before, 0, new_tokens);
  const int64_t recompute_ns = recomputed == new_tokens ? s.compute_ns : s.compute_ns * recomputed / new_tokens;
  a.parts[LatencyPart::kPreemption] += recompute_ns;
  a.parts[LatencyPart::kPrefill] += s.compute_ns - recompute_ns;
}

void LatencyAccounting::time_went_backwards(SimTime from, SimTime to) {
  throw std::logic_error(
      fmt::format("latency breakdown: time went from {} ns to {} ns in the wrong order", from.ns(), to.ns()));
}

void LatencyAccounting::check_sums(std::span<const Request> requests, std::span<const RequestProgress> progress) const {
  for (size_t id = 0; id < requests_.size(); ++id) {
    if (progress[id].state != RequestState::kFinished) continue;
    const int64_t e2e_ns = (progress[id].finished - requests[id].arrival).ns();
    if (requests_[id].parts.total_ns() != e2e_ns || requests_[id].attributed_until != progress[id].finished) {
      throw std::logic_error(fmt::format("latency breakdown: request {}'s parts sum to {} ns, its e2e is {} ns", id,
                                         requests_[id].parts.total_ns(), e2e_ns));
    }
  }
}

}  // namespace batchsim
