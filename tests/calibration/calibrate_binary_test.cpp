// batchsim-calibrate on a machine without a GPU (CI): it must say so clearly and exit
// non-zero, never crash or hang. Only built when CMake found the CUDA toolkit.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "test_support.h"

namespace {

#ifdef BATCHSIM_CALIBRATE_BINARY
struct RunResult {
  int exit_code = -1;
  std::string output;
};

RunResult run(const std::string& command) {
  RunResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) result.output += buf.data();
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

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
}
#else
TEST(CalibrateBinary, NotBuiltWithoutTheCudaToolkit) { GTEST_SKIP() << "batchsim-calibrate not built"; }
#endif

}  // namespace
