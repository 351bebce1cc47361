#include "sim/latency_breakdown.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <fmt/format.h>

#include "sim/decode_cohort.h"

namespace batchsim {

std::string_view latency_part_name(LatencyPart part) {
  switch (part) {
    case LatencyPart::kQueueing:
      return "queueing";
    case LatencyPart::kPrefill:
      return "prefill";
    case LatencyPart::kDecode:
      return "decode";
    case LatencyPart::kStall:
      return "stall";
    case LatencyPart::kPreemption:
      return "preemption";
    case LatencyPart::kKvTransfer:
      return "kv_transfer";
    case LatencyPart::kOverhead:
      return "overhead";
  }
  return "?";
}

int64_t LatencyBreakdown::total_ns() const { return std::accumulate(ns.begin(), ns.end(), int64_t{0}); }

double LatencyAccounting::decodes_alone_s(ReplicaAccount& r, const BatchShape& shape, const IterationCost& cost,
                                          const CostModel& cost_model) {
  const int64_t rows = shape.num_decodes;
  // Only the decodes sample (a policy that pads counts its rows in num_decodes).
  const int64_t sampled = std::min(shape.num_sampled, rows);
  BatchShape decodes;  // without prefill chunks: allocates nothing
  decodes.num_decodes = rows;
  decodes.decode_context_sum = rows;
  decodes.decode_context_max = 1;
  decodes.num_sampled = sampled;
  if (sampled != rows) {  // not the cached shape: ask for this one
    const IterationCost c = cost_model.iteration(decodes);
    return c.gemm_s + c.lm_head_s + c.elementwise_s + c.communication_s + cost.decode_attention_s;
  }
  std::vector<double>& cache = r.decode_rows_kernels_s;
  if (cache.size() <= static_cast<size_t>(rows)) cache.resize(static_cast<size_t>(rows) + 1, std::nan(""));
  double& kernels_s = cache[static_cast<size_t>(rows)];
  if (std::isnan(kernels_s)) {
    // What a decode-only iteration of `rows` rows runs besides attention: the GEMMs and the LM
    // head on `rows` tokens, the elementwise kernels, the all-reduces.
    const IterationCost c = cost_model.iteration(decodes);
    kernels_s = c.gemm_s + c.lm_head_s + c.elementwise_s + c.communication_s;
  }
  return kernels_s + cost.decode_attention_s;
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
  const LatencyPart wait = a.waiting == Waiting::kForAdmission      ? LatencyPart::kQueueing
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

void LatencyAccounting::iteration_started(int32_t replica, SimTime start, const Batch& batch, const IterationCost& cost,
                                          SimTime duration, const CostModel& cost_model,
                                          std::span<const int64_t> batch_stamp, int64_t stamp,
                                          std::span<const DecodeCohort* const> cohorts) {
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
  const BatchShape& shape = batch.shape;
  if (!shape.prefills.empty() && shape.num_decodes > 0) {
    const double alone_s = decodes_alone_s(r, shape, cost, cost_model);
    r.split = split_iteration(duration, cost, batch.extra_time, &alone_s);
  } else {
    r.split = split_iteration(duration, cost, batch.extra_time, nullptr);
  }
  // Every item's request is running here, so the batch leaves some out only when it is smaller;
  // whichever of the two lists is shorter is kept, so that the cost is the batch's size.
  r.exceptions.clear();
  // (The batch's cohort members carry no stamp: they are the cohort's.)
  const size_t items = batch.size(), left_out = r.running.size() - std::min(items, r.running.size());
  r.left_out_by_default = left_out > items;
  if (r.left_out_by_default) {
    batch.for_each_cohort([&](int32_t, size_t, std::span<const RequestId> members) {
      r.exceptions.insert(r.exceptions.end(), members.begin(), members.end());
    });
    for (const BatchItem& item : batch.items) r.exceptions.push_back(item.id);
  } else if (left_out > 0) {
    for (const RequestId id : r.running) {
      if (batch_stamp[static_cast<size_t>(id)] != stamp &&
          std::none_of(cohorts.begin(), cohorts.end(), [id](const DecodeCohort* c) { return c->member(id); })) {
        r.exceptions.push_back(id);
      }
    }
  }
}

void LatencyAccounting::iteration_ended(int32_t replica, SimTime end) {
  ReplicaAccount& r = replicas_[static_cast<size_t>(replica)];
  const IterationSplit& s = r.split;
  if (r.run_start + SimTime::from_ns(s.duration_ns()) != end) time_went_backwards(r.run_start, end);
  r.until = end;
  // A decode step's shares, and what a request left out of the iteration gets instead: all of
  // it as stall. The replica's shares take the one its running requests mostly had; the
  // exceptions are given the difference.
  const RunningShares step{s.overhead_ns, s.swap_ns, s.decode_ns, s.compute_ns - s.decode_ns};
  const RunningShares left_out{0, 0, 0, s.duration_ns()};
  const RunningShares& most = r.left_out_by_default ? left_out : step;
  const RunningShares& rest = r.left_out_by_default ? step : left_out;
  r.shares.overhead_ns += most.overhead_ns;
  r.shares.preemption_ns += most.preemption_ns;
  r.shares.decode_ns += most.decode_ns;
  r.shares.stall_ns += most.stall_ns;
  for (const RequestId id : r.exceptions) {
    LatencyBreakdown& parts = requests_[static_cast<size_t>(id)].parts;
    parts[LatencyPart::kOverhead] += rest.overhead_ns - most.overhead_ns;
    parts[LatencyPart::kPreemption] += rest.preemption_ns - most.preemption_ns;
    parts[LatencyPart::kDecode] += rest.decode_ns - most.decode_ns;
    parts[LatencyPart::kStall] += rest.stall_ns - most.stall_ns;
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
    check_sum(static_cast<RequestId>(id), requests[id], progress[id]);
  }
}

void LatencyAccounting::check_sum(RequestId id, const Request& request, const RequestProgress& progress) const {
  if (progress.state != RequestState::kFinished) return;
  const RequestAccount& a = requests_[static_cast<size_t>(id)];
  const int64_t e2e_ns = (progress.finished - request.arrival).ns();
  if (a.parts.total_ns() != e2e_ns || a.attributed_until != progress.finished) {
    throw std::logic_error(fmt::format("latency breakdown: request {}'s parts sum to {} ns, its e2e is {} ns",
                                       request.id, a.parts.total_ns(), e2e_ns));
  }
}

}  // namespace batchsim
