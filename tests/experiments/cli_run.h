// Running the CLI in a test: exit status and what it printed.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/cli.h"
#include "test_support.h"

namespace batchsim::testing {

struct CliRun {
  int rc = 0;
  std::string out, err;
};

inline CliRun cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliRun r;
  r.rc = cli_main(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Runs the CLI in-process and returns its exit status; with `text`, also what it printed
// (standard output, then standard error).
inline int run_cli(const std::vector<std::string>& args, std::string* text = nullptr) {
  const CliRun r = cli(args);
  if (text != nullptr) *text = r.out + r.err;
  return r.rc;
}

// The message of the UserError the CLI throws for `args`; the test fails when it throws none.
inline std::string cli_error_of(const std::vector<std::string>& args) {
  return user_error_of([&] { run_cli(args); });
}

// `batchsim run ARGS --out DIR` in a scratch folder named `scratch`; the test fails unless it
// exits 0. Returns its summary.json.
inline nlohmann::json run_summary(const std::string& scratch, std::vector<std::string> args) {
  const auto dir = scratch_dir(scratch);
  args.insert(args.begin(), "run");
  args.insert(args.end(), {"--out", dir.string()});
  std::string text;
  EXPECT_EQ(run_cli(args, &text), 0) << text;
  std::ifstream in(dir / "summary.json");
  return nlohmann::json::parse(in);
}

}  // namespace batchsim::testing
