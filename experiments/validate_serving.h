// batchsim — `batchsim validate-serving`: end-to-end predictions against measured serving
// benchmarks.
//
//   batchsim validate-serving --measurements FILE.csv[.gz] --gpu PROFILE [--policy P]
//       [--system h100_sxm] [--backend vllm] [--models-dir DIR] [--requests-per-client N]
//       [--deployment aiconfigurator|defaults] --out FILE.json
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
// `tpot.mape`), over all rows and per backend; rows that cannot be replayed are counted with the
// reason (another system, pipeline parallelism, disaggregated serving, an unknown model).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace batchsim {

int validate_serving_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace batchsim
