// batchsim-calibrate on a machine without a GPU (CI): it must say so clearly and exit
// non-zero, never crash or hang. Only built when CMake found the CUDA toolkit.
#include <gtest/gtest.h>

#include <string>

#include "run_command.h"
#include "test_support.h"

namespace {

#ifdef BATCHSIM_CALIBRATE_BINARY
using RunResult = batchsim::calibration::shell::CommandResult;
// The shared runner (run_command.h), under this file's short name.
RunResult run(const std::string& command) { return batchsim::calibration::shell::run_command(command); }

TEST(CalibrateBinary, WithoutAGpuMeasureFailsCleanlyWithAClearMessage) {
  const std::string binary = BATCHSIM_CALIBRATE_BINARY;
  const RunResult info = run(binary + " info");
  if (info.exit_code == 0) GTEST_SKIP() << "a CUDA device is present:\n" << info.output;

  const std::string out_dir = batchsim::testing::scratch_dir("calibrate_binary").string();
  for (const std::string& args : {" measure --quick --out " + out_dir, std::string(" check"), std::string(" info")}) {
    const RunResult r = run(binary + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.exit_code, -1) << args << ": killed by a signal";
    EXPECT_NE(r.output.find("no CUDA device"), std::string::npos) << args << ":\n" << r.output;
  }
}

TEST(CalibrateBinary, RejectsBadUsageWithAMessage) {
  const std::string binary = BATCHSIM_CALIBRATE_BINARY;
  const RunResult unknown = run(binary + " frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("frobnicate"), std::string::npos) << unknown.output;
  const RunResult no_out = run(binary + " measure --quick");
  EXPECT_EQ(no_out.exit_code, 2);
  EXPECT_NE(no_out.output.find("--out"), std::string::npos) << no_out.output;
  const RunResult bad_model = run(binary + " measure --out /tmp/x --model gpt-5");
  EXPECT_EQ(bad_model.exit_code, 2);
  EXPECT_NE(bad_model.output.find("gpt-5"), std::string::npos) << bad_model.output;
  EXPECT_EQ(run(binary + " --help").exit_code, 0);
  // A command's own help is help, not a run with a missing --out (this exited 2 once).
  for (const char* command : {" measure --help", " measure -h", " check --help", " info --help"}) {
    const RunResult help = run(binary + command);
    EXPECT_EQ(help.exit_code, 0) << command << ":\n" << help.output;
    EXPECT_NE(help.output.find("usage: batchsim-calibrate"), std::string::npos) << command;
  }
  EXPECT_NE(run(binary + " measure --help").output.find("--out DIR"), std::string::npos);
  // A model that is not built in: the message says how to measure it anyway.
  EXPECT_NE(bad_model.output.find("batchsim calibrate shapes --model gpt-5"), std::string::npos) << bad_model.output;
  const RunResult bad_shapes = run(binary + " measure --out /tmp/x --shapes /nonexistent/shapes.csv");
  EXPECT_EQ(bad_shapes.exit_code, 2);
  EXPECT_NE(bad_shapes.output.find("cannot read the shape file /nonexistent/shapes.csv"), std::string::npos)
      << bad_shapes.output;
}

// `shapes` lists what `measure` would time, without a GPU: the built-in table and a shape file.
TEST(CalibrateBinary, ShapesListsTheGemmsMeasureWouldTime) {
  const std::string binary = BATCHSIM_CALIBRATE_BINARY;
  const RunResult builtin = run(binary + " shapes --model llama-2-70b --tp 8");
  EXPECT_EQ(builtin.exit_code, 0) << builtin.output;
  // 64 query and 8 KV heads of 128 over 8 GPUs: (8 + 2) x 128 QKV columns.
  EXPECT_NE(builtin.output.find("\nattn_pre_proj,8192,1280,1,8,llama-2-70b\n"), std::string::npos) << builtin.output;
  const std::filesystem::path file = batchsim::testing::write_text_file(
      batchsim::testing::scratch_dir("shapes"), "shapes.csv",
      "model,hf_id,tp,dp,ep,moe_tp,op,k,n,groups,layers,weight_format\n"
      "deepseek-v3,deepseek-ai/DeepSeek-V3,8,1,8,1,expert_up_proj,7168,4096,1,58,fp8-block\n"
      "deepseek-v3,deepseek-ai/DeepSeek-V3,8,1,8,1,mla_uk,128,512,16,61,bf16\n");
  const RunResult from_file = run(binary + " shapes --shapes " + file.string());
  EXPECT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_EQ(from_file.output,
            "op,k,n,groups,tp,model\nexpert_up_proj,7168,4096,1,8,deepseek-v3\nmla_uk,128,512,16,8,deepseek-v3\n");
  // The measurement itself needs the GPU: it fails cleanly after reading the file.
  if (run(binary + " info").exit_code != 0) {
    const RunResult measure =
        run(binary + " measure --out " + batchsim::testing::scratch_dir("m").string() + " --shapes " + file.string());
    EXPECT_EQ(measure.exit_code, 3) << measure.output;
    EXPECT_NE(measure.output.find("no CUDA device"), std::string::npos) << measure.output;
  }
}
#else
TEST(CalibrateBinary, NotBuiltWithoutTheCudaToolkit) { GTEST_SKIP() << "batchsim-calibrate not built"; }
#endif

}  // namespace
