// batchsim — bench.json: a run's results under the keys and units of `vllm bench serve
// --save-result`, so that a simulated run and a measured benchmark can be diffed key by key.
//
// The definitions follow vLLM's vllm/benchmarks/serve.py (local-inference-lab/vllm @28be48f:
// calculate_metrics, benchmark's `result` dict, main's `result_json`), not summary.json's:
// - times in milliseconds (`*_ms`), throughputs per second of `duration`;
// - percentiles and medians are numpy's (linear interpolation between ranks), `std_*` numpy's
//   population standard deviation (summary.json's percentiles are nearest-rank);
// - TTFT, e2el (end-to-end latency) and ITL over completed requests; TPOT = (e2e − TTFT) /
//   (output − 1) over completed requests with more than one output token; ITL is every gap
//   between consecutive tokens of a request (vLLM's gaps between streamed chunks, one token a
//   chunk), which is summary.json's TBT;
// - `--percentile-metrics` picks which of ttft, tpot, itl, e2el get mean/median/std/pN keys
//   (default ttft,tpot,itl, as vLLM for generative models), always written in that order;
//   `--metric-percentiles` the N of `p{N}_{metric}_ms` (default 99; "99.9" gives p99.9_...).
//
// Keys batchsim cannot produce as vLLM defines them are left out rather than filled with
// something else (README "Outputs", bench.json): `date`, `endpoint_type`, `backend`, `label`,
// `model_id`, `tokenizer_id` (no server, no tokenizer), `max_output_tokens_per_s` (needs every
// token's time; the simulation keeps gaps, not timestamps), and `request_rate` / `burstiness`
// for a trace replay (vLLM has no trace arrivals).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/run/runner.h"

namespace batchsim {

// "ttft,tpot,itl,e2el" -> names. Throws UserError naming `option` for an empty list or a name
// other than ttft, tpot, itl, e2el.
std::vector<std::string> parse_percentile_metrics(const std::string& text,
                                                  const std::string& option = "--percentile-metrics");
// "50,90,99.9" -> percentiles. Throws UserError naming `option` for an empty list or an item
// that is not a number in [0, 100].
std::vector<double> parse_metric_percentiles(const std::string& text,
                                             const std::string& option = "--metric-percentiles");

// bench.json's content for a finished run (goodput from outcome.config.goodput, metrics and
// percentiles from outcome.config.percentile_metrics / metric_percentiles).
nlohmann::ordered_json bench_json(const RunOutcome& outcome);

}  // namespace batchsim
