// batchsim calibration — what `batchsim-calibrate measure` measures, and its defaults.
// Host-only, so the defaults are unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace batchsim::calibration {

struct MeasureOptions {
  std::filesystem::path out_dir;
  std::vector<std::string> models;  // names in calibration_models(); empty = defaults
  // A shape file (shape_file.h): any model's GEMMs, as `batchsim calibrate shapes` writes them.
  std::filesystem::path shapes_file;
  std::vector<int> tensor_parallel_degrees;  // empty = defaults (skipping ones that don't divide)
  bool quick = false;
  bool fp16 = true;          // also measure FP16 GEMMs (mlp_fp16.csv)
  bool allow_cupti = true;   // false: CUDA-event timer
  double time_budget_s = 0;  // 0 = none; when spent, remaining points are skipped (rows so far kept)
  uint64_t seed = 1;
};

// Defaults: quick = llama-2-7b at TP 1, 2, 4, 8 (GEMMs) and TP 1 (attention), BF16 only;
// full = every built-in model, both dtypes. With a shape file no model is added by default:
// its GEMMs (and bandwidth) are measured, plus the models named.
// Throws std::invalid_argument for a model name that is not built in; the message says how to
// measure any other model (a shape file).
MeasureOptions resolve_defaults(MeasureOptions options);

}  // namespace batchsim::calibration
