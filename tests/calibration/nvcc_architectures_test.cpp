// batchsim-calibrate's CUDA sources compile with nvcc for every architecture the calibration
// supports (sm_80, 89, 90, 100), and the binary builds with nvcc alone as a GPU run builds it
// (tests/calibration/nvcc_architectures.sh). Skipped, with the reason, where there is no nvcc.
#include <gtest/gtest.h>

#include <iostream>

#include "run_command.h"
#include "test_support.h"

namespace batchsim::calibration {
namespace {

TEST(CudaArchitectures, SourcesCompileForSm80To100AndTheNvccOnlyBuildLinks) {
  const std::filesystem::path script =
      ::batchsim::testing::source_dir() / "tests" / "calibration" / "nvcc_architectures.sh";
  const std::filesystem::path cache = std::filesystem::path(BATCHSIM_BINARY_DIR) / "calibration-nvcc-check";
  const shell::CommandResult r =
      shell::run_command("bash " + shell::quoted(script) + " " + shell::quoted(::batchsim::testing::source_dir()) +
                         " " + shell::quoted(::batchsim::testing::scratch_dir("nvcc")) + " " + shell::quoted(cache));
  if (r.exit_code == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::cout << r.output;
}

}  // namespace
}  // namespace batchsim::calibration
