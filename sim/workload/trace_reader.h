// batchsim — request-trace readers.
//
// A trace is a file of real requests: when each arrived and how many prompt and output tokens it
// had. The format is detected from the first line:
//
//   Azure LLM inference CSV   header `TIMESTAMP,ContextTokens,GeneratedTokens` (optionally
//                             `,priority`, as for the generic CSV); timestamps
//                             `2023-11-16 18:17:03.9799600` (up to 9 fractional digits, an
//                             optional `T` separator and `Z`/`±HH:MM` UTC offset), converted by
//                             full calendar arithmetic, so midnight, month and leap-day
//                             rollovers are exact. (Azure/AzurePublicDataset, Splitwise ISCA'24.)
//   generic CSV               header `arrival_s,prompt_tokens,output_tokens`; arrival in seconds.
//                             An optional fourth column `max_tokens` (header
//                             `arrival_s,prompt_tokens,output_tokens,max_tokens`) is the client's
//                             limit on output tokens, an integer >= 1 on every row; output_tokens
//                             is then the length at which the model would have ended by itself
//                             (EOS), and build_workload ends the output at the smaller of the two.
//                             An optional column `priority` (any int32; smaller is served first
//                             by scheduling_policy=priority, as vLLM's request priority) may
//                             follow, before or after max_tokens.
//   Mooncake JSONL            no header: one JSON object per line with `timestamp` (ms),
//                             `input_length`, `output_length` and optionally `hash_ids` (one id
//                             per 512-token prompt block; equal ids = shared prefix), and
//                             optionally an integer `priority` (0 where a line has none).
//                             (kvcache-ai/Mooncake FAST'25 traces.)
//
// Reading streams line by line and stops after `max_requests` rows (0 = all), taken in file
// order. Blank lines are skipped; CRLF line ends and a UTF-8 byte-order mark are accepted.
// JSONL lines in Mooncake's flat shape are scanned directly; any other line is parsed by
// nlohmann::json (same result, ~10x slower), which also words every JSON error.
//
// Invariants of the result:
//   * requests are sorted by arrival; rows whose timestamps are out of file order are sorted
//     stably (ties keep file order) and counted in rows_out_of_order;
//   * arrivals are offsets from the EARLIEST request (so the first is at 0), divided by
//     `speedup` and rounded to the nearest ns (monotone, so the order survives); with speedup 1
//     they are exact;
//   * ids are 0..n-1 in that order, and prompt_tokens, output_tokens >= 1.
//
// Zero lengths: a row with 0 prompt tokens or 0 output tokens cannot be simulated as written (a
// prefill needs a token, and the prefill itself samples the first output token). Such rows are
// not dropped and not rejected: the length is raised to 1, the row is counted
// (rows_prompt_clamped / rows_output_clamped) and a warning says so. The shipped Azure 2023 and
// Mooncake traces have no such rows. Negative lengths are malformed lines.
//
// Errors are UserError naming the file, and the line for a malformed line:
//   "conv.csv:17: expected 3 fields, got 2".
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/workload/request.h"

namespace batchsim {

enum class TraceFormat { kAzureCsv, kGenericCsv, kMooncakeJsonl };
std::string_view trace_format_name(TraceFormat format);  // "azure-csv", "generic-csv", ...

struct TraceReadResult {
  Workload requests;
  TraceFormat format = TraceFormat::kGenericCsv;
  int64_t rows_read = 0;            // data rows read (== requests.size())
  int64_t rows_prompt_clamped = 0;  // prompt 0 raised to 1
  int64_t rows_output_clamped = 0;  // output 0 raised to 1
  int64_t rows_out_of_order = 0;    // rows earlier than the row above them; sorted stably
  PrefixBlockHashes prefix_blocks;  // Mooncake hash_ids, permuted along with the sort
  // With prefix_blocks: each request's line in the file, in `requests` order (for messages about
  // rows linked by their hashes, sim/workload/trace_sessions.h). Empty without hash_ids.
  std::vector<int64_t> lines;
  // A generic CSV's max_tokens column, one per request in `requests` order; empty without the
  // column. Kept apart from the requests, whose output_tokens stay the trace's EOS lengths, so
  // that a --max-tokens that overrides the column still ends outputs at EOS (build_workload).
  std::vector<int32_t> max_tokens;
  // Whether the trace gave priorities (a CSV `priority` column, or the key on any JSONL line);
  // they are in requests[i].priority, 0 where none was given.
  bool priority_column = false;
  std::vector<std::string> warnings;  // one line per kind of adjustment, naming the file
};

// Throws UserError for an unreadable file, an unknown header, a malformed line, an empty trace,
// max_requests < 0, or speedup not a finite number > 0.
TraceReadResult read_trace_detailed(const std::filesystem::path& path, int64_t max_requests, double speedup);

// A trace held in memory as columns instead of a file (the Python module's DataFrame or numpy
// workloads): the generic CSV's columns, one entry per request, in any order of arrival.
// max_tokens and priority are optional (empty: the column is absent).
struct TraceColumns {
  std::vector<double> arrival_s;
  std::vector<int64_t> prompt_tokens;
  std::vector<int64_t> output_tokens;
  std::vector<int64_t> max_tokens;
  std::vector<int64_t> priority;
};
// read_trace_detailed for such columns, with the same invariants, checks and warnings as a
// generic CSV of the same rows; errors name `name` and the row (0-based), e.g.
// "workload row 3: prompt_tokens must be >= 0, got -1". Also throws for columns of unequal
// length.
TraceReadResult read_trace_columns(const TraceColumns& columns, std::string_view name, int64_t max_requests,
                                   double speedup);

// A trace file read one request at a time, for streaming runs: memory does not grow with the
// file. The requests are those read_trace_detailed returns for a trace whose timestamps never
// go back in file order, row for row (ids, offsets from the first row, speedup, clamped
// lengths and their warnings, max_tokens and priority columns, Mooncake hash_ids). What needs
// the whole file is refused with a UserError naming the file and line: a row earlier than the
// row above (the exact reader sorts; a stream cannot), and hash_ids on a row when the first row
// had none (whether requests carry prompt-block hashes is decided before the run starts). The
// header and the first row are read at construction, so a bad file, an empty trace or a bad
// argument is reported before a run starts.
class TraceStream {
 public:
  TraceStream(const std::filesystem::path& path, int64_t max_requests, double speedup);
  ~TraceStream();
  TraceStream(TraceStream&&) noexcept;
  TraceStream& operator=(TraceStream&&) noexcept;

  struct Row {
    Request request;
    int32_t max_tokens = 0;            // the max_tokens column's value; 0 without the column
    std::span<const uint64_t> hashes;  // its hash_ids; valid until the next next()
  };
  // The next request in file order; nullopt after the last (or after max_requests).
  std::optional<Row> next();
  TraceFormat format() const;
  bool has_max_tokens_column() const;
  // Tokens per prompt-block hash (PrefixBlockHashes::block_tokens) when the trace's rows carry
  // hash_ids, decided by its first row; 0 when they do not.
  int32_t prefix_block_tokens() const;
  // Whether any row read so far gave a priority (a CSV's column: from the header on).
  bool priority_column() const;
  // TraceReadResult::warnings over the rows read so far: complete once next() ran out.
  std::vector<std::string> warnings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchsim
