// batchsim — workload generation: arrival processes, length distributions, trace replay.
//
// A workload is built from a WorkloadSpec, deterministically from its seed:
//   arrival   "offline" (all at t=0) | "poisson:RATE" | "gamma:RATE:CV" (CV=1 is Poisson) |
//             "trace" (the trace's own timestamps; the default when a trace is given)
//   lengths   "fixed:N" | "uniform:A:B" (inclusive) | "capexp:MEAN:CAP" (exponential with mean
//             MEAN, samples above CAP redrawn, as the Anyscale continuous-batching benchmark
//             generates outputs) | "lognormal:MEDIAN:SIGMA"; ignored for a trace, which brings
//             its own lengths.
//   trace     a file whose format is detected from its header: Azure LLM inference CSV
//             (TIMESTAMP,ContextTokens,GeneratedTokens), generic CSV
//             (arrival_s,prompt_tokens,output_tokens), Mooncake JSONL (timestamp ms,
//             input_length, output_length, hash_ids).
// Random numbers come from our own Rng and our own samplers, never std:: distributions, whose
// output differs between standard libraries: the same spec and seed give the same workload
// on every platform.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "sim/request.h"

namespace batchsim {

// splitmix64-seeded xoshiro256** — small, fast and fully specified.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform01();  // in [0, 1), 53 random bits
 private:
  uint64_t s_[4];
};

class LengthDistribution {
 public:
  virtual ~LengthDistribution() = default;
  virtual int32_t sample(Rng& rng) const = 0;
  virtual std::string describe() const = 0;
};
// Throws UserError naming `option` (e.g. "--prompt-len") for a malformed spec.
std::unique_ptr<LengthDistribution> parse_length_distribution(std::string_view spec,
                                                              std::string_view option);

class ArrivalProcess {
 public:
  virtual ~ArrivalProcess() = default;
  // Time from the previous arrival to the next one.
  virtual SimTime next_gap(Rng& rng) = 0;
  virtual std::string describe() const = 0;
};
std::unique_ptr<ArrivalProcess> parse_arrival_process(std::string_view spec,
                                                      std::string_view option);

struct WorkloadSpec {
  std::string arrival;                 // empty: "trace" with a trace, else "offline"
  std::string prompt_len = "fixed:512";
  std::string output_len = "fixed:128";
  std::filesystem::path trace;         // empty: synthetic
  int64_t num_requests = 0;            // 0: all of a trace; required (> 0) without one
  double trace_speedup = 1.0;          // divides trace arrival offsets
  uint64_t seed = 0;
};

// Throws UserError for any malformed part (naming the option, or the trace file and line).
Workload make_workload(const WorkloadSpec& spec);

// Reads a trace (format auto-detected). Arrival offsets are relative to the first request and
// divided by `speedup`; at most `max_requests` are read (0 = all).
Workload read_trace(const std::filesystem::path& path, int64_t max_requests, double speedup);

}  // namespace batchsim
