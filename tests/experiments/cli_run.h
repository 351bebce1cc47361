// Running the CLI in a test: exit status and what it printed.
#pragma once

#include <sstream>
#include <string>
#include <vector>

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

}  // namespace batchsim::testing
