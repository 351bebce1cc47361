#include "experiments/cli/command_line.h"

#include "hwmodel/base/error.h"

namespace po = boost::program_options;

namespace batchsim {

po::variables_map parse_command_line(const std::vector<std::string>& args,
                                     const po::options_description& desc,
                                     const po::positional_options_description* positional,
                                     const std::string& command) {
  po::variables_map vm;
  try {
    auto parser = po::command_line_parser(args).options(desc).style(
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing);
    if (positional != nullptr) parser.positional(*positional);
    po::store(parser.run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UserError(command.empty() ? std::string(e.what()) : command + ": " + e.what());
  }
  return vm;
}

}  // namespace batchsim
