// batchsim — "why were the slow requests slow, and what would have helped?" in one line, from a
// run's latency breakdown (sim/latency_breakdown.h): what `batchsim run` prints as `diagnosis:`,
// summary.json's latency_breakdown.diagnosis, and the report's per-policy line.
//
// The rules read the shares of the p99 requests' e2e time (the slowest 1%: what a tail SLO is
// about), and nothing but the run's own figures:
//  1. Lost time first. Of the parts that are not a request's own work — queueing, stall,
//     preemption, overhead, kv_transfer — each whose share reaches kNotableShare is named,
//     largest first, at most kMostNamedParts, each with what removes it:
//       queueing    static batching: continuous batching (a static batch waits to fill and
//                   holds its slots until its longest request ends); every request sent at
//                   t = 0 (an offline benchmark): the burst itself, which only more throughput
//                   shortens, whatever the KV size; KV memory full
//                   (kv.allocated_fraction_peak >= kKvFull): a larger KV cache or more
//                   replicas; otherwise the batch limits held them: more replicas or a larger
//                   max_num_seqs / max_num_batched_tokens;
//       stall       prefills not chunked: chunked prefill (sarathi / vllm); chunked in prefill
//                   batches that pause the decodes (SGLang's default): mixed chunks; chunked
//                   and mixed already: a smaller chunk budget (it trades stall for queueing) or
//                   more replicas;
//       preemption  more KV memory, KV reserved at admission, or a priority/SJF order;
//       overhead    an engine with CUDA graphs or an overlapped scheduler, or larger batches;
//       kv_transfer a faster link or more decode memory.
//  2. Otherwise their own prefill and decode dominate: the requests are long, and faster
//     iterations (GPU, tensor parallelism) help more than any scheduling change.
//  3. No completed request: nothing to diagnose.
// Which of the alternatives applies is read from the run's policy (PolicyTraits), so that a
// run is never told to adopt what it already does.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "sim/metrics.h"

namespace batchsim {

// A lost-time part is named once it takes this share of the p99 requests' time: a fifth of the
// tail, which removing it would cut by as much, and more than the runs of one configuration
// differ by from seed to seed at the request counts of a typical run.
inline constexpr double kNotableShare = 0.20;
// KV memory counts as full when the allocated fraction peaked at or above this (a paged cache
// keeps a watermark and whole blocks free: it never reaches 100%).
inline constexpr double kKvFull = 0.90;
// At most this many lost-time parts are named: the line stays short.
inline constexpr int kMostNamedParts = 2;

// What of a policy the remedies depend on.
struct PolicyTraits {
  bool static_batching = false;  // the static base: batches start and end together
  bool chunked_prefill = false;  // prompts cut into chunks (a per-iteration token budget)
  // Prefill batches leave the running decodes out (SGLang without enable_mixed_chunk).
  bool prefill_batches_pause_decodes = false;
  std::string chunk_budget_option = "max_num_batched_tokens";  // what sets the chunk budget
};
// The traits of policy `policy` (a registered name) under options `options` (over its preset's);
// an unknown name has none.
PolicyTraits policy_traits(const std::string& policy, const std::map<std::string, std::string>& options);

// What the rules read, so that a summary.json (the report, over seeds) and a Summary give the
// same line.
struct DiagnosisInputs {
  std::array<double, kNumLatencyParts> share_of_p99{};  // by LatencyPart
  int64_t completed = 0;
  double kv_allocated_fraction_peak = 0;
  PolicyTraits policy;
  // Every request was sent at t = 0 (--arrival offline without closed-loop clients): the tail
  // queues behind the burst whatever the memory.
  bool sent_at_once = false;
  // The closed-loop client's connection pool, where it is smaller than its clients
  // (--client-connections): the requests beyond it queue at the client. 0: none.
  int64_t client_connections = 0;
};
// The pool that holds a run's clients back: `client_connections` where it is below
// `max_concurrency`, else 0.
int64_t limiting_client_connections(int64_t max_concurrency, int64_t client_connections);
DiagnosisInputs diagnosis_inputs(const Summary& summary, const PolicyTraits& policy, bool sent_at_once);
// Whether a run of `arrival` (its --arrival) and `max_concurrency` sent every request at t = 0.
bool sends_all_at_once(const std::string& arrival, int64_t max_concurrency);

// "p99 requests spent 62% queued (KV memory full: peak 97% allocated): a larger KV cache ...
// would help; 24% stalled behind other requests' prefills: chunked prefill ... would help".
std::string latency_diagnosis(const DiagnosisInputs& inputs);

}  // namespace batchsim
