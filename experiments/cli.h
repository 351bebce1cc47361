// batchsim — the CLI's subcommands, callable from tests without a process.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace batchsim {

// Dispatches `args` (without the program name). Returns the exit status; throws UserError for
// bad input (the caller prints it and exits 2).
int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace batchsim
