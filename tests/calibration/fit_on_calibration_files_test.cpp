// End to end on the CPU: synthetic timings written by calibration's writers, read by hwmodel's
// reader and fitted by hwmodel's fit, must give back the efficiencies they were made with.
// This is the path a real `measure` output takes (run-on-gpu.sh), minus the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "calibration/device_info.h"
#include "calibration/measurement_csv.h"
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/hardware_profile.h"
#include "test_support.h"

namespace batchsim::calibration {
namespace {

constexpr double kPeakFlops = 989e12, kHbmBytesPerS = 4.8e12;  // H200 datasheet
constexpr double kGemmEta = 0.8, kMemEta = 0.9, kLaunchS = 4e-6;

SampleSummary exactly(double seconds) { return summarize(std::vector<double>(5, seconds)); }

// A plain roofline: launch + max(compute, memory) with BF16 operands.
double synthetic_gemm_s(int64_t m, int64_t k, int64_t n) {
  const double flops = 2.0 * m * k * n;
  const double bytes = 2.0 * (m * k + k * n + m * n);
  return kLaunchS + std::max(flops / (kPeakFlops * kGemmEta), bytes / (kHbmBytesPerS * kMemEta));
}

TEST(FitOnCalibrationFiles, RecoversTheGemmEfficiencyOfSyntheticMeasurements) {
  const std::filesystem::path dir = testing::scratch_dir("calibration_fit");
  const CalibrationModel& model = find_calibration_model("llama-2-7b");
  {
    MlpCsvWriter mlp(model_measurement_dir(dir, device_slug("NVIDIA H200"), model) / "mlp.csv");
    for (int tp : {1, 2, 4, 8}) {
      for (int m : quick_token_count_grid(16384)) {
        MlpRow row{&model, m, tp, "bf16", TimerKind::kCupti, {}};
        for (const GemmShape& g : layer_gemm_shapes(model, tp)) {
          row.ops[static_cast<size_t>(g.op)] = exactly(synthetic_gemm_s(m, g.k, g.n));
        }
        mlp.write(row);
      }
    }
  }
  const Measurements measurements = read_measurements(dir);
  ASSERT_EQ(measurements.token_ops.size(), 4 * quick_token_count_grid(16384).size());
  // The GPU folder our writers name must lead the fit to the right datasheet ceilings.
  ASSERT_EQ(datasheet_gpu_for_device(measurements.device), "h200");
  const FitResult fit =
      fit_profile(measurements, "llama-2-7b", resolve_gpu(datasheet_gpu_for_device(measurements.device)));
  const HardwareProfile& p = fit.profile;
  // Large-M GEMMs are compute-bound at 80 % of peak, small-M ones read weights at 90 % of
  // HBM: whatever curve the fit uses, its asymptotes must land near those.
  EXPECT_NEAR(p.gemm_eta_max, kGemmEta, 0.1 * kGemmEta);
  EXPECT_NEAR(p.hbm_efficiency, kMemEta, 0.1 * kMemEta);
  EXPECT_GE(p.kernel_launch_s, 0.0);
  EXPECT_LT(p.kernel_launch_s, 20e-6);
}

}  // namespace
}  // namespace batchsim::calibration
