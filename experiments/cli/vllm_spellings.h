// batchsim — vLLM's own option names, read as batchsim's (issue 45, item 7).
//
// A user who comes from `vllm serve` and `vllm bench serve` types their flags. `run`, `compare`
// and `bench` accept them and say once, on standard error, what each was read as:
//   --num-prompts N                  --num-requests N
//   --request-rate R [--burstiness B] --arrival poisson:R, or gamma:R:CV with CV = 1/sqrt(B)
//                                    (vLLM draws gamma gaps of shape B; inf: --arrival offline)
//   --tensor-parallel-size N, -tp N  --tp N
//   --max-num-seqs N                 --policy-opt max_num_seqs=N
//   --max-num-batched-tokens N       --policy-opt max_num_batched_tokens=N
//   --random-input-len N             --prompt-len fixed:N (uniform with --random-range-ratio)
//   --random-output-len N            --output-len fixed:N (likewise)
//   --dataset-path FILE              --trace FILE
//   --enable-prefix-caching          --policy-opt prefix_caching=true (--no-enable-...: false)
//   --enable-chunked-prefill         nothing to set: chunked prefill comes with the policy;
//                                    `chunked_prefill_required` asks the caller to check it
// `--gpu-memory-utilization` and `--max-concurrency` are spelled alike in both. SGLang's and
// TensorRT-LLM's spellings are not translated: they are refused with a hint (command_line.h).
#pragma once

#include <string>
#include <vector>

namespace batchsim {

struct VllmSpellings {
  std::vector<std::string> args;          // batchsim's spelling of every option
  std::vector<std::string> notes;         // "read vLLM's --num-prompts 200 as --num-requests 200", one per option
  bool chunked_prefill_required = false;  // --enable-chunked-prefill was given
};

// Throws UserError, naming the option, for a vLLM option without its value or with a bad one.
VllmSpellings read_vllm_spellings(const std::vector<std::string>& args);

}  // namespace batchsim
