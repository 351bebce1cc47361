// batchsim — the options of the fidelity commands: `validate`, `validate-serving` and
// `calibrate fit | transfer | engine`. Each parses its arguments (without the command's own
// words) with Boost.Program_options into its options struct and runs the command of
// experiments/fidelity/; `--help` prints the options.
#include "experiments/cli/fidelity_commands.h"

#include <ostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "experiments/cli/command_line.h"
#include "experiments/fidelity/calibrate.h"
#include "experiments/fidelity/engine_fit.h"
#include "experiments/fidelity/validate.h"
#include "experiments/fidelity/run_replay.h"
#include "experiments/fidelity/validate_serving.h"
#include "hwmodel/base/error.h"

namespace po = boost::program_options;

namespace batchsim {

namespace {

int calibrate_engine_command(const std::vector<std::string>& args, std::ostream& out) {
  EngineFitOptions o;
  po::options_description d("batchsim calibrate engine options");
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("measurements", po::value(&o.measurements), "measured serving results (aiconfigurator silicon CSV)")
      ("gpu", po::value(&o.gpu), "hardware profile to predict with (built-in name or file)")
      ("backend", po::value(&o.backend), "the rows of this backend: vllm, sglang, trtllm (required)")
      ("engine", po::value(&o.base_engine), "the engine to fit the residual of (default: the backend's: vllm, "
       "sglang or trtllm); its own residual is replaced")
      ("holdout", po::value(&o.holdout), "osl (default): fit on every other distinct output length, score "
       "on the rest | isl: the same by prompt length | none: fit on every row")
      ("name", po::value(&o.name), "name of the fitted engine (default: BASE-fitted)")
      ("system", po::value(&o.system), "rows of this system only (default h100_sxm)")
      ("policy", po::value(&o.policy), "policy or engine preset of every replayed run (default: the backend's)")
      ("models-dir", po::value(&o.models_dir), "DIR/<model_path>/config.json for models that are not built in")
      ("deployment", po::value(&o.deployment), "as for validate-serving (default by-backend)")
      ("requests-per-client", po::value(&o.requests_per_client), "requests per closed-loop client (default 20)")
      ("think-time", po::value(&o.think_time), "each replayed client's turnaround, as for validate-serving "
       "(default: none)")
      ("out", po::value(&o.out), "write the fitted engine profile (YAML)")
      ("report", po::value(&o.report), "write the fit's figures as JSON")
      ("help,h", "show this help");
  // clang-format on
  const po::variables_map vm = parse_command_line(args, d, nullptr, "calibrate engine");
  if (vm.count("help")) {
    out << "usage: batchsim calibrate engine --measurements FILE.csv --gpu PROFILE --backend B --out ENGINE.yaml "
           "[options]\n\n"
           "Fits an engine's residual time per iteration, per sequence and per extra TP worker to\n"
           "measured serving benchmarks (experiments/fidelity/engine_fit.h), and scores it on held-out rows.\n\n"
        << d << '\n';
    return 0;
  }
  return run_calibrate_engine(o, out);
}

int calibrate_fit_command(const std::vector<std::string>& args, std::ostream& out) {
  ValidateOptions o;
  std::string dir, profile_out, report_out;
  po::options_description d("batchsim calibrate fit options");
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("measurements", po::value(&dir), "measurement directory written by batchsim-calibrate, or one of its CSVs")
      ("out", po::value(&profile_out), "the hardware profile to write (YAML)")
      ("device", po::value(&o.device), "the GPU folder to read when the tree holds several "
       "(compute/<device>/..., e.g. a100)")
      ("fit-on", po::value(&o.fit_on), "model whose rows to fit on (default: the first measured)")
      ("base-gpu", po::value(&o.base_gpu), "datasheet GPU for the ceilings (default: from the device)")
      ("kernels", po::value(&o.kernels), "whose kernels the measurements timed, recorded in the fitted profile "
       "(e.g. \"sarathi-serve (Vidur's profiling, 2024)\"; default: what the layout says: kernel tables' framework and "
       "version, an LLMServingSim profile's vllm_version)")
      ("report", po::value(&report_out), "also write the full error report as JSON")
      ("framework", po::value(&o.framework), "kernel tables (aiconfigurator layout): whose kernels, vllm | "
       "sglang | trtllm (default vllm)")
      ("help,h", "show this help");
  // clang-format on
  po::positional_options_description pos;
  pos.add("measurements", 1);
  const po::variables_map vm = parse_command_line(args, d, &pos, "calibrate fit");
  if (vm.count("help")) {
    out << "usage: batchsim calibrate fit MEASUREMENTS --out PROFILE.yaml [options]\n\n" << d << '\n';
    return 0;
  }
  return run_calibrate_fit({o, dir, profile_out, report_out}, out);
}

int calibrate_transfer_command(const std::vector<std::string>& args, std::ostream& out) {
  std::string from, to, profile_out, name;
  po::options_description d("batchsim calibrate transfer options");
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("profile", po::value(&from), "the fitted profile to transfer (a built-in name or a profile file)")
      ("to", po::value(&to), "the datasheet GPU whose ceilings it moves onto (batchsim list gpus, or a file)")
      ("out", po::value(&profile_out), "the profile to write (YAML; its GEMM tables beside it)")
      ("name", po::value(&name), "the written profile's name (default: the --out file name without extension)")
      ("help,h", "show this help");
  // clang-format on
  po::positional_options_description pos;
  pos.add("profile", 1);
  const po::variables_map vm = parse_command_line(args, d, &pos, "calibrate transfer");
  if (vm.count("help")) {
    out << "usage: batchsim calibrate transfer PROFILE --to GPU --out PROFILE.yaml [--name NAME]\n\n" << d << '\n';
    return 0;
  }
  return run_calibrate_transfer({from, to, profile_out, name}, out);
}

}  // namespace

int validate_command(const std::vector<std::string>& args, std::ostream& out) {
  ValidateOptions o;
  std::string measurements, out_json, profile_out;
  po::options_description d("batchsim validate options");
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("measurements", po::value(&measurements), "measurement directory (Vidur CSV schema)")
      ("fit-on", po::value(&o.fit_on), "model whose rows the profile is fitted on, e.g. llama-2-7b")
      ("out", po::value(&out_json), "write the report as JSON here")
      ("device", po::value(&o.device), "GPU folder of a Vidur tree, e.g. a100 or a40")
      ("base-gpu", po::value(&o.base_gpu),
       "datasheet GPU for the ceilings (default: from --device)")
      ("profile-out", po::value(&profile_out), "write the fitted profile (YAML) here")
      ("fallback-gpu", po::value(&o.fallback_gpu),
       "profile whose attention parameters are used when the measurements have no attention")
      ("kernels", po::value(&o.kernels), "whose kernels the measurements timed, recorded in the fitted profile "
       "(e.g. \"sarathi-serve (Vidur's profiling, 2024)\"; default: what the layout says: kernel tables' framework and "
       "version, an LLMServingSim profile's vllm_version)")
      ("gpu", po::value(&o.gpu), "check this profile (name or file) instead of fitting one")
      ("engine", po::value(&o.engine),
       "with --gpu: score Vidur's CPU-overhead rows on this engine's CPU cost (default vllm)")
      ("framework", po::value(&o.framework), "kernel tables: whose kernels, vllm | sglang | trtllm "
       "(default vllm)")
      ("profile-name", po::value(&o.profile_name), "kernel tables: the name of the --profile-out profile")
      ("rows-out", po::value<std::string>(), "kernel tables: write every scored row (operator, shape, "
       "measured and predicted ms) as CSV")
      ("help,h", "show this help");
  // clang-format on
  const po::variables_map vm = parse_command_line(args, d, nullptr, "validate");
  if (vm.count("help")) {
    out << "usage: batchsim validate --measurements DIR --fit-on MODEL [--out FILE.json]\n" << d << '\n';
    return 0;
  }
  o.measurements_dir = measurements;
  if (vm.count("rows-out")) o.rows_out = vm["rows-out"].as<std::string>();
  o.out_json = out_json;
  o.profile_out = profile_out;
  return run_validate(o, out);
}

int validate_serving_command(const std::vector<std::string>& args, std::ostream& out) {
  ServingOptions o;
  RunReplayOptions replay;
  po::options_description d("batchsim validate-serving options");
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("measurements", po::value(&o.measurements), "measured serving results (aiconfigurator silicon CSV)")
      ("run", po::value(&replay.run_dir), "instead: one recorded run to replay request by request: a folder in "
       "LLMServingSim's bench layout (requests.jsonl, meta.json, the model's config.json beside it; "
       "experiments/fidelity/run_replay.h), a vLLM `bench serve --save-result --save-detailed` result (.json) or an "
       "aiperf profile_export.jsonl (or its artifact folder; experiments/fidelity/benchmark_readers.h)")
      ("gpu", po::value(&o.gpu), "hardware profile to predict with (built-in name or file)")
      ("model", po::value(&replay.overrides.model), "with --run: the model, where the run or benchmark file does not "
       "name it (a built-in name, a Hugging Face id or config.json), or instead of the one it names")
      ("tp", po::value(&replay.overrides.tp), "with --run: the tensor parallelism the benchmarked server ran "
       "(default: the run's, 1 for a benchmark file, which does not record it)")
      ("num-gpu-blocks", po::value(&replay.overrides.num_gpu_blocks), "with --run: the KV blocks the server sized "
       "(its log's 'GPU KV cache size' over the block size; default: the run's, else from GPU memory)")
      ("max-model-len", po::value(&replay.overrides.max_model_len), "with --run: the server's --max-model-len "
       "(default: the run's, else the model's)")
      ("policy-opt", po::value<std::vector<std::string>>()->composing(), "with --run: KEY=VALUE, an engine argument "
       "the run did not record or ran otherwise (max_num_seqs, max_num_batched_tokens, ...; repeatable)")
      ("policy", po::value(&o.policy), "policy or engine preset of every replayed run (default: the row's backend's: "
       "vllm (vllm-v1-2025 before vLLM 0.19; async_scheduling=true from 0.14), sglang or trtllm)")
      ("engine", po::value(&o.engine_args)->composing(), "engine profile of every replayed run, or "
       "BACKEND=ENGINE for one backend's rows (repeatable; default: the row's backend's: vllm (vllm-async from "
       "vLLM 0.14), sglang or trtllm)")
      ("system", po::value(&o.system), "rows of this system only (default h100_sxm)")
      ("backend", po::value(&o.backend), "rows of this backend only: vllm, sglang, trtllm (default all)")
      ("models-dir", po::value(&o.models_dir), "DIR/<model_path>/config.json for models that are not built in")
      ("deployment", po::value(&o.deployment), "aiconfigurator: the engine limits aiconfigurator's generator "
       "sets for the benchmarked deployment (token budget concurrency + isl + 1500, sequence cap concurrency, "
       "fp8 KV with fp8 weights) | defaults: the presets' own defaults | by-backend (default): the one each "
       "backend's rows show, aiconfigurator's for vLLM and TensorRT-LLM, the defaults for SGLang")
      ("requests-per-client", po::value(&o.requests_per_client), "requests per closed-loop client (default 20, as aiperf's "
       "--num-requests in aiconfigurator's benchmark script)")
      ("think-time", po::value(&o.think_time), "fixed:S | uniform:A:B | exponential:MEAN (seconds): each "
       "replayed client's wait before it sends a request, the benchmark client's turnaround, which the rows do "
       "not record (default: none)")
      ("moe-routing", po::value(&o.moe_routing), "auto | balanced | power:ALPHA: how a mixture of experts' tokens "
       "choose their experts in every replayed run, which the rows do not record (default: a run's, auto)")
      ("breakdown", po::bool_switch(&o.breakdown), "also print each backend's errors by prompt length, "
       "clients and TP (--out writes them in any case; for a mixture-of-experts or disaggregated file also each "
       "model's by prompt length, clients and layout)")
      ("out", po::value(&o.out), "write the per-row report as JSON")
      ("run-out", po::value(&replay.run_out), "with --run: also write the replay into this folder as `batchsim run "
       "--out` writes a run (summary.json, bench.json, requests.csv in the run's request order, iterations.csv with "
       "each iteration's requests) with its Perfetto trace, trace.json: why a request came out as it did")
      ("profile-out", po::value(&o.profile_out), "write the --gpu profile here with these figures as its "
       "validation.serving block (every backend replayed; the profile must carry a validation block)")
      ("help,h", "show this help");
  // clang-format on
  const po::variables_map vm = parse_command_line(args, d, nullptr, "validate-serving");
  if (vm.count("help")) {
    out << "usage: batchsim validate-serving --measurements FILE.csv --gpu PROFILE [options]\n"
           "       batchsim validate-serving --run DIR|RESULT.json|profile_export.jsonl --gpu PROFILE [--model M] "
           "[--tp N]\n"
           "                                 [--policy-opt K=V ...] [--engine E] [--policy P] [--out FILE.json]\n\n"
           "Replays every row of a measured serving benchmark with closed-loop clients and compares\n"
           "the predicted mean TTFT and TPOT with the measured ones.\n\n"
        << d << '\n';
    return 0;
  }
  const bool run_only = vm.count("model") || vm.count("tp") || vm.count("policy-opt") || vm.count("num-gpu-blocks") ||
                        vm.count("max-model-len") || vm.count("run-out");
  if (run_only && !vm.count("run")) {
    throw UserError("--model, --tp, --num-gpu-blocks, --max-model-len, --policy-opt, --run-out: apply to --run only");
  }
  if (vm.count("run")) {
    if (vm.count("measurements")) throw UserError("--run, --measurements: give one or the other");
    if (vm.count("tp") && (replay.overrides.tp < 1 || replay.overrides.tp > 1024)) {
      throw UserError(fmt::format("--tp {}: must be from 1 to 1024", replay.overrides.tp));
    }
    for (const auto& [name, value] : {std::pair{"num-gpu-blocks", replay.overrides.num_gpu_blocks},
                                      {"max-model-len", replay.overrides.max_model_len}}) {
      if (vm.count(name) && (value < 1 || value > (int64_t{1} << 30))) {
        throw UserError(fmt::format("--{} {}: must be from 1 to 2^30", name, value));
      }
    }
    if (vm.count("policy-opt")) {
      for (const std::string& text : vm["policy-opt"].as<std::vector<std::string>>()) {
        replay.overrides.policy_opts.insert(parse_policy_opt(text));
      }
    }
    replay.gpu = o.gpu;
    replay.policy = o.policy;
    replay.out = o.out;
    if (o.engine_args.size() > 1) throw UserError("--engine: give one engine with --run");
    if (!o.engine_args.empty()) replay.engine = o.engine_args.front();
    return run_replay_command(replay, out);
  }
  return run_validate_serving(o, out);
}

int calibrate_command(const std::vector<std::string>& args, std::ostream& out) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    out << "usage: batchsim calibrate fit MEASUREMENTS --out PROFILE.yaml [options]\n"
           "  Fits a hardware profile on the measurements `batchsim-calibrate measure` wrote\n"
           "  on a GPU (see calibration/README.md), and records the fit error per operator.\n"
           "  MEASUREMENTS is the measurement directory, or one CSV of it (e.g. its mlp.csv:\n"
           "  operators without rows then keep the base GPU's datasheet values).\n"
           "usage: batchsim calibrate transfer PROFILE --to GPU --out PROFILE.yaml [--name NAME]\n"
           "  Moves a fitted profile's efficiencies onto another datasheet GPU's ceilings,\n"
           "  rescaling what is absolute (e.g. an H200 from the H100 tables: \n"
           "  batchsim calibrate transfer h100-sxm-fitted --to h200 --out h200.yaml); the\n"
           "  profile's provenance lists each rescaling (hwmodel/README.md).\n"
           "usage: batchsim calibrate engine --measurements FILE.csv --gpu PROFILE --backend B --out ENGINE.yaml\n"
           "  Fits an engine's residual time per iteration, per sequence and per extra TP worker\n"
           "  to measured closed-loop serving benchmarks, scored on held-out rows.\n"
           "usage: batchsim calibrate shapes --model M [--tp N] [--dp N] [--ep N] [--moe-tp N] --out SHAPES.csv\n"
           "  Writes a model's per-GPU GEMMs (attention, experts, MLA) for `batchsim-calibrate measure\n"
           "  --shapes` (calibration/README.md).\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "fit") return calibrate_fit_command({args.begin() + 1, args.end()}, out);
  if (args[0] == "transfer") return calibrate_transfer_command({args.begin() + 1, args.end()}, out);
  if (args[0] == "engine") return calibrate_engine_command({args.begin() + 1, args.end()}, out);
  throw UserError(fmt::format("calibrate: unknown subcommand '{}' (expected: fit, transfer, engine, shapes)", args[0]));
}

}  // namespace batchsim
