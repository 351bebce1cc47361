// batchsim — service-level objectives and goodput, judged on a run's results. The one place
// every command that judges a run calls: `batchsim run` and `compare` (summary.json's `slo` and
// `goodput`, the report's SLO column), the capacity search (experiment.h, CapacitySpec::slo),
// bench.json's `request_goodput` (bench_result.h) and the capacity planner.
//
// Two kinds of objective, as serving benchmarks state them:
// - **SLO bounds** (`--slo ttft_p99_s=2,tbt_p99_s=0.1`, an experiment's `slo:` block, or a
//   capacity search's `capacity.slo`): upper bounds on run-level figures of summary.json, named
//   by their dotted path (`latency.ttft_s.p99`) or by the short form METRIC_STAT_s / _ms
//   (`ttft_p99_s` = `latency.ttft_s.p99`; `ttft_p99_ms=200` the same bound in milliseconds).
//   The run meets them when every figure is at or below its bound — the capacity metric of
//   Sarathi-Serve and DistServe.
// - **Goodput thresholds** (`--goodput ttft:MS tpot:MS e2el:MS`, vLLM's `vllm bench serve
//   --goodput`, after DistServe): per request. A request is good when it completed and every
//   given threshold holds (`value <= threshold`, as calculate_metrics in vLLM's
//   vllm/benchmarks/serve.py, local-inference-lab/vllm @28be48f); its TPOT is
//   (e2e - TTFT) / (output - 1), taken as 0 for a one-token output as vLLM does for goodput.
//   Goodput is good requests per second of the run's duration (vLLM's `request_goodput`), and
//   the fraction of all requests that were good.
//
// Rejected requests (never served: longer than the context, or than the whole KV cache) have
// no latency, so no percentile over the served requests sees them; a purchase signed on such a
// figure would buy a deployment that cannot serve the workload. So here a rejected request is
// never good, and any rejection is an SLO violation of its own (`requests.rejected` > 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/metrics.h"

namespace batchsim {

// (summary.json dotted path, upper bound), in the order given. CapacitySpec::slo is one.
using SloBounds = std::vector<std::pair<std::string, double>>;

// vLLM's goodput thresholds in milliseconds; unset ones are not checked.
struct GoodputSpec {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// The summary.json path an SLO key names, and the factor that turns its bound into that
// figure's unit (1, or 1e-3 for a `_ms` short key); nullopt when the key names no numeric
// figure of summary.json.
struct SloKey {
  std::string path;
  double bound_scale = 1;
};
std::optional<SloKey> resolve_slo_key(const std::string& key);
// What resolve_slo_key accepts, for error messages.
extern const char* const kSloKeyHelp;

// "ttft_p99_s=2,latency.tbt_s.p99=0.1" -> bounds. Throws UserError naming `option` for an
// empty list, a missing '=', an unknown key, a bound that is not a number >= 0, or a key
// given twice.
SloBounds parse_slo(const std::string& text, const std::string& option = "--slo");
// One bound (an experiment's `slo:` mapping, read key by key): the resolved path and the
// bound in its unit. Throws UserError naming `option` as parse_slo does.
std::pair<std::string, double> slo_bound(const std::string& key, double bound, const std::string& option);

// "ttft:2000" "tpot:100" (vLLM's KEY:VALUE pairs, milliseconds; a token may also hold several
// pairs separated by commas or spaces). Throws UserError naming `option` for a malformed pair,
// a key other than ttft, tpot, e2el, a value that is not a number >= 0, or a key given twice.
GoodputSpec parse_goodput(const std::vector<std::string>& pairs, const std::string& option = "--goodput");
// One threshold (a YAML mapping's entry): the same checks.
void set_goodput_threshold(GoodputSpec& spec, const std::string& key, double ms, const std::string& option);

struct SloViolation {
  std::string metric;  // summary.json path, or "requests.rejected"
  double bound = 0;
  double value = 0;
};
struct SloVerdict {
  bool met = true;
  std::vector<SloViolation> violations;  // in the order of the bounds; rejections last
  int64_t left_out = 0;                  // rejected beyond the model's context: not counted
};
// Judges `summary` (summary.json as summary_to_json writes it) against `bounds`: the one
// definition that `run --slo`, `plan` and compare's capacity searches share. A bound holds when
// the figure is at or under it. A rejected request is a violation ("requests.rejected"): the
// deployment did not serve it (its KV cache, its token budget), and another might. Left out:
// requests beyond the model's context (`requests.beyond_context`), which no deployment of the
// model serves, so that counting them would fail every deployment; the searches and the run warn
// of them instead. A path the summary lacks throws std::out_of_range (bounds are checked when
// they are parsed).
SloVerdict evaluate_slo(const nlohmann::ordered_json& summary, const SloBounds& bounds);

// Whether a completed request meets every threshold of `spec` (false for one not completed).
bool is_good_request(const RequestRecord& r, const GoodputSpec& spec);

struct Goodput {
  int64_t good_requests = 0;
  int64_t total_requests = 0;  // every request of the run, rejected ones included
  double requests_per_s = 0;   // good requests / duration_s (vLLM's request_goodput)
  double fraction = 0;         // good / total

  // Counts one settled request (a streaming run counts them as they settle).
  void add(const RequestRecord& r, const GoodputSpec& spec);
  // The rates over the run's `duration_s`, once every request is counted.
  void finish(double duration_s);
};
// Over `result.requests`; `duration_s` is the run's duration (summary makespan_s, which is
// bench.json's `duration`).
Goodput compute_goodput(const SimulationResult& result, const GoodputSpec& spec, double duration_s);

// summary.json's blocks: slo {met, violations: [{metric, bound, value}], bounds: {path: bound}}
// and goodput {requests_per_s, fraction, good_requests, total_requests, thresholds_ms}.
nlohmann::ordered_json slo_json(const SloVerdict& verdict, const SloBounds& bounds);
nlohmann::ordered_json goodput_json(const Goodput& goodput, const GoodputSpec& spec);
// {path: bound, ...}: the bounds as slo_json and experiment.json's capacity.slo write them.
nlohmann::ordered_json slo_bounds_json(const SloBounds& bounds);

// One terminal line each: "slo: met (latency.ttft_s.p99 <= 2)" or "slo: NOT MET: ...";
// "goodput: 3.21 req/s, 87.0% of 1000 requests good (ttft <= 2000 ms, tpot <= 100 ms)".
// Made from the JSON blocks, so the terminal and the report say the same.
std::string slo_line(const nlohmann::ordered_json& slo);
std::string goodput_line(const nlohmann::ordered_json& goodput);

// Text helpers of these options (and bench_result.h's): the whole of `text` as a finite number,
// or nullopt; `text` split at any of `separators`, items trimmed of blanks, empty ones dropped.
std::optional<double> parse_finite(const std::string& text);
std::vector<std::string> split_items(const std::string& text, const char* separators);

}  // namespace batchsim
