// batchsim — capacity planning (`batchsim plan`, issue 14): for each candidate GPU and
// tensor-parallel degree, the fewest replicas that meet every SLO replaying the workload itself.
//
// The workload is built once — a trace at its --trace-speedup with its own timestamps and
// bursts, or the synthetic arrivals of `run` — and every probe replays that very request
// sequence through N replicas behind the run's router. With the workload fixed, more replicas
// never make the SLO figures worse, so find_fewest (experiment.h) doubles N from 1 and bisects:
// about 2 log2(answer) runs per candidate. Candidates run on `jobs` threads; what is written
// does not depend on `jobs` (wall times aside).
//
// Busy windows: an SLO met over a whole replay can hide its busiest minute (a p99 over an hour
// lets the 1% of requests that arrive in one burst wait as long as they like). So the answer of
// each candidate is also replayed with the workload compressed in time to its busiest window's
// arrival rate (`window_s` by arrival): if the answer does not meet the SLO at that rate, the
// window is busier than the capacity found, and the plan says which window it is and how many
// replicas sustaining it would take.
//
// Disaggregated deployments (--disaggregated; sim/disaggregation.cpp): for each prefill GPU and
// TP and decode GPU and TP, the P:D split with the fewest GPUs (the lowest cost when priced)
// that meets the SLOs, in the same rows as the colocated answers. DistServe (Zhong et al.,
// OSDI'24, section 4) searches the same space — each phase's parallelism and replica count —
// because the phases want different resources; find_cheapest_split does it by replay, assuming
// (as find_fewest does) that more replicas in either pool never make the SLO figures worse.
//
// DistServe's figure of merit (section 2.2): per-GPU goodput, the highest request rate at which
// at least `attainment` (90%) of the requests meet both their TTFT and TPOT thresholds, divided
// by the deployment's GPUs. With goodput thresholds (--goodput ttft:MS tpot:MS), the plan finds
// it for each answer by the capacity search over the trace's speedup (find_capacity: the same
// requests and bursts, arrivals compressed by the probed factor), and the attainment itself is
// one more objective every answer must meet at the replayed rate.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/run/run_config.h"
#include "experiments/study/experiment.h"

namespace batchsim {

struct PlanSpec {
  RunConfig base;                 // model, policy, router, workload; gpu, tp and replicas per candidate
  std::vector<std::string> gpus;  // built-in GPUs or profile files
  std::vector<int> tps;           // tensor-parallel degrees
  // A mixture of experts' layouts (parallel_layout.h): every tp x dp x ep of these that the
  // model can run is a candidate (--dp, --ep); {1}, {1}: plain tensor parallelism.
  std::vector<int> dps{1}, eps{1};
  int max_replicas = 32;  // the most replicas tried per candidate
  SloBounds slo;
  std::map<std::string, double> price_per_hour;  // --price GPU=USD (per GPU and hour), over the profile's
  double window_s = 60;                          // the busy-window width
  // What the recommendation asks of a deployment (--recommend): "busiest-window" (default), the
  // SLOs over the whole workload and in its busiest window; "whole-workload", over the whole
  // workload only.
  std::string recommend = "busiest-window";
  int jobs = 1;
  // Disaggregated candidates as well (--disaggregated): every (prefill GPU, prefill TP, decode
  // GPU, decode TP); an empty GPU list pairs each of `gpus` with itself, an empty TP list is
  // `tps`. max_replicas bounds each pool.
  bool disaggregated = false;
  std::vector<std::string> prefill_gpus, decode_gpus;
  std::vector<int> prefill_tps, decode_tps;
  // With base.goodput thresholds: the fraction of requests that must be good (DistServe's SLO
  // attainment, 90% in its evaluation), at the replayed rate and for per-GPU goodput.
  double attainment = 0.9;
  // The speedups (factors on the replayed workload's rate) the per-GPU goodput search brackets.
  double goodput_speedup_low = 1.0 / 16, goodput_speedup_high = 64;
};

// Arrivals in the busiest window of `window_s` seconds (its start at an arrival).
struct BusyWindow {
  double start_s = 0, end_s = 0;  // offsets from the first arrival
  int64_t arrivals = 0;
  double rate_rps = 0;  // arrivals / window_s
};
BusyWindow busiest_window(const Workload& requests, double window_s);

struct PlanProbe {
  int replicas = 0;         // colocated: replicas; disaggregated: prefill replicas
  int decode_replicas = 0;  // disaggregated only
  bool meets = false;
  std::vector<double> values;      // the SLO figures, in PlanSpec::slo order
  double attainment = 0;           // the fraction of good requests (with goodput thresholds)
  double output_tokens_per_s = 0;  // what the deployment served (summary.json's throughput)
  double wall_s = 0;
};

// DistServe's per-GPU goodput of one deployment (OSDI'24 section 2.2).
struct PlanGoodput {
  // find_capacity's status: "ok", "above-range" (even goodput_speedup_high attains it: at
  // least that), "below-range" (not even goodput_speedup_low does: 0), "max-probes".
  std::string status;
  double speedup = 0;      // the highest factor on the replayed rate that attains it
  double rate_rps = 0;     // the mean arrival rate at that factor
  double per_gpu_rps = 0;  // rate_rps / the deployment's GPUs
  double bracket_low = 0, bracket_high = 0;
  std::vector<std::pair<double, double>> probes;  // (speedup, attainment) in probe order
};

struct PlanRow {
  bool disaggregated = false;
  std::string gpu;  // colocated: the replicas' GPU; disaggregated: the prefill pool's
  int tp = 1;
  int dp = 1, ep = 1;  // colocated: the replica's DP attention ranks and EP
  // "ok"; "none": no replica count up to max_replicas meets the SLO; "error": the candidate
  // cannot run (a model too large for the GPU at this TP, a TP its heads do not divide by).
  std::string status;
  std::string error;
  int replicas = 0;                // the fewest meeting the SLO (0 unless ok); disaggregated: P of P:D
  std::vector<double> values;      // the SLO figures at `replicas` (status none: at max_replicas)
  double attainment = 0;           // the fraction of good requests there (with goodput thresholds)
  double output_tokens_per_s = 0;  // served there
  double price_per_hour = 0;       // per GPU; 0: unknown
  std::string engine;              // the engine profile its runs use; empty: the base's (policy's)
  // Disaggregated: the decode pool (GPU, TP, price per GPU) and D of the P:D split.
  std::string decode_gpu;
  int decode_tp = 0;
  double decode_price_per_hour = 0;
  int decode_replicas = 0;
  std::vector<PlanProbe> probes;  // by replica count
  // The busy window at the answer: whether the answer meets the SLO with the whole workload at
  // its rate and, when not, the fewest replicas that do (0: none up to max_replicas).
  bool busy_window_ok = true;
  bool busy_window_checked = false;
  int busy_window_replicas = 0;
  int busy_window_decode_replicas = 0;     // disaggregated: the D of the split that sustains it
  std::vector<double> busy_window_values;  // the SLO figures of the answer at the window's rate
  std::optional<PlanGoodput> goodput;      // at the answer, with goodput thresholds
  double wall_s = 0;
  int runs = 0;

  bool meets_slo() const { return status == "ok"; }
  int replica_gpus() const { return tp * dp; }
  // The deployment's GPUs and $/hour at `p` replicas (P of a split) and `d` decode replicas.
  int gpus_at(int p, int d) const { return p * replica_gpus() + d * decode_tp; }
  double cost_at(int p, int d) const {
    return price_per_hour * p * replica_gpus() + decode_price_per_hour * d * decode_tp;
  }
  int total_gpus() const { return gpus_at(replicas, decode_replicas); }
  double cost_per_hour() const { return cost_at(replicas, decode_replicas); }
  bool priced() const { return price_per_hour > 0 && (!disaggregated || decode_price_per_hour > 0); }
  // "h100-sxm tp 1" or "h100-sxm tp 1 + a100-80gb tp 2" (prefill + decode): warnings and progress.
  std::string name() const;
  // Output tokens/s per GPU at the answer, and $ per million output tokens (0: not priced).
  double tokens_per_s_per_gpu() const { return total_gpus() > 0 ? output_tokens_per_s / total_gpus() : 0; }
  double usd_per_million_output_tokens() const {
    return priced() && output_tokens_per_s > 0 ? cost_per_hour() / (output_tokens_per_s * 3600) * 1e6 : 0;
  }
};

// How the recommended deployment's answer moves with the engine profile: the recommended
// candidate planned again on each built-in profile of the plan's engine family (the same engine
// with other fitted or cited costs: vllm, vllm-async, vllm-h100-fitted), at the recommendation's
// criterion. A planner reads the spread as the error the engine's CPU costs alone may carry.
struct EngineSensitivity {
  std::string engine;
  bool plan_engine = false;  // the engine the plan itself ran on
  std::string status;        // as PlanRow::status; "none" when no count sustains the criterion
  int replicas = 0, decode_replicas = 0, gpus = 0;
  double cost_per_hour = 0;  // 0: not priced
};

// The cheapest P:D split that meets, found by replay (find_cheapest_split).
struct SplitProbe {
  bool meets = false;
  double headroom = 0;  // how far inside its objectives a split is (larger: more room); breaks cost ties
};
struct SplitSearch {
  int prefill = 0, decode = 0;  // 0, 0: no split up to max_n in each pool meets
  int probes = 0;               // distinct splits probed
};
// The (P, D) in [1, max_n]^2 with the lowest P * prefill_cost + D * decode_cost for which
// `probe(P, D).meets`, assuming it is monotone in each (more replicas in either pool never
// hurt); among equal costs the one with the most headroom, then the fewest prefill replicas.
// First the fewest P with a full decode pool and the fewest D with a full prefill pool (lower
// bounds of any split that meets, by find_fewest), then, for each P from there, the fewest D:
// the lower bound if it meets, else by bisection up to the last P's answer (D never grows with
// P), stopping once P alone costs more than the best split found. Each split is probed once.
SplitSearch find_cheapest_split(int max_n, double prefill_cost, double decode_cost,
                                const std::function<SplitProbe(int, int)>& probe);

struct PlanResult {
  PlanSpec spec;
  std::string workload;  // what was replayed (BuiltWorkload::description)
  int64_t requests = 0;
  double mean_rate_rps = 0;
  BusyWindow busiest;  // of the workload's arrivals; unused with closed-loop clients
  // Closed-loop clients (--max-concurrency): their sends, not the arrivals, set the load, so
  // no busiest window is judged.
  bool closed_loop = false;
  std::vector<PlanRow> rows;  // sorted: meeting rows first, by total GPUs (by cost when all are priced)
  std::vector<std::string> warnings;
  // How far to trust each GPU profile the plan ran on (summary.json's `trust`, by profile name as
  // the plan was given it), in the order the plan names them: printed and written as they are.
  nlohmann::ordered_json trust = nlohmann::ordered_json::object();
  // The recommended candidate on every engine profile of the plan engine's family (empty when no
  // row is recommended).
  std::vector<EngineSensitivity> engines;
};

// The one deployment a plan recommends under spec.recommend: the cheapest (by $/hour when every
// candidate is priced, else by GPUs; ties in table order) of the rows that meet the SLOs, each
// at the replica count the criterion needs (busiest-window: the count that sustains the window,
// when the row's own does not). No row when none qualifies.
struct PlanRecommendation {
  const PlanRow* row = nullptr;
  int replicas = 0, decode_replicas = 0;  // at the criterion's count
  int gpus = 0;
  double cost_per_hour = 0;  // 0: not every candidate is priced
  std::string condition;     // what the deployment must meet, in words
  std::string criterion;     // how it was chosen, the condition included
};
PlanRecommendation recommend(const PlanResult& plan);
// The replicas (P, D) at which a row meets the recommendation's condition (busiest_window: the
// count that sustains the busiest window when its own does not); nullopt when it meets none.
std::optional<std::pair<int, int>> criterion_count(const PlanRow& row, bool busiest_window);

// Runs the plan; progress lines go to `progress`. Throws UserError for bad input.
PlanResult run_plan(const PlanSpec& spec, std::ostream& progress);

// The terminal table and the warnings.
void print_plan(std::ostream& out, const PlanResult& plan);
// DIR/plan.csv, DIR/plan.json, DIR/report.md and DIR/figures/ (SLO figures vs replicas).
void write_plan(const PlanResult& plan, const std::filesystem::path& dir, bool plots, std::ostream& progress);

// "GPU=USD" of --price.
std::pair<std::string, double> parse_price(const std::string& text);

}  // namespace batchsim
