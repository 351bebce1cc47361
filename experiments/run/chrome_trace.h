// batchsim — a run as a Chrome / Perfetto trace (--chrome-trace FILE): the JSON object form of
// the Trace Event Format, which ui.perfetto.dev and chrome://tracing open.
//
// What it holds, one process per replica (pid = replica + 1, named "replica N (...)"):
//   - a thread "iterations": one complete ("X") slice per iteration, named by its content
//     ("prefill 2 (3072 tok) + decode 14"), its args the counts, tokens, KV use, waiting
//     requests, the cost model's breakdown in ms and the requests whose prefill chunks it ran;
//   - for each of the first --chrome-trace-requests requests an async track (cat "request",
//     id = the request id): a slice "request N" from its arrival to its finish or rejection,
//     its args the request's figures, and nested in it one slice per phase (queued, prefilling,
//     decoding, preempted: sim/metrics.h, RequestPhase) that lasted any time;
//   - counters "KV cache" (used_tokens, allocated_tokens) and "requests" (running, waiting),
//     sampled at every iteration start and whenever the replica is left with nothing to run.
// ts and dur are simulated microseconds, exact to the nanosecond. The run's configuration is
// under otherData.config, as summary.json's `config`.
//
// Events are written in time order, one per line, as they are made: a large run's trace is
// never held in memory. Equal times keep the order they are made in (a phase ends before the
// next begins), which viewers need to nest slices that touch.
//
// Extending it: a new request phase (as kv_transfer, between pools) is a new RequestPhase with a
// name, drawn with no change here; a request's new figures (its latency breakdown) are args of
// its "request N" slice (request_args in chrome_trace.cpp); an iteration's, args of its slice.
#pragma once

#include <filesystem>
#include <iosfwd>

#include "experiments/run/runner.h"

namespace batchsim {

// The trace of `run`, whose result holds its iterations (SimulationOptions::record_iterations),
// and for the prefill requests of each iteration and the requests' phases, its iteration items
// and request phases (run_simulation records all three for a config with chrome_trace).
void write_chrome_trace(const RunOutcome& run, std::ostream& out);
// The same into `file`; throws UserError naming --chrome-trace when it cannot be written.
void write_chrome_trace(const RunOutcome& run, const std::filesystem::path& file);

}  // namespace batchsim
