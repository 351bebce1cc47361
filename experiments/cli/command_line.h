// batchsim — parsing a command's options (Boost.Program_options), the same way for every command.
//
// Every `batchsim` command parses through parse_command_line: long options must be spelled in
// full (no prefix guessing: `--num-req 5` is refused rather than silently meaning --num-requests,
// and a flag added later cannot change what an abbreviation meant), and Boost's errors become
// UserErrors prefixed with the command ("validate: unrecognised option '--bogus'"). An option
// spelled as vLLM, SGLang or TensorRT-LLM spell it (`--tensor-parallel-size`, `--num-prompts`)
// is refused with batchsim's spelling in the message (`run`, `compare` and `bench` read vLLM's
// as batchsim's before they parse: vllm_spellings.h); any other unknown option with the
// command's closest one ("did you mean --num-requests?").
#pragma once

#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace batchsim {

boost::program_options::variables_map parse_command_line(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    const boost::program_options::positional_options_description* positional = nullptr,
    const std::string& command = "");

}  // namespace batchsim
