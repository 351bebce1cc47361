// batchsim — the command-line tool.
//
//   batchsim run      one policy on one workload
//   batchsim compare  an experiment file, or several policies on the same request sequence
//   batchsim merge    join the results folders of sharded compares
//   batchsim list     models | gpus | policies
//   batchsim bench    simulated requests per wall-second (speed of the simulator itself)
//
// Exit codes: 0 success, 2 bad input (the message names the option, file or line),
// 3 internal error (a bug: please report it).
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "experiments/cli.h"
#include "hwmodel/error.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return batchsim::cli_main(args, std::cout, std::cerr);
  } catch (const batchsim::UserError& e) {
    std::cerr << "batchsim: error: " << e.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "batchsim: error: out of memory (try fewer requests or a shorter trace)\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "batchsim: internal error: " << e.what() << '\n';
    return 3;
  }
}
