// `batchsim calibrate fit` on real measurements (the published Vidur A100 profile of
// Llama-2-7B, in the schema batchsim-calibrate writes): a usable profile that records its fit
// error per operator, and clear errors for bad input.
#include "experiments/calibrate.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "hwmodel/error.h"
#include "hwmodel/hardware_profile.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string user_error_of_calibrate(const std::vector<std::string>& args) {
  std::ostringstream out;
  return testing::user_error_of([&] { calibrate_command(args, out); });
}

TEST(CalibrateFit, WritesAProfileThatRecordsItsErrors) {
  const auto dir = testing::scratch_dir("calibrate-fit");
  const auto meas = testing::measured_dir() / "vidur/compute/a100/meta-llama/Llama-2-7b-hf";
  std::ostringstream out;
  ASSERT_EQ(calibrate_command({"fit", meas.string(), "--base-gpu", "a100-80gb", "--out",
                               (dir / "p.yaml").string(), "--report", (dir / "r.json").string()},
                              out),
            0);
  const HardwareProfile p = load_hardware_profile(dir / "p.yaml");
  EXPECT_GT(p.gemm_eta_max, 0.0);
  EXPECT_LE(p.gemm_eta_max, 1.0);
  EXPECT_DOUBLE_EQ(p.peak_flops, resolve_gpu("a100-80gb").peak_flops);

  std::ifstream in(dir / "r.json");
  const auto report = nlohmann::json::parse(in);
  // The fit reproduces the rows it was fitted on: whole iterations within 10%.
  EXPECT_LT(report["iteration_fitted"]["mape"].get<double>(), 10.0);
  // Only Llama-2-7B was measured, so the profile's figures are over the rows it was fitted on,
  // and it says so; each is the report's, to 0.1%.
  const ProfileValidation& v = p.validation;
  EXPECT_FALSE(v.held_out);
  EXPECT_THAT(v.scored_on, HasSubstr("rows it was fitted on"));
  EXPECT_THAT(v.measured_on, HasSubstr("Llama-2-7b-hf"));
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.operators.front().op, "iteration");
  EXPECT_NEAR(v.operators.front().mape_percent, report["iteration_fitted"]["mape"].get<double>(), 0.05);
  std::vector<std::string> names;
  for (const OperatorError& e : v.operators) {
    names.push_back(e.op);
    if (e.op == "iteration") continue;
    const auto& fitted = report["operators_fitted"][e.op];
    EXPECT_EQ(e.count, fitted["count"].get<int64_t>()) << e.op;
    EXPECT_NEAR(e.mape_percent, fitted["mape"].get<double>(), 0.05) << e.op;
    EXPECT_NEAR(e.p90_percent, fitted["p90"].get<double>(), 0.05) << e.op;
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"mlp_up_proj", "attn_decode"}));
}

// `batchsim calibrate fit meas/compute/<gpu>/.../mlp.csv`: one CSV fits the GEMM curve; the GPU
// comes from the tree folder in its path (no --base-gpu), and operators without rows in it keep
// the datasheet's values.
TEST(CalibrateFit, FitsOneCsvAndTakesTheGpuFromItsPath) {
  const auto dir = testing::scratch_dir("calibrate-fit-csv");
  const auto csv = testing::data_file(testing::measured_dir(),
                                     "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv");
  std::ostringstream out;
  ASSERT_EQ(calibrate_command({"fit", csv.string(), "--out", (dir / "p.yaml").string()}, out), 0);
  const HardwareProfile p = load_hardware_profile(dir / "p.yaml");
  const HardwareProfile datasheet = resolve_gpu("a100-80gb");
  EXPECT_DOUBLE_EQ(p.peak_flops, datasheet.peak_flops);
  EXPECT_NE(p.gemm_eta_max, datasheet.gemm_eta_max);  // fitted on the file's GEMM rows
  EXPECT_THAT(p.provenance, HasSubstr("mlp.csv"));
  std::vector<std::string> scored;
  for (const OperatorError& e : p.validation.operators) scored.push_back(e.op);
  EXPECT_THAT(scored, ::testing::Contains("mlp_up_proj"));
  EXPECT_THAT(scored, Not(::testing::Contains("attn_decode")));  // no attention rows in the file

  // A CSV that is not a measurement file is named.
  const auto bogus = testing::write_text_file(dir, "notes.csv", "a,b\n1,2\n");
  try {
    calibrate_command({"fit", bogus.string(), "--out", (dir / "q.yaml").string()}, out);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_THAT(e.what(), HasSubstr("notes.csv: not a measurement CSV"));
  }
}

// A tree of several GPUs needs --device, as the error says, and calibrate fit accepts it.
TEST(CalibrateFit, ATreeOfSeveralGpusTakesTheDeviceItsErrorNames) {
  const auto dir = testing::scratch_dir("calibrate-fit-device");
  const auto tree = testing::measured_dir() / "vidur";
  std::ostringstream out;
  try {
    calibrate_command({"fit", tree.string(), "--out", (dir / "p.yaml").string()}, out);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("several GPUs (a100, a40)"), HasSubstr("--device")));
  }
  ASSERT_EQ(calibrate_command({"fit", tree.string(), "--device", "a40", "--fit-on", "llama-2-7b",
                               "--out", (dir / "p.yaml").string()},
                              out),
            0);
  const HardwareProfile p = load_hardware_profile(dir / "p.yaml");
  EXPECT_DOUBLE_EQ(p.peak_flops, resolve_gpu("a40").peak_flops);
}

// NVIDIA's kernel tables of a GPU (aiconfigurator layout) fit a profile with its GEMM tables
// beside it, and the profile records its held-out errors.
TEST(CalibrateFit, FitsAProfileOnKernelTables) {
  const auto dir = testing::scratch_dir("calibrate-fit-kernel-tables");
  std::ostringstream out;
  ASSERT_EQ(calibrate_command({"fit", (testing::measured_dir() / "aiconfigurator" / "h100_sxm").string(), "--out",
                               (dir / "my-h100.yaml").string(), "--report", (dir / "r.json").string()},
                              out),
            0);
  EXPECT_THAT(out.str(), HasSubstr("held-out half"));
  const HardwareProfile p = load_hardware_profile(dir / "my-h100.yaml");
  EXPECT_EQ(p.name, "my-h100");
  EXPECT_NE(p.gemm_table(2), nullptr);
  EXPECT_NE(p.gemm_table(1), nullptr);
  EXPECT_TRUE(std::filesystem::exists(dir / "my-h100.gemm-bf16.txt"));
  EXPECT_DOUBLE_EQ(p.peak_flops, resolve_gpu("h100-sxm").peak_flops);
  std::ifstream in(dir / "r.json");
  const auto report = nlohmann::json::parse(in);
  EXPECT_GT(report["operators"]["gemm"]["count"].get<int64_t>(), 30000);
  EXPECT_TRUE(report["operators"]["gemm"].contains("p90"));
  // The profile records the held-out figures of the report.
  EXPECT_TRUE(p.validation.held_out);
  EXPECT_EQ(p.validation.measured_on, report["measured_on"].get<std::string>());
  ASSERT_FALSE(p.validation.empty());
  for (const OperatorError& e : p.validation.operators) {
    EXPECT_EQ(e.count, report["operators"][e.op]["count"].get<int64_t>()) << e.op;
    EXPECT_NEAR(e.mape_percent, report["operators"][e.op]["mape"].get<double>(), 0.05) << e.op;
  }
  EXPECT_THAT(user_error_of_calibrate({"fit", (testing::measured_dir() / "aiconfigurator" / "h100_sxm").string(),
                                       "--out", (dir / "q.yaml").string(), "--framework", "tgi"}),
              HasSubstr("no kernel tables of framework 'tgi'"));
}

TEST(CalibrateFit, BadInputIsNamed) {
  std::ostringstream out;
  EXPECT_THROW(calibrate_command({"fit", "--out", "x.yaml"}, out), UserError);
  EXPECT_THROW(calibrate_command({"fit", "/nonexistent/meas", "--out", "x.yaml"}, out), UserError);
  EXPECT_THROW(calibrate_command({"measure"}, out), UserError);
  try {
    calibrate_command({"fit", testing::measured_dir().string(), "--out", "x.yaml", "--bogus"}, out);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bogus"));
  }
}

}  // namespace
}  // namespace batchsim
