// batchsim — `batchsim validate-serving`: end-to-end predictions against measured serving
// benchmarks.
//
//   batchsim validate-serving --measurements FILE.csv[.gz] --gpu PROFILE [--policy P]
//       [--system h100_sxm] [--backend vllm] [--models-dir DIR] [--requests-per-client N]
//       [--deployment aiconfigurator|defaults] [--think-time SPEC] --out FILE.json
//
// The measurements are aiconfigurator's "silicon" format (hwmodel/measured/README.md): one row
// per benchmark run of a model on a serving engine, every request `isl` prompt tokens and `osl`
// output tokens, `batch_size` closed-loop clients (vllm bench serve --max-concurrency), TP
// `tp_size`, with the mean TTFT and TPOT it measured. Each row is replayed as such a run:
// --max-concurrency batch_size, every request at t = 0 (a pure closed loop), fixed lengths,
// N = requests-per-client x batch_size requests (default 20 per client, as aiperf runs them in
// aiconfigurator's benchmark script), the engine limits aiconfigurator's generator sets for the
// deployment it benchmarks (--deployment aiconfigurator, the default: validate_serving.cpp
// deployment_limits; `defaults` keeps the presets' own), the policy (--policy, default the `vllm` preset for every backend until the
// engine presets of SGLang and TensorRT-LLM exist), and the model named by `model_path` (a built-in by its
// Hugging Face id, or DIR/<model_path>/config.json with --models-dir). The report gives per row
// the predicted and measured mean TTFT and TPOT, and their MAPE in percent (`ttft.mape`,
// `tpot.mape`), over all rows and per backend, each backend with the median of predicted /
// measured (the error's sign) and the same figures by prompt length, clients and TP (`by_isl`,
// `by_concurrency`, `by_tp`; in the terminal with --breakdown); rows that cannot be replayed are
// counted with the reason (another system, pipeline parallelism, disaggregated serving, an
// unknown model).
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

namespace batchsim {

// One measured benchmark run of a silicon file.
struct ServingRow {
  std::string backend, version, model_path, precision;
  std::string model;  // model_path resolved: a built-in name or a config.json
  int64_t isl = 0, osl = 0, concurrency = 0;
  int tp = 1;
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
};

// Throws UserError naming the option when --requests-per-client, --deployment or --think-time is
// out of range or malformed.
void check_replay_options(const ServingReplayOptions& o);

struct ServingRows {
  std::vector<ServingRow> rows;
  std::map<std::string, int64_t> skipped;  // rows left out, by reason
};

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
