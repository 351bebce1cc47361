// batchsim — where each request's end-to-end time went: the latency breakdown (issue 16).
//
// Every nanosecond from a request's arrival (its send time under closed-loop clients) to its
// last token is given to exactly one part, in integer nanoseconds, so that the parts of a
// completed request sum to its e2e exactly (requests.csv's breakdown_<part>_s add up to e2e_s
// to the last digit). The parts:
//   queueing     arrival to its first iteration: waiting to be admitted.
//   prefill      its own prompt: the iterations that compute its prefill chunks, less their
//                overhead (the whole iteration's compute, shared with whatever else ran in it:
//                a chunk is the work that sets such an iteration's length, so it is not split).
//   decode       its own decode steps: per decode iteration, what an iteration of the same
//                decodes *without* the iteration's prefill chunks would compute (the cost model's
//                kernels for that batch: the counterfactual that answers "how long would this
//                step have been"); a decode-only iteration's whole compute.
//   stall        time its progress waited on other requests' work once admitted: in a decode
//                step, the rest of the iteration beyond that counterfactual (the prefill chunks
//                it shared the iteration with: Sarathi-Serve's "generation stall", Agrawal et
//                al., OSDI 2024); every iteration it was left out of while admitted and not
//                preempted, all of it (vLLM v0's prefill-only steps pause every running decode);
//                and any time its replica idled while it was admitted.
//   preemption   waiting after a preemption until it runs again; the compute of its recompute
//                chunks (the tokens it had computed before a recompute preemption); the swap
//                transfers (Batch::extra_time) of the iterations it is in.
//   kv_transfer  prefill/decode disaggregation (issue 15): from the prefill replica's hand-off
//                (its first token) to its first iteration on the decode replica — waiting for
//                decode KV memory, for the link, on the link, and for the decode replica's next
//                step. 0 in a colocated run.
//   overhead     the engine's CPU and launch time of the iterations it is in
//                (IterationCost::overhead_s: nothing of it is any request's compute).
// An iteration's duration D splits as: swap time (extra_time) -> preemption; overhead_s (rounded
// to ns, at most what is left) -> overhead; the remaining compute C to the part its item's kind
// says, with a decode step's C cut at the counterfactual's compute (decode) and the remainder
// (stall), so every iteration gives each of its requests exactly D.
//
// Cost. The counterfactual adds the decode attention the mixed iteration charged to the kernels
// that depend on the row count alone, which a replica asks of the cost model once per row count
// (the same sum as a cost-model call on the decodes alone, to the rounding of its order). Nothing
// is done per decode step: a replica keeps the running sum of what a
// decode step of each of its iterations gets (RunningShares), and a request takes the
// difference over the stretch it was running when it leaves (finishes, is preempted, hands its
// KV on); only what differs from a decode step touches a request — joining, a prefill chunk,
// being left out of an iteration (found by comparing the batch's size with the running count;
// when most are left out, as in a prefill-only step, the shares are the left-out's and the
// batch's requests the exceptions) — so a run costs what its events do. A
// fast-forwarded decode run adds its iterations' splits as it builds them and the replica's sums
// take the run's total once: the same nanoseconds as stepping the iterations one by one.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hwmodel/base/time.h"
#include "hwmodel/cost_model.h"
#include "sim/batch.h"
#include "sim/policy.h"
#include "sim/workload/request.h"

namespace batchsim {

enum class LatencyPart : uint8_t { kQueueing, kPrefill, kDecode, kStall, kPreemption, kKvTransfer, kOverhead };
inline constexpr int kNumLatencyParts = 7;
// The parts in order, and their names in requests.csv (breakdown_<name>_s) and summary.json
// (latency_breakdown.<name>): "queueing", "prefill", "decode", "stall", "preemption",
// "kv_transfer", "overhead".
inline constexpr std::array<LatencyPart, kNumLatencyParts> kLatencyParts = {
    LatencyPart::kQueueing,   LatencyPart::kPrefill,    LatencyPart::kDecode,  LatencyPart::kStall,
    LatencyPart::kPreemption, LatencyPart::kKvTransfer, LatencyPart::kOverhead};
std::string_view latency_part_name(LatencyPart part);

// One request's e2e split into parts, in ns.
struct LatencyBreakdown {
  std::array<int64_t, kNumLatencyParts> ns{};

  int64_t& operator[](LatencyPart part) { return ns[static_cast<size_t>(part)]; }
  int64_t operator[](LatencyPart part) const { return ns[static_cast<size_t>(part)]; }
  SimTime time(LatencyPart part) const { return SimTime::from_ns((*this)[part]); }
  double seconds(LatencyPart part) const { return time(part).seconds(); }
  int64_t total_ns() const;
  bool operator==(const LatencyBreakdown&) const = default;
};

// How one iteration's duration divides (see the header comment), in ns; the parts sum to the
// duration. A fast-forwarded decode run holds the sums over its iterations.
struct IterationSplit {
  int64_t swap_ns = 0;      // -> preemption, for every request in the iteration
  int64_t overhead_ns = 0;  // -> overhead, for every request in the iteration
  int64_t compute_ns = 0;   // -> by each request's kind of work
  int64_t decode_ns = 0;    // of compute_ns, what a decode step keeps as decode (the rest: stall)

  int64_t duration_ns() const { return swap_ns + overhead_ns + compute_ns; }
  IterationSplit& operator+=(const IterationSplit& o) {
    swap_ns += o.swap_ns;
    overhead_ns += o.overhead_ns;
    compute_ns += o.compute_ns;
    decode_ns += o.decode_ns;
    return *this;
  }
};

// The iteration of `duration` (the cost model's total_s plus `extra_time`, as the replica ran
// it) split by `cost`; `decodes_alone_s`, for an iteration that mixes prefill chunks with
// decodes, is the kernel time of the same decodes alone (null otherwise). Inline: it runs for
// every iteration, fast-forwarded ones too.
inline IterationSplit split_iteration(SimTime duration, const IterationCost& cost, SimTime extra_time,
                                      const double* decodes_alone_s) {
  // Each piece is cut from what the earlier ones left, so that they never exceed the duration
  // (which is at least 1 ns, and rounds the cost model's seconds once) and sum to it exactly.
  IterationSplit s;
  const int64_t duration_ns = duration.ns();
  s.swap_ns = std::clamp<int64_t>(extra_time.ns(), 0, duration_ns);
  const int64_t rest_ns = duration_ns - s.swap_ns;
  s.overhead_ns = std::clamp<int64_t>(SimTime::from_seconds(cost.overhead_s).ns(), 0, rest_ns);
  s.compute_ns = rest_ns - s.overhead_ns;
  s.decode_ns = s.compute_ns;
  if (decodes_alone_s != nullptr) {
    // The decodes alone: their kernels' time without the prefill chunks (the engine's overhead
    // is counted as overhead above, whatever the batch).
    s.decode_ns = std::clamp<int64_t>(SimTime::from_seconds(*decodes_alone_s).ns(), 0, s.compute_ns);
  }
  return s;
}

// The per-request attribution a simulation keeps while it runs. The simulation tells it when a
// request arrives, joins a replica's running requests (its first iteration, or again after a
// preemption), is preempted, finishes, and about each iteration (run) a replica starts and
// ends, and each prefill chunk; each request's time since its last attributed moment goes to
// the part its state says, so nothing is counted twice or left out.
class LatencyAccounting {
 public:
  void reset(size_t num_requests, size_t num_replicas);

  void arrived(RequestId id, SimTime at);
  // Request `id` is in the iteration replica `replica` starts at `at`, and was not running
  // before: its wait since its last attributed moment goes to queueing (not yet admitted),
  // preemption or kv_transfer, by its state.
  void joined(RequestId id, int32_t replica, SimTime at);
  // Replica `replica` starts the iteration of `batch` at `start` (its cost and duration as the
  // replica ran it; every item's request has joined); builds the counterfactual of a mixed
  // iteration with `cost_model`, and finds the running requests the batch leaves out: those whose
  // `batch_stamp[id]` is not `stamp` (the simulation's mark of the batch's items) and that are
  // not members of any of `cohorts` (the replica's cohorts that the batch lists).
  void iteration_started(int32_t replica, SimTime start, const Batch& batch, const IterationCost& cost,
                         SimTime duration, const CostModel& cost_model, std::span<const int64_t> batch_stamp,
                         int64_t stamp, std::span<const DecodeCohort* const> cohorts = {});
  // A fast-forward repeat of the replica's decode iteration, of `cost` and `duration`.
  void iteration_repeated(int32_t replica, const IterationCost& cost, SimTime duration) {
    replicas_[static_cast<size_t>(replica)].split += split_iteration(duration, cost, SimTime::zero(), nullptr);
  }
  // The replica's iteration (or fast-forwarded run) ended at `end`: before its requests are
  // advanced (those that finish in it take it with them).
  void iteration_ended(int32_t replica, SimTime end);
  // Request `id` computed `new_tokens` after `context_before` as a prefill chunk in its
  // replica's iteration that just ended (after iteration_ended): its compute is its own prefill,
  // or preemption for the tokens it recomputes, instead of a decode step's.
  void prefill_chunk_done(RequestId id, int64_t context_before, int64_t new_tokens);
  // Request `id` finished at `at`, the end of its replica's iteration.
  void finished(RequestId id, SimTime at) {
    RequestAccount& a = requests_[static_cast<size_t>(id)];
    leave(a, at);
    a.waiting = Waiting::kDone;
  }
  // Rejected by its policy: it leaves the running requests if it was one (no policy rejects a
  // running request today, but the interface allows it). Its parts mean nothing.
  void rejected(RequestId id) {
    RequestAccount& a = requests_[static_cast<size_t>(id)];
    if (a.waiting == Waiting::kRunning) leave(a, replicas_[static_cast<size_t>(a.replica)].until);
    a.waiting = Waiting::kDone;
  }
  // Preempted at `at` by the policy's schedule() (RequestProgress before the preemption changes
  // it: `computed_tokens` and `known_tokens` of it). A recompute preemption marks the tokens it
  // must compute again: all it knew when it was decoding (the re-prefill replaces the decode
  // step that would have computed the last sampled token), the chunks it had computed when it
  // was still prefilling.
  void preempted(RequestId id, SimTime at, int64_t computed_tokens, int64_t known_tokens, int32_t generated_tokens,
                 bool keeps_kv);
  // Disaggregation (issue 15): the prefill replica hands the request on at `at` (its first
  // token); from then until its first iteration on the decode replica — waiting for decode KV
  // memory, for the link, on the link, and for the decode replica's next iteration — is
  // kv_transfer. Never called in colocated runs, whose kv_transfer is 0.
  void kv_transfer_started(RequestId id, SimTime at);
  // Its KV has landed on decode replica `replica`: it joins there in the first iteration that
  // runs it (the simulation marks it running without an admission of its own).
  void kv_landed(RequestId id, int32_t replica) { replicas_[static_cast<size_t>(replica)].landed.push_back(id); }

  const LatencyBreakdown& of(RequestId id) const { return requests_[static_cast<size_t>(id)].parts; }
  // Throws std::logic_error unless the parts of every finished request sum to its
  // finished - arrival: the accounting's invariant, checked once at the end of a run.
  void check_sums(std::span<const Request> requests, std::span<const RequestProgress> progress) const;
  // The same for one request (a streaming run checks each as it settles).
  void check_sum(RequestId id, const Request& request, const RequestProgress& progress) const;
  // Request `id`'s account starts afresh: a streaming run gives its slot to a new arrival.
  void recycle(RequestId id) { requests_[static_cast<size_t>(id)] = RequestAccount{}; }

 private:
  // What a decode step gets of an iteration, summed over a replica's iterations and idle time.
  struct RunningShares {
    int64_t overhead_ns = 0, preemption_ns = 0, decode_ns = 0, stall_ns = 0;
  };
  // What a request is doing, which decides where its time goes.
  enum class Waiting : uint8_t { kForAdmission, kRunning, kAfterPreemption, kForKv, kDone };
  struct RequestAccount {
    LatencyBreakdown parts;
    RunningShares joined_at;      // its replica's running shares when it joined (while running)
    SimTime attributed_until;     // while not running: every moment before this is in `parts`
    int64_t recompute_until = 0;  // prefill tokens below this are recomputation
    int32_t replica = 0;          // while running
    int32_t running_index = -1;   // in its replica's running list
    Waiting waiting = Waiting::kForAdmission;
  };
  struct ReplicaAccount {
    RunningShares shares;  // from t = 0 to `until`
    SimTime until;         // its last iteration's end, or later while it idles
    // The iteration (or fast-forwarded run) in flight, and the running requests it treats
    // otherwise than its shares say: with few left out, the shares are a decode step's and the
    // exceptions those left out; with most left out (a prefill-only step), the shares are the
    // left-out's (all of it stall) and the exceptions the batch's requests.
    SimTime run_start;
    IterationSplit split;
    bool left_out_by_default = false;
    std::vector<RequestId> exceptions;
    std::vector<RequestId> running;  // requests running here (joined, not left)
    std::vector<RequestId> landed;   // KV landed here, not yet in an iteration (disaggregation)
    // By row count d: the kernels of a decode-only iteration of d rows that depend on d alone
    // (GEMMs, LM head, elementwise, all-reduce), asked of the cost model once per d; NaN until.
    std::vector<double> decode_rows_kernels_s;
  };

  // The kernel time of `shape`'s decodes without its prefill chunks: their row-count kernels
  // (cached) plus the decode attention `cost` charged them, which depends on their rows alone.
  static double decodes_alone_s(ReplicaAccount& r, const BatchShape& shape, const IterationCost& cost,
                                const CostModel& cost_model);

  // Brings the replica's running shares to `at` (>= until, between iterations): running
  // requests that wait on an idle replica stall.
  static void advance(ReplicaAccount& r, SimTime at);
  // The request leaves its replica's running requests at `at`, taking the shares it ran for.
  void leave(RequestAccount& a, SimTime at);
  [[noreturn]] static void time_went_backwards(SimTime from, SimTime to);

  std::vector<RequestAccount> requests_;
  std::vector<ReplicaAccount> replicas_;
};

}  // namespace batchsim
