// batchsim — one simulation run from a RunConfig: build the workload, cost model and policy,
// run the event loop, keep what the outputs need.
#pragma once

#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "experiments/run/run_config.h"
#include "experiments/run/slo.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/hardware_profile.h"
#include "sim/simulation.h"

namespace batchsim {

// A run's rejected requests by kind of reason, gathered a record at a time (rejection_warning).
class RejectionTally {
 public:
  void add(const RequestRecord& r);
  // As rejection_warning, for a run of `total` requests.
  std::string line(int64_t total) const;

 private:
  struct Kind {
    int64_t count = 0;
    RequestId first = 0;
  };
  // By kind; listed in the order of their first (lowest-id) request, whatever the order the
  // records come in (a streaming run's settle order).
  std::map<std::string, Kind> kinds_;
  int64_t rejected_ = 0;
};

struct RunOutcome {
  RunConfig config;
  HardwareProfile gpu;  // the profile config.gpu resolved to: summary.json's `trust` is its validation
  SimulationResult result;
  double wall_s = 0;  // host seconds the simulation took (not part of summary.json)
  // A streaming run's rejections and goodput (when config.goodput is given), counted as its
  // requests settled: it keeps no records to count afterwards.
  std::optional<RejectionTally> streamed_rejections;
  std::optional<Goodput> streamed_goodput;
};

// Whether the run streamed (RunHooks::source): its result has no request records and its
// percentiles are sketched (Summary::percentile_relative_error).
inline bool streamed(const RunOutcome& outcome) { return outcome.result.summary.percentile_relative_error > 0; }

// What a caller may add to a run beyond its RunConfig: the experiment driver records iterations
// (for KV-over-time and iteration-budget figures) without writing iterations.csv, and watches
// every batch to draw the slot timeline.
struct RunHooks {
  bool record_iterations = false;
  bool fast_forward = true;  // off only to measure what decode fast-forward saves
  std::function<void(const Batch&, const IterationRecord&, const Policy&)> on_iteration;
  // Replaces the engine profile config.engine names: `batchsim calibrate engine` tries candidate
  // engines in memory. Must outlive the call.
  const EngineProfile* engine = nullptr;
  // Replaces make_policy(config.policy, ...) for every replica of a colocated run: a policy
  // written in Python (python/batchsim_module.cpp). config.policy then only names it in the
  // outputs, and config.engine must name its engine (there is no preset to take one from).
  std::function<std::unique_ptr<Policy>()> make_policy;
  // Streaming (sim/simulation.h, "Streaming"): the requests come from `source` (the
  // `workload` argument is then unused) in config.streaming_slots slots, and each record goes
  // to `on_settled` as it settles. Must outlive the call.
  RequestSource* source = nullptr;
  std::function<void(const RequestRecord&)> on_settled;
};

// Requests above which `batchsim run` streams without being asked, when the count is known in
// advance (a synthetic workload) and the run has nothing streaming cannot do (README, "Memory:
// exact and streaming modes"): an exact run of that many needs about 1.5 GB.
constexpr int64_t kStreamingAutoRequests = 2'000'000;
// Why `config` cannot stream ("--max-concurrency", "--chrome-trace", ...: the option that
// stops it), or "" when it can.
std::string streaming_unsupported_reason(const RunConfig& config);

// Memory a run of `requests` requests needs under a policy whose base costs `bytes_per_request`
// (PolicyBaseTraits::host_bytes_per_request, measured on the whole process: policies/common/policy_base.h),
// with a 10% margin, plus 64 MiB for the program itself.
int64_t memory_needed_bytes(double bytes_per_request, int64_t requests);
// Throws UserError when `needed` exceeds `available` bytes (both named in GiB), so that a run
// too large for the machine stops with a message instead of being killed by the kernel's OOM
// killer halfway; `available` <= 0 means unknown and passes.
void check_memory(int64_t needed, int64_t available, int64_t requests, const std::string& policy);
// MemAvailable of /proc/meminfo in bytes, or 0 where it cannot be read.
int64_t available_memory_bytes();

// A disaggregated run's pools as `run_simulation` builds them, checked without running: each
// pool's GPU and policy (with its options) exist, and its policy serves its role. Throws
// UserError naming the pool's option (--decode-policy ...). Nothing for a colocated run.
void check_run_pools(const RunConfig& config);

// Runs `config`; when `workload` is given it is used instead of generating one (so that a
// comparison feeds every policy the same request sequence); its prefix_blocks reach the policy
// for prefix caching. Throws UserError for bad input.
RunOutcome run_simulation(const RunConfig& config, const BuiltWorkload* workload = nullptr, const RunHooks& hooks = {});

// One line for the terminal when requests were rejected, "" otherwise: how many of how many, and
// per kind of reason (the part of a reason before ": ", see sim/policy.h) the count and the
// first request, e.g. "217 of 3000 requests rejected, never to be served: 217 prompt + output
// exceed max_model_len 4096 (first: request 2635); each request's reason is in requests.csv".
std::string rejection_warning(const SimulationResult& result);
// The same for a run, streamed or not (a streaming run counted its rejections as they settled).
std::string rejection_warning(const RunOutcome& outcome);

}  // namespace batchsim
