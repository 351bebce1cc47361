// Running the CLI in a test: exit status and what it printed.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "experiments/cli.h"

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

}  // namespace batchsim::testing
