// batchsim — the discrete-event core: an event queue and N identical replicas, each driving a
// policy of its own, behind a request router.
//
// Events are ordered by (time, insertion sequence), so equal-time events run in a fixed order
// and the same inputs give byte-identical outputs (ns-3's Scheduler contract). Two kinds of
// event: a request arrives (and the router assigns it to a replica; the workload's arrivals are
// read in order beside the queue, each ahead of any event at its time, as if queued first); a
// replica finishes an iteration (or its policy's wake-up is due). A replica asks its policy for
// the next batch, asks the cost model for its duration, schedules the iteration's end, and
// advances the requests' progress when it ends. Replicas share nothing but the event queue and the
// (read-only) workload: each has its own policy, queues and KV cache, as the replicas behind
// Vidur's global scheduler do (Agrawal et al., "Vidur", MLSys 2024). One replica is the
// single-GPU-group simulation of old, to the byte.
// Every request either finishes exactly once or is rejected with a reason; the loop ends when
// every request has done one or the other.
//
// The parts, each in a file of its own: Simulation keeps the event loop and what an iteration
// does to the requests (start, tokens, finish, fast-forward); Replica (sim/replica.h) one GPU
// group's state and running sums; EventQueue (sim/event_queue.h) the ordered events;
// RequestRouter (sim/router.h) a pool's routing; ClientPool (sim/clients.h) the clients in front
// of the server (closed loop, think times, connections, sessions); DisaggregatedPools
// (sim/disaggregation.h) the prefill and decode pools and the KV hand-off between them.
//
// Disaggregated pools (SimulationOptions::disaggregation; sim/disaggregation.cpp): the first P
// replicas form a prefill pool and the rest a decode pool, each with its own cost model (GPU,
// TP, engine) and KV memory, as Splitwise (Patel et al., ISCA'24), DistServe (Zhong et al.,
// OSDI'24), Mooncake (Qin et al., FAST'25) and vLLM's / NVIDIA Dynamo's disaggregated serving
// run them. An arrival is routed to a prefill replica, whose policy sees it with a one-token
// output (sim/policy.h, "Disaggregated pools") and computes its prompt and first token there:
// TTFT is that first token's time, as Splitwise and DistServe report it. The request is then
// handed to a decode replica picked by the decode router; the prefill replica keeps its KV
// until the transfer lands. The decode replica's policy admits it when its prompt's KV fits
// (backpressure: until then the transfer waits and the prefill KV stays held, which in turn
// stops the prefill pool admitting once its memory is full), the KV moves over the link
// (sim/kv_transfer.h: FIFO per NIC, pull or layer-wise), and the request decodes there to its
// end. Its second token's gap (TBT) therefore holds the hand-off, as a client sees it. A
// request is prefilled once (plus recomputes after preemption, on either side) and decoded once.
//
// Streaming (SimulationOptions::streaming, issue 17): for runs too long to hold, the requests
// come from a RequestSource one at a time (the next arrival is the only one read ahead), and
// per-request state lives in a fixed pool of `slots`: an arriving request takes a free slot,
// whose index is the RequestId the policies, KV caches and events see (so they need no change
// and keep slot-sized tables), while Request::id keeps its global id for records and for the
// policies' last tie-break. A request's record goes to `on_settled` the moment it finishes or
// is rejected, and its slot is free for the next arrival once its policy holds no KV for it
// (static batching keeps a batch's finished rows until the batch ends). Policies that order
// requests break ties by Request::id, the arrival order, never by the RequestId (a slot). Percentiles come from
// DDSketches (sim/ddsketch.h); every other figure is what the same run in memory gives (means up to the order of a
// floating-point sum: records settle in another order than by id). Memory is then the slots plus the sketches, whatever
// the number of requests. Prompt-block hashes (prefix caching) come from the source with each request
// (RequestSource::prefix_hashes) and are kept per slot; a KV block of a request's own content is keyed by its
// Request::id, so a slot's next occupant never finds its predecessor's. Not supported (refused with std::logic_error;
// the CLI refuses them first with the option's name): closed-loop clients (their held
// requests are a queue of unbounded length), disaggregated pools, hashes given in
// SimulationOptions::prefix_blocks (a streaming run's are its source's), recorded iterations
// and phases (they grow with the run).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "hwmodel/base/random.h"
#include "hwmodel/cost_model.h"
#include "sim/clients.h"
#include "sim/decode_cohort.h"
#include "sim/disaggregation.h"
#include "sim/event_queue.h"
#include "sim/kv_transfer.h"
#include "sim/metrics.h"
#include "sim/policy.h"
#include "sim/replica.h"
#include "sim/router.h"
#include "sim/workload/request.h"

namespace batchsim {

struct SimulationOptions {
  double gpu_memory_utilization = 0.9;
  // Size a policy's KV cache by its engine's own rule where it has one (Policy::kv_sizing:
  // SGLang's mem_fraction_static, TensorRT-LLM's free_gpu_memory_fraction); false: every policy
  // by gpu_memory_utilization (the policy tests' rig, whose made-up GPU is sized for that rule).
  bool engine_kv_rules = true;
  bool record_iterations = false;
  // With record_iterations: also each iteration's items (request, tokens, prefill or decode),
  // for iterations.csv's request ids and a timeline's prefill requests.
  bool record_iteration_items = false;
  // Record the phase changes (SimulationResult::request_phases) of the requests with id below
  // this, for a timeline of requests; 0: none. A bound rather than a switch so that a large run
  // keeps a few thousand requests' phases, not all of them.
  int64_t record_phases_of_first_requests = 0;
  // Advance runs of identical decode iterations in one step where the policy vouches for it
  // (Policy::repeat_decode_step); the results are the same to the byte. Off while
  // `on_iteration` is set, since that wants every batch.
  bool fast_forward = true;
  // The workload's prompt-block hashes (BuiltWorkload::prefix_blocks), handed to the policy
  // for prefix caching; null or empty: none. Must outlive the run.
  const PrefixBlockHashes* prefix_blocks = nullptr;
  // Multi-replica runs: how arrivals are routed, and the seed of the random router (the run's
  // workload seed; the router draws from a stream of its own, so routing never shifts the
  // workload's samples). Ignored with one replica.
  Router router = Router::kRoundRobin;
  uint64_t router_seed = 0;
  // Closed-loop clients, as `vllm bench serve --max-concurrency C` runs them: at most C requests
  // in flight (sent, not yet finished or rejected); a request whose arrival comes while C are
  // in flight waits at the client and is sent the moment one settles. Its arrival, from which
  // TTFT and e2e are measured, is the time it is sent (vLLM's benchmark starts a request's clock
  // once the semaphore lets it go). With every arrival at t = 0 this is a pure closed loop.
  // 0: open loop (every request is sent at its arrival).
  int64_t max_concurrency = 0;
  // Closed loop only: each request's think time (BuiltWorkload::think_times, one per request).
  // The client that takes request `id` (a free one at its arrival, else the one the next settle
  // frees) waits think_times[id] before it sends it, and stays taken meanwhile (a user reading
  // the last answer), so the first C requests are sent one think time after t = 0, not in one
  // burst, and each later one a think time after a settle. Null or empty: none. Must outlive
  // the run.
  const std::vector<SimTime>* think_times = nullptr;
  // Multi-turn sessions (SessionLinks, sim/workload/request.h; BuiltWorkload::sessions): a turn
  // with a predecessor arrives at the client at its Workload arrival (a synthetic session's
  // start, a trace row's recorded time) and is sent its delay after the predecessor settles (its
  // last token; or its rejection, as an agent goes on after an error), or at that arrival if it
  // is later; its TTFT and e2e run from that send. With max_concurrency, N *sessions* at a time:
  // a session's first turn is held at the client while N are open and sent when one's last turn
  // settles, and each later turn is sent no earlier than its Workload offset from its first turn,
  // counted from that turn's send. Not streaming, not with client_connections. Null or empty:
  // none. Must outlive the run.
  const SessionLinks* sessions = nullptr;
  // Closed loop only: the client's HTTP connection pool, as aiohttp's TCPConnector(limit=N)
  // (default 100) and httpx's max_connections (default 100) hold one: at most N requests at the
  // server at once. A request sent while N are there waits at the client for a connection, in
  // order of sending, and reaches the server the moment one settles; its clock runs from its
  // send, so the wait counts in its TTFT and e2e (as a benchmark that starts the clock before it
  // asks the pool for a connection measures it) and in its breakdown's queueing. 0: no limit.
  int64_t client_connections = 0;
  // The KV cache's size in blocks, as vLLM's --num-gpu-blocks-override sets it
  // (CacheConfig.num_gpu_blocks_override, which replaces the count profiled from memory):
  // a paged policy gets this many blocks of its block_size, a policy that reserves contiguous
  // KV this many blocks of kDefaultBlockSize tokens, so that one value gives vLLM-like and
  // reserving policies the same tokens at the default block size. Not checked against the
  // GPU's memory: it replaces the memory estimate. kv.capacity_tokens reports what the policy
  // got. 0: from memory (gpu_memory_utilization).
  int64_t num_gpu_blocks = 0;
  // KV offload to host memory (--kv-offload cpu=SIZE): a tier of this many tokens under every
  // replica's paged prefix cache (PagedKvCache::set_host_tier); 0: none. Summed figures in
  // SimulationResult::kv_offload.
  int64_t kv_offload_cpu_tokens = 0;
  // --kv-offload ...,disk=SIZE: a disk tier of this many tokens beside the host tier
  // (PagedKvCache::set_disk_tier); 0: none. Figures in SimulationResult::kv_offload_disk.
  int64_t kv_offload_disk_tokens = 0;
  // Called after every iteration with the applied batch (IterationRecord::replica says whose):
  // tests hang invariant checks here.
  std::function<void(const Batch&, const IterationRecord&, const Policy&)> on_iteration;
  DisaggregationOptions disaggregation;
  // Streaming mode (see the header comment); off while `slots` is 0.
  struct Streaming {
    // Requests in flight at most: a run that has more arrived and unsettled at once stops with
    // a UserError naming --streaming-slots.
    int64_t slots = 0;
    // Each request's record, as it settles (finished or rejected), in settle order.
    std::function<void(const RequestRecord&)> on_settled;
  } streaming;
};

class Simulation {
 public:
  // One replica.
  Simulation(const Workload& workload, Policy& policy, const CostModel& cost_model, SimulationOptions options = {});
  // One replica per policy (identical policies, one instance each), routed by options.router.
  Simulation(const Workload& workload, std::span<Policy* const> policies, const CostModel& cost_model,
             SimulationOptions options = {});
  // Streaming (options.streaming.slots > 0): the requests come from `source`, which must
  // outlive run(); the result holds no request records (they went to on_settled).
  Simulation(RequestSource& source, std::span<Policy* const> policies, const CostModel& cost_model,
             SimulationOptions options);
  SimulationResult run();

 private:
  bool streaming() const { return source_ != nullptr; }
  // Checks the options against the workload's `n` requests and starts the run's state afresh.
  void reset(int64_t n);
  // Streaming: `table` free slots, and the source's first request read ahead.
  void reset_slots(size_t table);
  // Sizes the replicas' KV memory, sets up the pools, and attaches each replica's policy.
  void set_up_replicas();
  // Replica `r`'s policy gets its environment: the requests, their progress, its KV memory, and
  // the hooks through which it rejects, preempts and shares cached prefixes.
  void attach(Replica& r);
  // The next arrival from the workload, SimTime::max() when none is left.
  SimTime next_arrival_time() const;
  // Streaming: the read-ahead request arrives now, in a free slot; the next one is read.
  void arrive_from_source();
  // Streaming: request `id` (a slot) settled: its record goes out, its slot is free.
  void settle_slot(RequestId id);
  // A request's record from its request, progress and latency breakdown (not its reject reason).
  void fill_record(RequestRecord& rec, RequestId id) const;
  void arrive(RequestId id);
  // An arrival at the clients (ClientPool::arrive): to the server now, or later.
  void client_arrival(RequestId id);
  // Every replica that holds work schedules again once no request can arrive before one
  // settles (PolicyEnv::all_arrived).
  void wake_if_none_can_arrive();
  void try_start_iteration(Replica& r);
  // Checks the batch replica `r`'s policy built (batch stamp `stamp`) and starts its items: the
  // requests admitted or readmitted join, and phases and items are recorded.
  void start_items(Replica& r, int64_t stamp);
  void finish_iteration(Replica& r);
  void reject(RequestId id, std::string reason);
  // Appends to the phase log when request `id` is one whose phases are recorded.
  void record_phase(RequestId id, RequestPhase phase) {
    if (id < options_.record_phases_of_first_requests) result_.request_phases.push_back({id, now_, phase});
  }
  // Repeats the decode step just started, whose cost was `cost`, while it stays the same batch.
  SimTime fast_forward(Replica& r, SimTime end, int64_t min_remaining, IterationCost cost);
  // Where replicas log their iterations: the result's, when they are recorded.
  std::vector<IterationRecord>* iteration_log() { return options_.record_iterations ? &result_.iterations : nullptr; }
  // The inter-token gaps of one iteration's tokens, in order, as runs of equal consecutive
  // gaps, each added to the replica's samples as one (gap, count): what adding the gaps one by
  // one stores (GapSamples merges such runs), at one add per run instead of one per token.
  // Gaps are compared in nanoseconds and turned into seconds once per run: two gaps that
  // differ in nanoseconds differ in seconds too (below 2^20 s, ns x 1e-9 is rounded by less
  // than half the 1e-9 s between them), so the runs are those of the gaps in seconds.
  struct GapRun {
    SimTime gap;
    int64_t count = 0;
    void add(GapSamples& samples, SimTime g, int64_t n = 1) {
      if (count > 0 && g == gap) {
        count += n;
        return;
      }
      flush(samples);
      gap = g;
      count = n;
    }
    void flush(GapSamples& samples) {
      if (count > 0) samples.add(gap.seconds(), count);
      count = 0;
    }
  };
  // Also notes a decode replica's first token of a handed-off request; its gap goes to `gaps`,
  // which the caller flushes into r.tbt_s. Inline, as finish_if_done's test: both run for
  // every sequence of every iteration not fast-forwarded.
  // `decode_pool`: r.role is PoolRole::kDecode (read once by the caller's loop).
  void record_token(Replica& r, bool decode_pool, RequestId id, RequestProgress& p, SimTime at, GapRun& gaps) {
    if (decode_pool) note_decode_first_token(id, at);
    if (p.generated_tokens == 0) {
      p.first_token = at;
    } else {
      const SimTime gap = at - p.last_token;
      if (gap > p.max_tbt) p.max_tbt = gap;
      gaps.add(r.tbt_s, gap);
    }
    ++p.generated_tokens;
    p.last_token = at;
  }
  void note_decode_first_token(RequestId id, SimTime at);
  // A cohort's steps of the iteration that ended (its first and its repeats): their gaps, the
  // first step's into `gaps` (in batch order: after the items ahead of it, before those after),
  // and the members that finished, which leave the replica.
  void finish_cohort_steps(Replica& r, DecodeCohort& cohort, GapRun& gaps);
  // A speculative decode `item` has sampled its token: its drafts are accepted or rejected by
  // the cost model's rates, and the accepted ones (up to its output) join its tokens.
  void accept_drafts(Replica& r, const BatchItem& item, RequestProgress& p, int32_t output_tokens);
  // At its last output token (as replica `r` sees it: a prefill replica's is the first, and
  // `view` is r.env.requests' data, read once by the caller's loop).
  // Whether the request left the replica: finished, or handed to the decode pool.
  bool finish_if_done(Replica& r, const Request* view, RequestId id, RequestProgress& p) {
    if (p.generated_tokens < view[id].output_tokens) return false;
    leave(r, id, p);
    return true;
  }
  // finish_if_done's request that reached its last token leaves the replica.
  void leave(Replica& r, RequestId id, RequestProgress& p);
  void summarize_replicas();

  // Disaggregated pools (sim/disaggregation.h).
  bool pooled() const { return options_.disaggregation.enabled(); }
  // A replica's KV tokens on `cost_model`: by its policy's engine's rule (Policy::kv_sizing), or
  // by --gpu-memory-utilization; with the rule in words.
  Policy::KvSizing size_kv(const Policy& policy, const CostModel& cost_model) const;

  const Workload& workload_;  // exact mode's; empty while streaming
  // Streaming: the source, the request read ahead (the next to arrive), the requests in their
  // slots (PolicyEnv::requests), the free slots (a stack), each slot's reject reason, and the
  // figures of the settled requests.
  RequestSource* source_ = nullptr;
  std::optional<Request> next_request_;
  int64_t read_ = 0;  // requests read from the source
  Workload slots_;
  // The prompt-block hashes the policies and the prefix router read: the workload's
  // (SimulationOptions::prefix_blocks), or, streaming, each slot's occupant's from the source.
  const PrefixBlockHashes* prefix_blocks_ = nullptr;
  PrefixBlockHashes slot_prefix_blocks_;
  std::vector<RequestId> free_slots_;
  std::vector<RequestId> kv_held_slots_;  // settled, but their policy still holds their KV
  std::vector<std::string> slot_reject_reason_;
  RequestFigures<SketchedSamples> figures_;
  // All requests of the run: the workload's size, or while streaming INT64_MAX until the source
  // runs dry (PolicyEnv::total_requests).
  int64_t total_requests_ = 0;
  // The requests as sent: the workload itself, or with closed-loop clients or sessions the
  // clients' copy whose arrivals are the send times (PolicyEnv::requests and the records read this).
  const Workload* requests_ = nullptr;
  ClientPool clients_;
  int64_t scheduled_ = 0;  // workload arrivals processed: the next is workload_[scheduled_]
  std::vector<Policy*> policies_;
  const CostModel& cost_model_;
  SimulationOptions options_;
  std::vector<Replica> replicas_;  // sized once: policies keep pointers to their env
  EventQueue events_;
  SimTime now_;
  int64_t arrived_ = 0;     // arrivals processed (they come in workload order)
  RequestRouter router_;    // arrivals (with pools: to the prefill pool)
  Rng speculative_rng_{0};  // acceptance of drafts (accept_drafts)
  std::vector<RequestId> finished_;
  std::vector<RequestProgress> progress_;
  std::vector<int64_t> scheduled_in_batch_;          // catches a request listed twice in a batch
  std::vector<const DecodeCohort*> listed_cohorts_;  // the cohorts the batch being started lists
  int64_t batches_ = 0;                              // batches started, over all replicas
  SimulationResult result_;
  int64_t settled_ = 0;  // finished + rejected
  // Prefix caching: tokens found cached at each request's admission in progress (reset when it
  // is first scheduled); the sums over all admissions of prefills are per replica.
  std::vector<int64_t> admission_hit_;
  // Disaggregated pools, and the requests the iteration being finished hands to their decode pool.
  DisaggregatedPools pools_;
  std::vector<RequestId> handing_off_;
  // Every request's latency breakdown, attributed as the run goes (sim/latency_breakdown.h).
  LatencyAccounting latency_;
};

// Cluster-wide figures of a run's request records; `busy_s` is the busy time per replica
// (summed over replicas / their number), so busy_fraction is the replicas' mean.
Summary summarize(const SimulationResult& result, double busy_s);
// Summary::priority_classes of these records: one class per priority, smallest first, or none
// when all requests share one priority.
std::vector<PriorityClassSummary> summarize_priority_classes(const std::vector<RequestRecord>& requests);

}  // namespace batchsim
