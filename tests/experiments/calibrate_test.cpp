// `batchsim calibrate fit` on real measurements (the published Vidur A100 profile of
// Llama-2-7B, in the schema batchsim-calibrate writes): a usable profile that records its fit
// error per operator, and clear errors for bad input. `batchsim calibrate transfer`: a fitted
// profile written onto another GPU's ceilings, which `list gpus` and `validate` show as such.
#include "experiments/cli/fidelity_commands.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/cli.h"
#include "hwmodel/base/error.h"
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
  ASSERT_EQ(calibrate_command({"fit", meas.string(), "--base-gpu", "a100-80gb", "--out", (dir / "p.yaml").string(),
                               "--report", (dir / "r.json").string()},
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
  const auto csv = testing::data_file(testing::measured_dir(), "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv");
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
  ASSERT_EQ(
      calibrate_command(
          {"fit", tree.string(), "--device", "a40", "--fit-on", "llama-2-7b", "--out", (dir / "p.yaml").string()}, out),
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
  EXPECT_NE(p.gemm_table(WeightFormat::bf16), nullptr);
  EXPECT_NE(p.gemm_table(WeightFormat::fp8), nullptr);
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

// How a user simulates an H200 from the H100 tables: the written profile loads (its rescaled
// GEMM tables beside it), says where it came from, and runs.
TEST(CalibrateTransfer, WritesALoadableProfileWithItsTables) {
  const auto dir = testing::scratch_dir("calibrate-transfer");
  std::ostringstream out;
  ASSERT_EQ(calibrate_command(
                {"transfer", "h100-sxm-fitted", "--to", "h200", "--out", (dir / "h200-from-h100.yaml").string()}, out),
            0);
  EXPECT_THAT(out.str(), HasSubstr("transferred from h100-sxm-fitted to h200 ceilings"));
  EXPECT_THAT(out.str(), HasSubstr("x 1.433 (HBM bandwidth per SM"));  // what was rescaled, on screen
  EXPECT_THAT(out.str(), HasSubstr("wrote "));
  EXPECT_TRUE(std::filesystem::exists(dir / "h200-from-h100.gemm-bf16.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "h200-from-h100.gemm-fp8.txt"));
  const HardwareProfile p = load_hardware_profile(dir / "h200-from-h100.yaml");
  EXPECT_EQ(p.name, "h200-from-h100");
  EXPECT_EQ(p.source, "transferred from h100-sxm-fitted to h200 ceilings");
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_s, resolve_gpu("h200").hbm_bytes_per_s);
  EXPECT_DOUBLE_EQ(p.gemm_eta_max, resolve_gpu("h100-sxm-fitted").gemm_eta_max);
  ASSERT_NE(p.gemm_table(WeightFormat::bf16), nullptr);
  EXPECT_THAT(p.gemm_table(WeightFormat::bf16)->source(), HasSubstr("rescaled from h100-sxm-fitted to h200"));

  ASSERT_EQ(calibrate_command({"transfer", "h100-sxm-fitted", "--to", "h200", "--out", (dir / "x.yaml").string(),
                               "--name", "my-h200"},
                              out),
            0);
  EXPECT_EQ(load_hardware_profile(dir / "x.yaml").name, "my-h200");

  std::ostringstream run_out, run_err;
  ASSERT_EQ(cli_main({"run", "--gpu", (dir / "h200-from-h100.yaml").string(), "--model", "llama-3-8b", "--policy",
                      "vllm", "--num-requests", "20"},
                     run_out, run_err),
            0);
}

// `list gpus FILE` and `validate --gpu FILE` (report and JSON) say a profile is transferred.
TEST(CalibrateTransfer, ListAndValidateShowWhereAProfileCameFrom) {
  const auto dir = testing::scratch_dir("calibrate-transfer-shown");
  const auto profile = dir / "a40-from-a100.yaml";
  std::ostringstream out;
  ASSERT_EQ(calibrate_command({"transfer", "a100-80gb-fitted", "--to", "a40", "--out", profile.string()}, out), 0);

  std::ostringstream list, err;
  ASSERT_EQ(cli_main({"list", "gpus", profile.string()}, list, err), 0);
  EXPECT_THAT(list.str(), HasSubstr("a40-from-a100"));
  EXPECT_THAT(list.str(), HasSubstr("transferred from a100-80gb-fitted to a40 ceilings"));
  EXPECT_THAT(list.str(), HasSubstr("fitted on llama-2-7b rows"));  // the shipped ones still listed
  EXPECT_THAT(list.str(), HasSubstr("datasheet"));

  std::ostringstream report;
  ASSERT_EQ(cli_main({"validate", "--measurements", (testing::measured_dir() / "vidur").string(), "--device", "a40",
                      "--gpu", profile.string(), "--out", (dir / "v.json").string()},
                     report, err),
            0);
  EXPECT_THAT(report.str(), HasSubstr("profile 'a40-from-a100', checked as it is\n"
                                      "profile source: transferred from a100-80gb-fitted to a40 ceilings\n"));
  std::ifstream in(dir / "v.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["profile_source"], "transferred from a100-80gb-fitted to a40 ceilings");
  EXPECT_EQ(j["profile"], "a40-from-a100");

  // The kernel-table report too.
  std::ostringstream kernels;
  ASSERT_EQ(cli_main({"validate", "--measurements", (testing::measured_dir() / "aiconfigurator" / "h100_sxm").string(),
                      "--gpu", "h100-sxm-fitted", "--out", (dir / "k.json").string()},
                     kernels, err),
            0);
  EXPECT_THAT(kernels.str(), HasSubstr("profile source: fitted on vllm kernel tables of h100_sxm"));
  std::ifstream kin(dir / "k.json");
  EXPECT_THAT(nlohmann::json::parse(kin)["profile_source"].get<std::string>(), HasSubstr("fitted on vllm kernel"));
}

TEST(CalibrateTransfer, BadInputIsNamed) {
  const auto out_file = (testing::scratch_dir("calibrate-transfer-bad") / "p.yaml").string();
  EXPECT_THAT(user_error_of_calibrate({"transfer", "--to", "h200", "--out", out_file}),
              HasSubstr("give the fitted profile to transfer"));
  EXPECT_THAT(user_error_of_calibrate({"transfer", "h100-sxm-fitted", "--out", out_file}), HasSubstr("give --to GPU"));
  EXPECT_THAT(user_error_of_calibrate({"transfer", "h100-sxm-fitted", "--to", "h200"}), HasSubstr("give --out"));
  EXPECT_THAT(user_error_of_calibrate({"transfer", "h100-sxm-fitted", "--to", "b300", "--out", out_file}),
              HasSubstr("unknown GPU 'b300'"));
  EXPECT_THAT(user_error_of_calibrate({"transfer", "h100-sxm-fitted", "--to", "a40-fitted", "--out", out_file}),
              HasSubstr("the target must be a datasheet GPU"));
  EXPECT_THAT(user_error_of_calibrate({"transfer", "h100-sxm-fitted", "--to", "h100-sxm", "--out", out_file}),
              HasSubstr("the same GPU"));
  EXPECT_THAT(
      user_error_of_calibrate({"transfer", "h100-sxm-fitted", "--to", "h200", "--out", out_file, "--from", "x"}),
      HasSubstr("calibrate transfer: unrecognised option '--from'"));
  EXPECT_FALSE(std::filesystem::exists(out_file));  // nothing written on a refusal
}

}  // namespace
}  // namespace batchsim
