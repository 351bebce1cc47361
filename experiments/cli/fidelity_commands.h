// batchsim — the fidelity commands' command lines: `batchsim validate`, `validate-serving` and
// `calibrate`. Each takes its arguments without the command's name, parses them with
// Boost.Program_options and runs the command of experiments/fidelity/; `--help` prints the
// options. Throws UserError for bad options.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace batchsim {

int validate_command(const std::vector<std::string>& args, std::ostream& out);
int validate_serving_command(const std::vector<std::string>& args, std::ostream& out);
// `calibrate fit | transfer | engine ...`: the subcommand is args[0].
int calibrate_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace batchsim
