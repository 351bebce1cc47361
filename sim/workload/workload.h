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
//   prefix    "shared:TOKENS" (every prompt starts with the same TOKENS tokens: a system
//             prompt) | "groups:TOKENS:N" (N distinct prefixes of TOKENS tokens, each request
//             draws one uniformly). The prompt is TOKENS + the sampled (or trace) length, as
//             vLLM's benchmark_prefix_caching builds prefix + random suffix; the workload gets
//             PrefixBlockHashes that mark the prefix as shared, for prefix caching.
//   max_tokens a length distribution (as above): each request's client limit on output tokens
//             (Request::max_tokens), sampled per request, synthetic or from a trace (it then
//             replaces a generic CSV's max_tokens column). The output ends at EOS (the sampled
//             or trace output length) or at max_tokens, whichever comes first.
//   ignore_eos every request runs to its max_tokens, as benchmarks send requests
//             (vllm bench serve --ignore-eos): output = max_tokens.
//   priority  each request's priority (Request::priority; smaller is served first by
//             scheduling_policy=priority): "fixed:P" | "uniform:A:B" (integers A..B inclusive,
//             each equally likely) | "classes:P=W,P=W,..." (priority P with relative weight W,
//             e.g. classes:0=1,1=4 makes a fifth of the requests urgent). Integers may be
//             negative. It replaces a trace's priority column.
//   think_time closed-loop clients only (--max-concurrency): how long a client waits before it
//             sends each request (after the response that freed it; the first ones after
//             t = 0), as a user reads an answer before typing the next question or a benchmark
//             client turns around: "fixed:S" | "uniform:A:B" | "exponential:MEAN", in seconds.
//   resample  traces only: "block-bootstrap" | "block-bootstrap:B" draws, from the seed, a
//             replicate of the trace by the moving-block bootstrap (Kuensch 1989, Ann. Statist.
//             17(3)): runs of B consecutive requests (default ceil(sqrt(n))) from random places
//             of the trace, laid end to end, each run keeping its own inter-arrival gaps and
//             lengths, until the replicate holds as many requests as the trace. So the seeds of
//             a trace replay vary something real (the bursts it happened to contain) while each
//             replicate keeps the trace's burstiness within a block and its length mix.
// Random numbers come from our own Rng and our own samplers, never std:: distributions, whose
// output differs between standard libraries: the same spec and seed give the same workload
// on every platform.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/base/random.h"
#include "sim/workload/request.h"
#include "sim/workload/trace_reader.h"

namespace batchsim {

// Rng (splitmix64-seeded xoshiro256**) and the samplers live in hwmodel/base/random.h.

// One accepted spelling of an arrival process or length distribution, for --help and `list`.
struct SpecSyntax {
  std::string_view syntax;       // e.g. "poisson:RATE"
  std::string_view description;  // one line
};
std::span<const SpecSyntax> arrival_process_syntaxes();
std::span<const SpecSyntax> length_distribution_syntaxes();
std::span<const SpecSyntax> prefix_syntaxes();
std::span<const SpecSyntax> priority_syntaxes();
std::span<const SpecSyntax> think_time_syntaxes();

// A parsed --prefix: `tokens` shared tokens at the start of every prompt, drawn from `groups`
// distinct prefixes (1 for shared:TOKENS). Throws UserError naming `option` and the spec.
struct PrefixSpec {
  int32_t tokens = 0;
  int32_t groups = 0;
};
PrefixSpec parse_prefix_spec(std::string_view spec, std::string_view option);

class LengthDistribution {
 public:
  virtual ~LengthDistribution() = default;
  virtual int32_t sample(Rng& rng) const = 0;
  virtual std::string describe() const = 0;
};
// Throws UserError naming `option` (e.g. "--prompt-len") and the spec for a malformed spec:
//   --prompt-len: "uniform:9:3": B must be an integer >= A
// Samples are integers >= 1: fixed:N is N; uniform:A:B is uniform on {A..B} (A >= 1);
// capexp and lognormal round the continuous sample to the nearest integer, then raise it to 1
// (capexp's CAP must be an integer, so rounding never exceeds it); lognormal is clamped to
// 2^31 − 1 at the top.
std::unique_ptr<LengthDistribution> parse_length_distribution(std::string_view spec, std::string_view option);

// A distribution of request priorities (see "priority" above). Throws UserError naming
// `option` and the spec for a malformed one, e.g.  --priority: "classes:0=1,0=2": priority 0
// is listed twice.
class PriorityDistribution {
 public:
  virtual ~PriorityDistribution() = default;
  virtual int32_t sample(Rng& rng) const = 0;
  virtual std::string describe() const = 0;
};
std::unique_ptr<PriorityDistribution> parse_priority_distribution(std::string_view spec, std::string_view option);

// A parsed --think-time (see "think_time" above). Throws UserError naming `option` and the
// spec for a malformed one, e.g.  --think-time: "uniform:2:1": B must be a number >= A
struct ThinkTime {
  enum class Kind { kFixed, kUniform, kExponential };
  Kind kind = Kind::kFixed;
  double a_s = 0;  // fixed: the time; uniform: the lower bound; exponential: the mean
  double b_s = 0;  // uniform: the upper bound
  SimTime sample(Rng& rng) const;
  std::string describe() const;
};
ThinkTime parse_think_time(std::string_view spec, std::string_view option);

class ArrivalProcess {
 public:
  virtual ~ArrivalProcess() = default;
  // Time from the previous arrival to the next one, rounded to the nearest ns. Throws
  // UserError if a gap exceeds 1e9 s (a RATE so small that times would overflow).
  virtual SimTime next_gap(Rng& rng) = 0;
  virtual std::string describe() const = 0;
};
// "offline" | "poisson:RATE" (RATE requests/s > 0) | "gamma:RATE:CV" (gaps ~ Gamma(shape 1/CV²,
// scale CV²/RATE): mean 1/RATE, coefficient of variation CV > 0). "trace" is not a process: it is
// rejected here and handled by make_workload. Throws UserError naming `option` and the spec.
std::unique_ptr<ArrivalProcess> parse_arrival_process(std::string_view spec, std::string_view option);

struct WorkloadSpec {
  std::string arrival;  // empty: "trace" with a trace, else "offline"
  std::string prompt_len = "fixed:512";
  std::string output_len = "fixed:128";
  std::filesystem::path trace;  // empty: synthetic
  int64_t num_requests = 0;     // 0: all of a trace; required (> 0) without one
  double trace_speedup = 1.0;   // divides trace arrival offsets
  uint64_t seed = 0;
  std::string prefix;       // empty: none; else a --prefix spec (see above)
  std::string max_tokens;   // empty: a trace's max_tokens column, else the output length
  bool ignore_eos = false;  // output = max_tokens
  std::string priority;     // empty: a trace's priority column, else 0 for all
  std::string think_time;   // empty: none (a closed-loop client sends at once)
  std::string resample;     // empty: the trace as recorded; else a --resample spec
  // Empty: independent requests. Else a length distribution of turns per session: the
  // workload is num_requests multi-turn sessions (see "session_turns" below).
  std::string session_turns;
  // A trace's rows linked into multi-turn sessions by their hash_ids (see "trace_sessions" below).
  bool trace_sessions = false;
  // A trace in memory (the Python module's DataFrame or arrays) read instead of the file;
  // `trace` then only names it in descriptions and messages. Shared, not copied, by the runs
  // of an experiment.
  std::shared_ptr<const TraceColumns> trace_columns;

  // Every field: two specs build the same workload when they are equal (in-memory traces by
  // identity). A new field takes part without being listed anywhere.
  friend bool operator==(const WorkloadSpec&, const WorkloadSpec&) = default;
};

// A built workload with what a user must be told about it.
struct BuiltWorkload {
  Workload requests;
  std::string description;            // e.g. "poisson:4 arrivals; lengths from conv.csv (azure-csv)"
  std::vector<std::string> warnings;  // trace rows adjusted (see trace_reader.h); print them
  PrefixBlockHashes prefix_blocks;    // from a trace with hash_ids (Mooncake) or --prefix
  // --think-time: the client that takes request i waits think_times[i] before sending it
  // (SimulationOptions::think_times). Empty: none.
  std::vector<SimTime> think_times;
  // Multi-turn sessions (--session-turns, --trace-sessions): which turn follows which, and after
  // what delay (SimulationOptions::sessions). Empty: none.
  SessionLinks sessions;
};

// Semantics:
//   * Synthetic (no trace): num_requests > 0 requests; the first arrives at t = 0 and each
//     later one one next_gap() after the previous (as vLLM's benchmark_serving sends: the first
//     request at once). Arrivals, prompt lengths and output lengths come from three streams of
//     `seed` (Rng::for_stream 0, 1, 2), so changing one distribution leaves the others' samples
//     as they were.
//   * Trace, arrival "" or "trace": the trace's own offsets (see read_trace_detailed), the
//     first num_requests rows (0 = all), divided by trace_speedup.
//   * Trace, any other arrival: lengths from the trace (first num_requests rows, in trace
//     arrival order), arrival times from the process as above ("Azure conversation lengths at
//     Poisson rate X"). trace_speedup must then be 1: it would mean nothing.
//   * prompt_len / output_len are validated even when a trace brings its own lengths.
//   * max_tokens (optional): sampled from stream 4 of `seed`, so arrivals, prompts, outputs and
//     prefix groups are the same with and without it; each request's output_tokens becomes
//     min(its EOS length, max_tokens), or max_tokens with ignore_eos. Without it, a generic
//     CSV's max_tokens column gives the limits the same way; with neither, max_tokens is the
//     output length (Request::output_limit) and ignore_eos changes nothing.
//   * priority (optional): sampled from stream 5 of `seed`, so every other sample is the same
//     with and without it; it replaces a trace's priority column. Without it, requests keep the
//     trace's priorities, or 0.
//   * think_time (optional): one sample per request, in id order, from stream 6 of `seed`, so
//     every other sample is the same with and without it. A streaming source cannot carry
//     them: stream_workload refuses a think_time.
//   * session_turns (optional, synthetic only): num_requests sessions instead of requests, each
//     starting at an arrival of the process, with turns drawn from session_turns (stream 8).
//     Each turn draws its new input from prompt_len and its answer from output_len (then the
//     client's max_tokens and priority); its prompt is every earlier turn's input and answer plus
//     its own input. A turn after the first is sent its think time (stream 6, one per such turn;
//     0 without think_time) after the previous answer ended (BuiltWorkload::sessions), open loop.
//     The conversation's hashes (kSessionHashTokens tokens each, unique to the session, from
//     stream 9) cover each turn's prompt and answer. Not with a trace, a prefix, a resample or
//     streaming.
//   * trace_sessions (optional, a trace with hash_ids replayed at its own times): each row is
//     linked to the earlier row it continues (sim/workload/trace_sessions.h: the one whose full
//     prompt blocks begin its hash_ids), delay 0: a turn is sent at its recorded time, or when its
//     predecessor's answer ends if that is later. The prompts and their hashes stay the trace's.
//     Not with another arrival process, a resample, a think time, session_turns or streaming; a
//     trace without hash_ids is refused, naming the file.
//   * prefix (optional): TOKENS is added to every prompt, synthetic or from a trace; the
//     group of each request comes from stream 3 of `seed`, so arrivals and lengths are the
//     same with and without it. One hash covers the whole prefix (block_tokens = TOKENS; the
//     group identifies it), so any KV block size shares every full block inside the prefix.
//     A trace that brings its own hash_ids cannot take a --prefix (an error says so).
//   * resample (optional, traces only): after the trace's rows are read (and before
//     --max-tokens, --priority, --prefix and --think-time are drawn), its requests are replaced
//     by a block-bootstrap replicate drawn from stream 7 of `seed`: each block starts at a
//     uniformly drawn request i, its first request follows the previous block's last by the
//     trace's own gap before request i (the trace's mean gap for i = 0), and the requests of a
//     block keep their gaps, lengths, limits, priorities and prompt-block hashes. A request drawn
//     twice shares its prompt blocks with its copy (a prefix-cache hit the trace did not have).
//   * A seed other than 0 that nothing above uses (a trace replayed as recorded, without
//     resample, prefix groups, max_tokens, priority or think_time) adds a warning: it changes
//     nothing.
// Throws UserError for any malformed part (naming the option, or the trace file and line).
BuiltWorkload build_workload(const WorkloadSpec& spec);
// Whether arrivals are a trace's own timestamps (a trace and no --arrival, or --arrival trace).
bool replays_trace_timestamps(const WorkloadSpec& spec);
// What different seeds change in this workload, for reports: "arrivals, prompt and output
// lengths", "a block-bootstrap replicate of conv.csv (blocks of 40 requests)", ... Empty when
// the seed changes nothing (offline fixed lengths; a trace replayed as recorded).
std::string seed_variation(const WorkloadSpec& spec);
// Parses a --resample spec: the block length (0: the default ceil(sqrt(n))). Throws UserError
// naming `option`.
int32_t parse_resample_block(std::string_view spec, std::string_view option);
// The workload of `spec` as a RequestSource, read one request at a time (streaming runs):
// the requests build_workload(spec) would hold, in order, and each request's prompt-block hashes (build_workload's
// prefix_blocks, from hash_ids or --prefix) through the source's prefix_hashes(). A trace is read as the run goes
// (TraceStream, sim/workload/trace_reader.h: file order, which must be time order; its warnings come from
// the source's warnings() once it ran out). In-memory columns get a UserError saying
// "--streaming with ...: not supported". Other errors as build_workload's.
std::unique_ptr<RequestSource> stream_workload(const WorkloadSpec& spec);
// build_workload(spec).requests. Callers that face a user should call build_workload and print
// its warnings.
Workload make_workload(const WorkloadSpec& spec);

// read_trace_detailed(path, max_requests, speedup).requests: arrival offsets relative to the
// earliest request and divided by `speedup`; at most `max_requests` are read (0 = all).
Workload read_trace(const std::filesystem::path& path, int64_t max_requests, double speedup);

}  // namespace batchsim
