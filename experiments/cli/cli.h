// batchsim — the CLI's subcommands, callable from tests without a process.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/run/run_config.h"

namespace batchsim {

// The configuration `batchsim run ARGS` simulates: the defaults, then a --config file, then the
// flags, validated; the Python module's run() passes its keywords as these flags, so that both
// accept the same names and refuse bad input with the same messages. Throws UserError.
RunConfig run_config_from_args(const std::vector<std::string>& args);
// Applies the run flags among ARGS on top of `config`, as `batchsim compare EXPERIMENT --FLAG`
// patches an experiment's base. Throws UserError for an unknown flag or a bad value.
void apply_run_args(const std::vector<std::string>& args, RunConfig& config);

// Dispatches `args` (without the program name). Returns the exit status; throws UserError for
// bad input (the caller prints it and exits 2).
int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace batchsim
