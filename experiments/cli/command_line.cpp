#include "experiments/cli/command_line.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "hwmodel/base/error.h"

namespace po = boost::program_options;

namespace batchsim {

namespace {

// Serving engines' and their benchmarks' own spellings, and how batchsim says the same thing:
// vLLM (`vllm serve`, vllm/engine/arg_utils.py; `vllm bench serve`), SGLang
// (python/sglang/srt/server_args.py; `sglang.bench_serving`) and TensorRT-LLM (`trtllm-serve`,
// underscores). A user who types one of them gets the batchsim option in the error.
struct ForeignSpelling {
  std::string_view foreign, ours, engine;
};
constexpr ForeignSpelling kForeignSpellings[] = {
    {"tensor-parallel-size", "--tp N", "vLLM"},
    {"tp-size", "--tp N", "SGLang"},
    {"tp_size", "--tp N", "TensorRT-LLM"},
    {"data-parallel-size", "--dp N (DP attention)", "vLLM"},
    {"dp-size", "--dp N (DP attention)", "SGLang"},
    {"enable-dp-attention", "--dp N", "SGLang"},
    {"enable-expert-parallel", "--ep N (vLLM's EP size is TP x DP)", "vLLM"},
    {"ep-size", "--ep N", "SGLang"},
    {"ep_size", "--ep N", "TensorRT-LLM"},
    {"enable-eplb", "--eplb", "vLLM and SGLang"},
    {"pipeline-parallel-size", "nothing: batchsim does not model pipeline parallelism", "vLLM"},
    {"max-num-seqs", "--policy-opt max_num_seqs=N", "vLLM"},
    {"max-num-batched-tokens", "--policy-opt max_num_batched_tokens=N", "vLLM"},
    {"block-size", "--policy-opt block_size=N", "vLLM"},
    {"enable-prefix-caching", "--policy-opt prefix_caching=true", "vLLM"},
    {"max-running-requests", "--policy-opt max_running_requests=N (with --policy sglang)", "SGLang"},
    {"chunked-prefill-size", "--policy-opt chunked_prefill_size=N (with --policy sglang)", "SGLang"},
    {"max_batch_size", "--policy-opt max_num_seqs=N (with --policy trtllm)", "TensorRT-LLM"},
    {"max_num_tokens", "--policy-opt max_num_batched_tokens=N (with --policy trtllm)", "TensorRT-LLM"},
    {"dtype", "--weight-dtype", "vLLM"},
    {"quantization", "--weight-dtype", "vLLM"},
    {"num-prompts", "--num-requests N", "vLLM's benchmark"},
    {"request-rate", "--arrival poisson:RATE", "vLLM's benchmark"},
    {"random-input-len", "--prompt-len fixed:N", "vLLM's benchmark"},
    {"random-output-len", "--output-len fixed:N", "vLLM's benchmark"},
    {"dataset-path", "--trace FILE", "vLLM's benchmark"},
};

// Edits (insert, delete, replace one character) from `a` to `b` (Levenshtein).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The command's option closest to `name` when it is a likely typo (at most a third of its
// letters off, and at most 3); "" otherwise.
std::string closest_option(std::string_view name, const po::options_description& desc) {
  std::string best;
  size_t best_distance = std::min<size_t>(3, std::max<size_t>(1, name.size() / 3)) + 1;
  for (const auto& option : desc.options()) {
    const std::string& candidate = option->long_name();
    if (candidate.empty()) continue;
    const size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

// The error's text, with batchsim's spelling when `option` is an engine's, else the closest
// option of the command.
std::string unknown_option_text(const po::unknown_option& e, const po::options_description& desc) {
  const std::string option = e.get_option_name();  // by value: a view of it must not outlive it
  std::string_view name = option;
  while (name.starts_with('-')) name.remove_prefix(1);
  for (const ForeignSpelling& f : kForeignSpellings) {
    if (name == f.foreign) {
      return std::string(e.what()) + "; that is " + std::string(f.engine) + "'s spelling: batchsim says " +
             std::string(f.ours) + " (docs/options.md)";
    }
  }
  if (const std::string near = closest_option(name, desc); !near.empty()) {
    return std::string(e.what()) + "; did you mean --" + near + "?";
  }
  return e.what();
}

}  // namespace

po::variables_map parse_command_line(const std::vector<std::string>& args, const po::options_description& desc,
                                     const po::positional_options_description* positional, const std::string& command) {
  po::variables_map vm;
  const auto prefixed = [&](const std::string& what) { return command.empty() ? what : command + ": " + what; };
  try {
    auto parser = po::command_line_parser(args).options(desc).style(po::command_line_style::default_style &
                                                                    ~po::command_line_style::allow_guessing);
    if (positional != nullptr) parser.positional(*positional);
    po::store(parser.run(), vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    throw UserError(prefixed(unknown_option_text(e, desc)));
  } catch (const po::error& e) {
    throw UserError(prefixed(e.what()));
  }
  return vm;
}

}  // namespace batchsim
