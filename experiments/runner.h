// batchsim — one simulation run from a RunConfig: build the workload, cost model and policy,
// run the event loop, keep what the outputs need.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "experiments/run_config.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/hardware_profile.h"
#include "sim/simulation.h"

namespace batchsim {

struct RunOutcome {
  RunConfig config;
  HardwareProfile gpu;  // the profile config.gpu resolved to: summary.json's `trust` is its validation
  SimulationResult result;
  double wall_s = 0;  // host seconds the simulation took (not part of summary.json)
};

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
};

// Memory a run of `requests` requests under a policy of `policy_base` ("static", "continuous",
// "chunked-prefill") needs, from the per-request cost measured on the whole process (README,
// "Robustness": about 400 B a request for the continuous policies, 1.5 kB for static batching,
// whose batches keep per-slot records) with a 10% margin, plus 64 MiB for the program itself.
int64_t memory_needed_bytes(const std::string& policy_base, int64_t requests);
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
RunOutcome run_simulation(const RunConfig& config, const BuiltWorkload* workload = nullptr,
                          const RunHooks& hooks = {});

// One line for the terminal when requests were rejected, "" otherwise: how many of how many, and
// per kind of reason (the part of a reason before ": ", see sim/policy.h) the count and the
// first request, e.g. "217 of 3000 requests rejected, never to be served: 217 prompt + output
// exceed max_model_len 4096 (first: request 2635); each request's reason is in requests.csv".
std::string rejection_warning(const SimulationResult& result);

}  // namespace batchsim
