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

#include "calibration/measure_options.h"

namespace batchsim::calibration {

// Returns the number of failed checks (0 = all outputs match within tolerance); one line per
// check goes to `log`.
int run_kernel_checks(std::ostream& log, uint64_t seed);

// What a measurement run could not do for lack of device memory: the points left out (a GEMM's
// larger token counts, attention batches whose K/V caches do not fit) and one line per group of
// them. The rows that fit are written either way.
struct MeasureReport {
  int points_not_fitting_memory = 0;
  std::vector<std::string> not_fitting_memory;
};

// Throws std::invalid_argument for an unreadable shape file (before touching the GPU).
MeasureReport run_measurements(const MeasureOptions& options, std::ostream& log);

}  // namespace batchsim::calibration
