// batchsim — `batchsim validate-serving`: end-to-end predictions against measured serving
// benchmarks.
//
//   batchsim validate-serving --measurements FILE.csv[.gz] --gpu PROFILE [--policy P]
//       [--system h100_sxm] [--backend vllm] [--models-dir DIR] [--requests-per-client N]
//       [--deployment aiconfigurator|defaults] [--think-time SPEC] [--moe-routing SPEC] --out FILE.json
//
// The measurements are aiconfigurator's "silicon" format (hwmodel/measured/README.md): one row
// per benchmark run of a model on a serving engine, every request `isl` prompt tokens and `osl`
// output tokens, closed-loop clients (vllm bench serve --max-concurrency), with the mean TTFT and
// TPOT it measured. Each row is replayed as such a run: --max-concurrency the row's concurrency,
// every request at t = 0 (a pure closed loop), fixed lengths, N = requests-per-client x
// concurrency requests (default 20 per client, as aiperf runs them in aiconfigurator's benchmark
// script), the engine limits aiconfigurator's generator sets for the deployment it benchmarks
// (--deployment aiconfigurator, the default: validate_serving.cpp deployment_limits; `defaults`
// keeps the presets' own), the policy (--policy, default each backend's preset), and the model
// named by `model_path` (a built-in by its Hugging Face id, or DIR/<model_path>/config.json with
// --models-dir).
//
// A row's layout is read in aiconfigurator's columns, per worker (read_serving_rows): tp_size
// the attention TP inside one attention-DP rank, attention_dp_size the ranks (blank: 1),
// moe_tp_size x moe_ep_size the experts' layout over the same tp x attention_dp GPUs (0 or blank:
// not recorded, inferred from the other), and for disaggregated rows the same columns per pool
// (prefill_*, decode_*) with each pool's worker count. They map to RunConfig's tp, dp, ep and
// moe_tp one for one (hwmodel/parallel_layout.h has the same convention); the concurrency is
// silicon_concurrency from silicon_data_source where given, else batch_size x attention_dp_size
// (batch_size is per attention-DP rank) or, disaggregated, decode_batch_size x decode workers.
// Where a row's columns contradict what ran, a documented rule (kNormalisations in
// validate_serving.cpp) rewrites it, and the report counts the rows each rule changed. Rows that
// cannot be replayed are counted with the reason (another system, pipeline parallelism, a
// layout the simulator does not express, a disaggregated row without worker counts, an unknown
// model).
//
// The report gives per row the predicted and measured mean TTFT and TPOT, and their MAPE in
// percent (`ttft.mape`, `tpot.mape`), over all rows and per backend, each backend with the median
// of predicted / measured (the error's sign) and the same figures by prompt length, clients and
// TP (`by_isl`, `by_concurrency`, `by_tp`; in the terminal with --breakdown). For a file of
// mixture-of-experts or disaggregated serving it adds (a dense aggregated file's report keeps
// its form): the figures per model, backend and mode over distinct measurements (a row that
// repeats an earlier row's TTFT and TPOT exactly is counted once) with their groups by prompt
// length, clients and layout, the rows simulated out of those read, the rows each rule changed,
// and the repeated rows.
//
// The reading and the replay of rows are shared with `batchsim calibrate engine`
// (experiments/fidelity/engine_fit.h), which fits an engine's residual per-iteration time to such rows.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "experiments/run/run_config.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/parallel_layout.h"

namespace batchsim {

// One pool of a disaggregated row: its workers, each `layout` (RunConfig's convention), and the
// deployment's max_batch_size per attention rank (0: not recorded).
struct ServingPool {
  int workers = 0;
  ParallelLayout layout;
  int64_t batch = 0;
};

// One measured benchmark run of a silicon file, as it is replayed (after the rules of
// read_serving_rows).
struct ServingRow {
  std::string id, backend, version, model_path, precision;
  std::string mode = "agg";  // agg | disagg
  std::string model;         // model_path resolved: a built-in name or a config.json
  int64_t isl = 0, osl = 0, concurrency = 0;
  // The benchmark client's connection pool (RunConfig::client_connections), 0: none recorded.
  int64_t client_connections = 0;
  // Aggregated: the replica's layout (RunConfig tp, dp, ep, moe_tp). Disaggregated: the prefill
  // pool's, which is also `prefill.layout`.
  int tp = 1, dp = 1, ep = 1, moe_tp = 0;
  ParallelLayout layout() const { return ParallelLayout{tp, dp, ep, moe_tp}; }
  ServingPool prefill, decode;  // disaggregated rows only
  // --weight-dtype of the replay: "auto" (the checkpoint's own formats) or a format name.
  std::string weight_dtype = "auto";
  // The rules that rewrote the row's columns (kNormalisations' names), in the order applied.
  std::vector<std::string> normalisations;
  // The id of the first earlier row of the file with exactly this TTFT and TPOT (empty: none).
  std::string repeats;
  double ttft_ms = 0, tpot_ms = 0;  // measured means
};

// How rows are chosen and replayed (the options of validate-serving).
struct ServingReplayOptions {
  std::string gpu, system = "h100_sxm", backend, models_dir;
  std::string policy;  // empty: each row's backend's preset
  // Engine profile per backend (aiconfigurator's backend names); the key "" applies to every
  // backend without its own entry. A backend in neither: its own engine (vllm, sglang, trtllm).
  std::map<std::string, std::string> engines;
  std::string deployment = "by-backend";
  // aiperf's protocol in aiconfigurator's benchmark script
  // (src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2):
  // --num-requests concurrency x 20 after --warmup-request-count concurrency x 2. The warmup
  // phase ends before the measured one starts (aiperf timing/credit_issuing_strategy.py waits
  // for each phase to complete), leaving an idle engine whose prefix cache holds only random
  // prompts, so it is not replayed.
  int64_t requests_per_client = 20;
  // Each replayed client's wait before it sends a request (--think-time of `batchsim run`): the
  // benchmark client's turnaround, which the rows do not record. Empty: none.
  std::string think_time;
  // How a mixture of experts' tokens choose their experts (--moe-routing of `batchsim run`:
  // balanced | power:ALPHA), which the rows do not record. Empty: the run's default, balanced.
  std::string moe_routing;
};

// Throws UserError naming the option when --requests-per-client, --deployment, --think-time or
// --moe-routing is out of range or malformed.
void check_replay_options(const ServingReplayOptions& o);

struct ServingRows {
  std::vector<ServingRow> rows;
  std::map<std::string, int64_t> skipped;  // rows left out, by reason
  // Replayed rows each rule of kNormalisations changed, by its name.
  std::map<std::string, int64_t> normalised;
  // Rows of the selected system and backend that repeat an earlier row's TTFT and TPOT.
  int64_t repeated = 0;
  // Whether any selected row is a mixture of experts or disaggregated: the report then adds its
  // per-model figures, the rules and the repeats (run_validate_serving).
  bool moe_or_disaggregated = false;
};

// A rule that rewrites a row's columns where they contradict what ran: its name (the report's
// key) and what it does and why, as the report prints it.
struct ServingNormalisation {
  const char* name;
  const char* rule;
};
// Every rule read_serving_rows applies, in the order it applies them.
const std::vector<ServingNormalisation>& serving_normalisations();

// The rows of `measurements` that `o` selects and batchsim can replay. Throws UserError for a
// malformed file (naming it and the line) or when no row is left.
ServingRows read_serving_rows(const std::string& measurements, const ServingReplayOptions& o);

struct ServingPrediction {
  double ttft_ms = 0, tpot_ms = 0;  // predicted means
  int64_t rejected = 0;
  // Sequences an iteration carried on average: output tokens over iterations (every iteration
  // after a request's prefill gives it one token).
  double sequences_per_iteration = 0;
  // The engine that ran (the override's name when one was given) and the deployment's limits.
  std::string engine, deployment;
  // The run that replayed the row (its policy, options and KV dtype among its keys): `batchsim
  // run --config` of it (config_to_json) reruns it, for its requests, iterations or trace.
  RunConfig config;
};

// Replays one row as a closed-loop run. `engine`, when given, replaces the engine `o` names.
ServingPrediction replay_serving_row(const ServingRow& r, const ServingReplayOptions& o,
                                     const EngineProfile* engine = nullptr);

// Mean absolute percentage error, |predicted / measured - 1| x 100.
struct Mape {
  double sum = 0;
  int64_t count = 0;
  void add(double predicted, double measured);
  double value() const { return count > 0 ? sum / static_cast<double>(count) : 0; }
};

// `batchsim validate-serving`: what its options say.
struct ServingOptions : ServingReplayOptions {
  std::string measurements, out, profile_out;
  std::vector<std::string> engine_args;  // --engine as given: ENGINE or BACKEND=ENGINE
  bool breakdown = false;                // --breakdown: the groups' errors in the terminal too
};
// Replays the selected rows, prints each backend's errors, and writes --out and --profile-out.
int run_validate_serving(const ServingOptions& options, std::ostream& out);

}  // namespace batchsim
