// batchsim — what a run measured: per-request records, per-iteration records, and the
// aggregate figures reported in summary.json.
//
// Percentiles use the nearest-rank definition on (value, weight) samples: the smallest value
// whose cumulative weight reaches q * total weight (summary.json). Figures written to be
// compared with `vllm bench serve` use numpy's definitions instead (interpolated_percentile,
// stddev: experiments/run/bench_result.h). Time-between-tokens gaps are stored as
// (gap, count) pairs — one pair covers every sequence of a decode iteration that had the same
// gap — so memory grows with iterations, not with tokens.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hwmodel/base/time.h"
#include "sim/kv_offload.h"
#include "sim/ddsketch.h"
#include "sim/latency_breakdown.h"
#include "sim/policy.h"
#include "sim/workload/request.h"

namespace batchsim {

// A request's arrival data and its final progress, side by side, plus why it was rejected.
struct RequestRecord : Request, RequestProgress {
  std::string reject_reason;
  // Where its e2e time went (sim/latency_breakdown.h); the parts sum to finished - arrival for
  // a completed request.
  LatencyBreakdown breakdown;

  bool completed() const { return state == RequestState::kFinished; }
  SimTime ttft() const { return first_token - arrival; }
  SimTime e2e() const { return finished - arrival; }
  SimTime queueing() const { return first_scheduled - arrival; }
  double ttft_s() const { return ttft().seconds(); }
  double e2e_s() const { return e2e().seconds(); }
  double queueing_s() const { return queueing().seconds(); }
  // (e2e - TTFT) / (output - 1); 0 for single-token outputs.
  double tpot_s() const { return output_tokens > 1 ? (finished - first_token).seconds() / (output_tokens - 1) : 0.0; }
};

struct IterationRecord {
  int64_t index = 0;    // of the replica's iterations
  int32_t replica = 0;  // which replica ran it
  SimTime start;
  SimTime duration;
  int32_t num_requests = 0;  // items scheduled
  int32_t num_prefills = 0;  // prefill chunks
  int64_t prefill_tokens = 0;
  int32_t num_decodes = 0;
  int64_t bubble_slots = 0;
  int64_t kv_used_tokens = 0;  // while the iteration runs (after scheduling)
  int64_t kv_allocated_tokens = 0;
  int32_t waiting = 0;  // routed here, not yet settled, not in this batch
  IterationCost cost;
  // With SimulationOptions::record_iteration_items: where this iteration's num_requests items
  // start in SimulationResult::iteration_items (the iterations of a fast-forwarded decode run
  // share the first one's items, which are the same requests).
  int64_t first_item = 0;
};

// One request's work in an iteration, as iterations.csv lists it with --iteration-log=ids.
struct IterationItem {
  RequestId request = 0;
  int32_t new_tokens = 0;
  bool prefill = false;  // a prefill chunk (the simulation's reading, as num_prefills counts)
};

// A replica's state at a moment it has no iteration to run (its policy scheduled nothing):
// what the iteration records' KV and waiting figures would read then. With these a timeline's
// counters fall to what an idle replica holds instead of keeping the last iteration's values.
struct IdleSample {
  int32_t replica = 0;
  SimTime at;
  int64_t kv_used_tokens = 0;
  int64_t kv_allocated_tokens = 0;
  int32_t waiting = 0;  // routed here, not yet settled
};

// What a request is doing from a moment on: the phases a timeline draws (--chrome-trace).
// A request starts queued at its arrival (its send time under closed-loop clients), is
// prefilling from the iteration that first schedules it (again after a recompute preemption),
// decoding from the end of the iteration that samples its first token (a swapped-out request
// resumes decoding directly), preempted from the schedule() that preempts it, and ends
// finished or rejected. In a disaggregated run, kv_transfer from the prefill replica's hand-off
// (its first token) to its first iteration on the decode replica, where it decodes from (the
// breakdown's kv_transfer part, sim/latency_breakdown.h: waiting for decode KV memory, the link,
// the transfer and the decode replica's next step).
enum class RequestPhase : uint8_t { kQueued, kPrefilling, kDecoding, kPreempted, kKvTransfer, kFinished, kRejected };
std::string_view phase_name(RequestPhase phase);  // "queued", "prefilling", ...

struct RequestPhaseChange {
  RequestId request = 0;
  SimTime at;
  RequestPhase phase = RequestPhase::kQueued;
};

// A disaggregated run's hand-off of one request from its prefill replica to its decode replica
// (SimulationResult::handoffs, by request id). Times are SimTime::max() for steps it never
// reached: a request of one output token finishes on the prefill side and is never handed off.
struct HandoffRecord {
  int32_t prefill_replica = -1;
  int32_t decode_replica = -1;                  // -1: never handed off
  SimTime handoff = SimTime::max();             // its first token; its KV is held from here
  SimTime kv_allocated = SimTime::max();        // the decode replica found room: the transfer is asked for
  SimTime transfer_start = SimTime::max();      // the link (both NICs) became free for it
  SimTime transfer_end = SimTime::max();        // landed: prefill KV freed, decode may schedule it
  int64_t transfer_bytes = 0;                   // KV moved over the link after the prefill ended
  SimTime decode_first_token = SimTime::max();  // its first token on the decode side (its second)
  bool transferred() const { return transfer_end != SimTime::max(); }
  SimTime wait() const { return kv_allocated - handoff; }          // backpressure
  SimTime queue() const { return transfer_start - kv_allocated; }  // NIC queueing
  SimTime transfer() const { return transfer_end - transfer_start; }
  double wait_s() const { return wait().seconds(); }
  double queue_s() const { return queue().seconds(); }
  double transfer_s() const { return transfer().seconds(); }
};

// Weighted samples with nearest-rank percentiles.
class WeightedSamples {
 public:
  // Inline: the replica adds one sample per sequence of every iteration it does not
  // fast-forward, and most of them merge into the run before.
  void add(double value, int64_t weight = 1) {
    if (weight <= 0) return;
    // Run-length merge: the sequences of one decode iteration usually share one gap.
    if (!samples_.empty() && samples_.back().first == value) {
      samples_.back().second += weight;
    } else {
      if (!samples_.empty() && value < samples_.back().first) sorted_ = false;
      samples_.emplace_back(value, weight);
    }
    total_weight_ += weight;
  }
  // Adds every sample of `other`, in its stored order.
  void merge(const WeightedSamples& other);
  int64_t count() const { return total_weight_; }
  double mean() const;
  double percentile(double q) const;  // q in [0, 1]; 0 when empty
  // percentile(q) of each of `qs` (ascending) into `out`, by selection rather than a sort
  // (O(n)); the pairs stay as they came, which is the order mean() sums them in.
  void percentiles(std::span<const double> qs, std::span<double> out) const;
  double max() const;
  void reserve(size_t pairs) { samples_.reserve(pairs); }
  // numpy.percentile's default ("linear") over the samples expanded by weight: with the W
  // values sorted, rank h = q (W - 1) and the value is interpolated between those at floor(h)
  // and floor(h) + 1. q in [0, 1]; 0 when empty. (vLLM's benchmark percentiles and medians.)
  double interpolated_percentile(double q) const;
  // Population standard deviation (numpy.std's default, ddof = 0); 0 when empty.
  double stddev() const;

 private:
  mutable std::vector<std::pair<double, int64_t>> samples_;
  mutable bool sorted_ = true;
  int64_t total_weight_ = 0;
  void sort() const;
  double value_at_rank(int64_t rank) const;  // 0-based, in the sorted expansion; sorted first
};

// Samples of a streaming run (SimulationOptions::streaming): count, mean and max exact, the
// percentiles from a DDSketch (sim/ddsketch.h) within its relative accuracy of the nearest-rank
// ones. Memory is the sketch's buckets, whatever the number of samples. Equal consecutive
// values are kept as one (value, run length) pair until a different one comes (the rows of a
// decode iteration share their gap: one logarithm per run, not per token), and the mean is
// summed from those pairs as WeightedSamples::mean sums its stored pairs, so that the same
// additions in the same order give the same mean to the last bit.
class SketchedSamples {
 public:
  static constexpr double kRelativeAccuracy = 0.01;
  void add(double value, int64_t weight = 1);
  // Adds every sample of `other` (its open run as a pair after this one's).
  void merge(const SketchedSamples& other);
  int64_t count() const { return sketch_.count() + run_weight_; }
  double mean() const;
  double percentile(double q) const { return closed().quantile(q); }
  // Several at once, closing the open run once.
  void percentiles(std::span<const double> qs, std::span<double> out) const;
  double max() const { return closed().max(); }

 private:
  // The sketch with the open run added (it stays open: a later equal value still joins it).
  DDSketch closed() const;
  DDSketch sketch_{kRelativeAccuracy};  // the closed runs
  double sum_ = 0;                      // of value x weight over the closed runs
  double run_value_ = 0;                // the open run of equal values
  int64_t run_weight_ = 0;
};

struct Distribution {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t count = 0;
  static Distribution of(const WeightedSamples& s);
  static Distribution of(const SketchedSamples& s);
};

// One replica of a cluster: what the router sent it and how busy it was.
struct ReplicaSummary {
  int64_t requests = 0, completed = 0, iterations = 0;
  double busy_fraction = 0;               // its computing time / the cluster's makespan
  double kv_allocated_fraction_mean = 0;  // while it computes
  double prefix_hit_rate = 0;
};

// The requests of one priority (Request::priority): how each class fared, to see what a
// priority-ordered scheduler bought the urgent requests and what it cost the others.
struct PriorityClassSummary {
  int32_t priority = 0;
  int64_t requests = 0, completed = 0, rejected = 0, preemptions = 0;
  Distribution e2e_s, ttft_s, tpot_s, queueing_s;  // over its completed requests
};

// One pool of a disaggregated run (Summary::pools): its replicas' figures together.
struct PoolSummary {
  std::string role;  // "prefill" | "decode"
  int32_t first_replica = 0, replicas = 0;
  int64_t requests = 0;  // routed (prefill) or handed (decode) to it
  int64_t iterations = 0;
  double busy_fraction = 0;        // its replicas' mean computing time / the makespan
  int64_t kv_capacity_tokens = 0;  // per replica
  std::string kv_capacity_rule;    // how that was sized (SimulationResult::kv_capacity_rule)
  double kv_allocated_fraction_mean = 0, kv_allocated_fraction_peak = 0;  // over its replicas' busy time
  int64_t preemptions = 0;                                                // preemptions its policies made
};

// The KV transfers of a disaggregated run (Summary::kv_transfer).
struct KvTransferSummary {
  int64_t transfers = 0;
  double bytes = 0;            // moved over the links after prefills ended
  Distribution wait_s;         // hand-off to decode KV allocated (backpressure)
  Distribution queue_s;        // allocated to the link free (NIC queueing)
  Distribution transfer_s;     // on the link
  Distribution handoff_gap_s;  // first token (prefill) to second token (decode)
  // Arrival to the first token on the decode side: the TTFT a client of vLLM's disaggregated
  // proxy sees, whose first token comes from the decode instance (it re-samples it there).
  Distribution ttft_at_decode_s;
};

// One part of the latency breakdown over a run's completed requests.
struct LatencyPartSummary {
  double mean_s = 0, p99_s = 0;  // per request (p99: nearest rank, as Distribution's)
  double share = 0;              // of all completed requests' e2e time together
  double share_of_p99 = 0;       // of the p99 requests' e2e time together
};

// Summary::latency_breakdown. The p99 requests are the completed requests whose e2e reaches the
// run's e2e p99 (nearest rank): the slowest 1%, at least one. Their shares say what the tail
// spent its time on, which is what a diagnosis reads (experiments/run/latency_diagnosis.h).
struct LatencyBreakdownSummary {
  std::array<LatencyPartSummary, kNumLatencyParts> parts{};
  int64_t p99_requests = 0;

  const LatencyPartSummary& operator[](LatencyPart part) const { return parts[static_cast<size_t>(part)]; }
  LatencyPartSummary& operator[](LatencyPart part) { return parts[static_cast<size_t>(part)]; }
};
// Over the completed requests of `requests`, the p99 requests being those with e2e_s() >= e2e_p99_s.
LatencyBreakdownSummary summarize_latency_breakdown(const std::vector<RequestRecord>& requests, double e2e_p99_s);

struct Summary {
  int64_t requests_total = 0, requests_completed = 0, requests_rejected = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;  // of completed requests
  double makespan_s = 0;                         // first arrival to last completion
  double output_tokens_per_s = 0, total_tokens_per_s = 0, requests_per_s = 0;
  Distribution e2e_s, ttft_s, tpot_s, tbt_s, normalized_latency_s_per_token, queueing_s;
  int64_t preemptions = 0;
  int64_t iterations = 0;
  double bubble_fraction = 0;  // bubble slots / (bubble + useful slots) over all iterations
  // Over the KV memory, SimulationResult::kv_capacity_tokens (not the blocks carved from it).
  double kv_used_fraction_mean = 0, kv_used_fraction_peak = 0;            // real tokens / capacity
  double kv_allocated_fraction_mean = 0, kv_allocated_fraction_peak = 0;  // held / capacity
  double busy_fraction = 0;  // time a replica was computing / makespan (replicas' mean)
  // Prefix caching, over every admission of a request that had to prefill (first admissions
  // and readmissions after recompute, not swap-ins): the tokens whose KV it needed (prompt,
  // plus the generated tokens of a readmission), and those of them found cached.
  int64_t prefill_admitted_tokens = 0, prefill_cached_tokens = 0;
  double prefix_hit_rate = 0;            // prefill_cached_tokens / prefill_admitted_tokens
  std::vector<ReplicaSummary> replicas;  // one per replica, in index order
  // One per priority present, most urgent (smallest) first; empty when every request has the
  // same priority (the class would repeat the figures above).
  std::vector<PriorityClassSummary> priority_classes;
  std::vector<PoolSummary> pools;  // disaggregated runs: prefill, then decode
  KvTransferSummary kv_transfer;   // disaggregated runs
  LatencyBreakdownSummary latency_breakdown;
  // 0: every percentile is exact (nearest rank over all samples). A streaming run's are a
  // DDSketch's, within this relative error of the exact ones; its latency breakdown then has
  // no p99 requests (their shares need every record: latency_breakdown.p99_requests is 0).
  double percentile_relative_error = 0;
};

// The request figures of a Summary (counts, tokens, makespan, throughput, latency
// distributions, priority classes, the breakdown's means and shares), gathered one settled
// request at a time, so that a run can give them without keeping its records. `Samples` is
// WeightedSamples (exact percentiles; summarize() feeds it every record) or SketchedSamples
// (a streaming run feeds each record as it settles).
template <class Samples>
class RequestFigures {
 public:
  void add(const RequestRecord& r);
  // Room for the samples of `requests` requests, added one by one (exact samples only).
  void reserve(size_t requests);
  // Writes the figures into `s`; `busy_s` as summarize()'s. The latency breakdown's p99
  // shares are left to the caller (they need the records).
  void finish(Summary& s, double busy_s, const Samples& tbt_s) const;

 private:
  struct Class {
    PriorityClassSummary counts;
    Samples e2e, ttft, tpot, queue;
    void add(const RequestRecord& r);
    void finish(PriorityClassSummary& out) const;
  };
  Class all_;
  Samples norm_;
  // Ordered: the most urgent class first. Empty while every request has first_priority_.
  std::map<int32_t, Class> by_priority_;
  std::optional<int32_t> first_priority_;
  int64_t prompt_tokens_ = 0, output_tokens_ = 0;
  SimTime first_arrival_ = SimTime::max(), last_finish_ = SimTime::zero();
  // The breakdown's parts over the completed requests, in ns (exact, order-free).
  std::array<int64_t, kNumLatencyParts> part_ns_{};
  std::array<DDSketch, kNumLatencyParts> part_sketch_{};
  int64_t e2e_ns_ = 0;
};

struct SimulationResult {
  std::vector<RequestRecord> requests;
  std::vector<IterationRecord> iterations;  // only when recorded
  // With SimulationOptions::record_iterations: every moment a replica was left with nothing to
  // run, by time (then replica).
  std::vector<IdleSample> idle_samples;
  // With SimulationOptions::record_iteration_items: the items of every recorded iteration.
  std::vector<IterationItem> iteration_items;
  // The phase changes of the requests with id < SimulationOptions::record_phases_of_first_requests,
  // by request, then time; each request's first is kQueued, its last kFinished or kRejected.
  std::vector<RequestPhaseChange> request_phases;
  WeightedSamples tbt_s;                // every inter-token gap
  std::vector<HandoffRecord> handoffs;  // disaggregated runs, by request id; else empty
  Summary summary;
  int64_t kv_capacity_tokens = 0;
  // How it was sized, in words: the engine's rule (Policy::kv_sizing) or --num-gpu-blocks.
  std::string kv_capacity_rule;
  // Rejected requests whose prompt + output exceed the model's context: no deployment of the
  // model serves them, so an SLO verdict leaves them out (experiments/run/slo.h).
  int64_t rejected_beyond_context = 0;
  // Iterations advanced by decode fast-forward rather than one by one (a speed figure, not a
  // result: the results are the same either way).
  int64_t fast_forwarded_iterations = 0;
  // Iterations (fast-forwarded ones included) whose leading decodes were a decode cohort
  // (sim/decode_cohort.h), advanced without visiting them: a speed figure too.
  int64_t cohort_iterations = 0;
  // Speculative decoding (hwmodel/speculative.h), over every replica: the decode steps that
  // verified drafts, the drafts verified and accepted (uncapped, as vLLM counts
  // num_accepted_tokens), and the tokens those steps emitted (capped at each request's output).
  // KV offload's host tier over every replica (SimulationOptions::kv_offload_cpu_tokens), when set.
  std::optional<KvOffloadStats> kv_offload;
  std::optional<KvOffloadStats> kv_offload_disk;  // and its disk tier (kv_offload_disk_tokens)
  struct SpeculativeCounts {
    int64_t steps = 0, draft_tokens = 0, accepted_tokens = 0, emitted_tokens = 0;
  } speculative;
};

}  // namespace batchsim
