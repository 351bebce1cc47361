// libFuzzer harness: the parsers of the spec strings a user writes on the command line or in a
// run YAML, each fed the input directly (the YAML path, fuzz_experiment, rarely reaches them
// with a string worth parsing). The first byte picks the parser, the rest is the spec:
//   0 --arrival (poisson:8, gamma:4:2)       1 --prompt-len/--output-len/--max-tokens/--session-turns
//   2 --priority (classes:0=1,1=4)           3 --think-time (exponential:8)
//   4 --prefix (groups:512:4)                5 --resample (block-bootstrap:64)
//   6 --spec-decode (eagle:k=3:accept=0.8)   7 --kv-offload (cpu=200)
//   8 --moe-routing (balanced, zipf:1.2)
// Each parsed spec draws a few samples, which must keep the promises of sim/workload/workload.h
// and hwmodel/speculative.h. Seeds: tests/fuzz/seeds/spec_strings (the docs' examples).
#include <cmath>
#include <string>

#include "experiments/run/run_config.h"
#include "hwmodel/base/error.h"
#include "hwmodel/base/random.h"
#include "hwmodel/speculative.h"
#include "sim/workload/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string spec(reinterpret_cast<const char*>(data) + 1, size - 1);
  batchsim::Rng rng(7);
  constexpr int kSamples = 16;
  try {
    switch (data[0] % 9) {
      case 0: {
        const auto arrivals = batchsim::parse_arrival_process(spec, "--arrival");
        for (int i = 0; i < kSamples; ++i) {
          if (arrivals->next_gap(rng) < batchsim::SimTime::zero()) __builtin_trap();
        }
        break;
      }
      case 1: {
        const auto lengths = batchsim::parse_length_distribution(spec, "--prompt-len");
        for (int i = 0; i < kSamples; ++i) {
          if (lengths->sample(rng) < 1) __builtin_trap();  // "Samples are integers >= 1"
        }
        break;
      }
      case 2: {
        const auto priorities = batchsim::parse_priority_distribution(spec, "--priority");
        for (int i = 0; i < kSamples; ++i) priorities->sample(rng);
        break;
      }
      case 3: {
        const batchsim::ThinkTime think = batchsim::parse_think_time(spec, "--think-time");
        for (int i = 0; i < kSamples; ++i) {
          if (think.sample(rng) < batchsim::SimTime::zero()) __builtin_trap();
        }
        break;
      }
      case 4: {
        const batchsim::PrefixSpec prefix = batchsim::parse_prefix_spec(spec, "--prefix");
        if (prefix.tokens < 0 || prefix.groups < 0) __builtin_trap();
        break;
      }
      case 5:
        if (batchsim::parse_resample_block(spec, "--resample") < 0) __builtin_trap();
        break;
      case 6: {
        // "size k, non-increasing, in [0, 1]"
        const batchsim::SpeculativeDecoding s = batchsim::parse_speculative_decoding(spec, "--spec-decode");
        if (s.k < 0 || s.accept.size() != static_cast<size_t>(s.k)) __builtin_trap();
        for (size_t i = 0; i < s.accept.size(); ++i) {
          if (!(s.accept[i] >= 0 && s.accept[i] <= 1) || (i > 0 && s.accept[i] > s.accept[i - 1])) __builtin_trap();
        }
        break;
      }
      case 7: {
        // "a host tier above 0 (none for an empty spec), a disk tier at 0 (none) or above, both finite"
        const batchsim::KvOffloadBytes bytes = batchsim::parse_kv_offload(spec);
        if (!(std::isfinite(bytes.cpu) && (bytes.cpu > 0 || spec.empty()) && std::isfinite(bytes.disk) &&
              bytes.disk >= 0)) {
          __builtin_trap();
        }
        break;
      }
      default:
        batchsim::check_moe_routing(spec);
        break;
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
