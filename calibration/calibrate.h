// batchsim calibration — the two jobs of batchsim-calibrate on a GPU.
//
// run_kernel_checks: our CUDA kernels (and the cuBLASLt GEMM layout) against the CPU
// reference on random inputs. run_measurements: the timing sweep that writes a measurement
// directory (layout in measurement_csv.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace batchsim::calibration {

// Returns the number of failed checks (0 = all outputs match within tolerance); one line per
// check goes to `log`.
int run_kernel_checks(std::ostream& log, uint64_t seed);

struct MeasureOptions {
  std::filesystem::path out_dir;
  std::vector<std::string> models;  // names in calibration_models(); empty = defaults
  std::vector<int> tensor_parallel_degrees;  // empty = defaults (skipping ones that don't divide)
  bool quick = false;
  bool fp16 = true;          // also measure FP16 GEMMs (mlp_fp16.csv)
  bool allow_cupti = true;   // false: CUDA-event timer
  double time_budget_s = 0;  // 0 = none; when spent, remaining points are skipped (rows so far kept)
  uint64_t seed = 1;
};

// Defaults: quick = llama-2-7b at TP 1, 2, 4, 8 (GEMMs) and TP 1 (attention), BF16 only;
// full = every built-in model, both dtypes.
MeasureOptions resolve_defaults(MeasureOptions options);
void run_measurements(const MeasureOptions& options, std::ostream& log);

}  // namespace batchsim::calibration
