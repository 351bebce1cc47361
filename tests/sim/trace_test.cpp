// Tests of the trace readers: the real traces in experiments/data/traces (counts, first and last
// rows, whole-file token sums computed independently with Python), and small hand-written files
// for every error path and every adjustment (unsorted rows, zero lengths, date rollovers).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "hwmodel/base/error.h"
#include "sim/workload/trace_reader.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::scratch_dir;
using testing::user_error_of;
using testing::write_text_file;

std::filesystem::path trace_path(const std::string& relative) {
  return testing::data_file(testing::traces_dir(), relative);
}

struct Sums {
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

Sums sums(const Workload& w) {
  Sums s;
  for (const Request& r : w) {
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
  }
  return s;
}

void expect_well_formed(const Workload& w) {
  ASSERT_FALSE(w.empty());
  EXPECT_EQ(w.front().arrival, SimTime::zero());
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(w[i].id, static_cast<RequestId>(i));
    ASSERT_GE(w[i].prompt_tokens, 1);
    ASSERT_GE(w[i].output_tokens, 1);
    if (i > 0) {
      ASSERT_GE(w[i].arrival, w[i - 1].arrival) << "request " << i;
    }
  }
}

// dir/name in a fresh scratch folder of its own.
std::filesystem::path write_file(const std::string& name, const std::string& contents) {
  return write_text_file(scratch_dir("trace_test_" + name), name, contents);
}

// ---- the real traces -------------------------------------------------------------------------

TEST(RealTraces, AzureCode) {
  const TraceReadResult t = read_trace_detailed(trace_path("azure-llm-2023/code.csv"), 0, 1.0);
  EXPECT_EQ(t.format, TraceFormat::kAzureCsv);
  ASSERT_EQ(t.requests.size(), 8819u);
  EXPECT_EQ(t.rows_read, 8819);
  expect_well_formed(t.requests);
  // 2023-11-16 18:17:03.9799600,4808,10 then 18:17:04.0319600,3180,8: exactly 52 ms apart.
  EXPECT_EQ(t.requests[0].prompt_tokens, 4808);
  EXPECT_EQ(t.requests[0].output_tokens, 10);
  EXPECT_EQ(t.requests[1].arrival.ns(), 52'000'000);
  EXPECT_EQ(t.requests[1].prompt_tokens, 3180);
  // Last row 19:14:19.9280160,549,173: 57 min 15.948056 s after the first, to the ns.
  EXPECT_EQ(t.requests.back().arrival.ns(), 3'435'948'056'000);
  EXPECT_EQ(t.requests.back().prompt_tokens, 549);
  EXPECT_EQ(t.requests.back().output_tokens, 173);
  const Sums s = sums(t.requests);
  EXPECT_EQ(s.prompt_tokens, 18'059'974);
  EXPECT_EQ(s.output_tokens, 245'896);
  EXPECT_EQ(t.rows_out_of_order, 0);
  EXPECT_EQ(t.rows_prompt_clamped + t.rows_output_clamped, 0);
  EXPECT_TRUE(t.warnings.empty());
  EXPECT_TRUE(t.prefix_blocks.empty());
}

TEST(RealTraces, AzureConversation) {
  const TraceReadResult t = read_trace_detailed(trace_path("azure-llm-2023/conv.csv"), 0, 1.0);
  ASSERT_EQ(t.requests.size(), 19'366u);
  expect_well_formed(t.requests);
  EXPECT_EQ(t.requests[0].prompt_tokens, 374);
  EXPECT_EQ(t.requests[0].output_tokens, 44);
  EXPECT_EQ(t.requests[1].arrival.ns(), 4'314'579'000);  // 18:15:50.9951690 − 18:15:46.6805900
  EXPECT_EQ(t.requests.back().arrival.ns(), 3'501'721'937'000);
  const Sums s = sums(t.requests);
  EXPECT_EQ(s.prompt_tokens, 22'361'870);  // mean 1,155 as data/README.md says
  EXPECT_EQ(s.output_tokens, 4'088'665);   // mean 211
  EXPECT_TRUE(t.warnings.empty());
}

TEST(RealTraces, MooncakeConversationWithPrefixHashes) {
  const TraceReadResult t = read_trace_detailed(trace_path("mooncake-fast25/conversation.jsonl"), 0, 1.0);
  EXPECT_EQ(t.format, TraceFormat::kMooncakeJsonl);
  ASSERT_EQ(t.requests.size(), 12'031u);
  expect_well_formed(t.requests);
  EXPECT_EQ(t.requests[0].prompt_tokens, 6758);
  EXPECT_EQ(t.requests[0].output_tokens, 500);
  EXPECT_EQ(t.requests.back().arrival.ns(), 3'536'999'000'000);  // timestamp 3536999 ms
  EXPECT_EQ(t.requests.back().prompt_tokens, 20774);
  EXPECT_EQ(t.requests.back().output_tokens, 508);
  const Sums s = sums(t.requests);
  EXPECT_EQ(s.prompt_tokens, 144'793'823);
  EXPECT_EQ(s.output_tokens, 4'122'048);

  const PrefixBlockHashes& blocks = t.prefix_blocks;
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(blocks.block_tokens, 512);
  ASSERT_EQ(blocks.offsets.size(), t.requests.size() + 1);
  EXPECT_EQ(blocks.hashes.size(), 288'500u);
  // Request 0's ids are 0..13; request 1 shares block 0 (the system prompt) and then 14, 15...
  const std::span<const uint64_t> first = blocks.of(0);
  ASSERT_EQ(first.size(), 14u);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], i);
  EXPECT_EQ(blocks.of(1)[0], 0u);
  EXPECT_EQ(blocks.of(1)[1], 14u);
  // One hash per started 512-token block, on every row.
  for (const Request& r : t.requests) {
    ASSERT_EQ(static_cast<int64_t>(blocks.of(r.id).size()), (r.prompt_tokens + 511) / 512);
  }
}

TEST(RealTraces, MooncakeSynthetic) {
  const Workload w = read_trace(trace_path("mooncake-fast25/synthetic.jsonl"), 0, 1.0);
  ASSERT_EQ(w.size(), 3993u);
  expect_well_formed(w);
  EXPECT_EQ(w[0].prompt_tokens, 40160);
  EXPECT_EQ(w[0].output_tokens, 6);
  EXPECT_EQ(w.back().arrival.ns(), 1'022'025'000'000);
}

TEST(RealTraces, MaxRequestsTakesTheFirstRows) {
  const Workload all = read_trace(trace_path("azure-llm-2023/conv.csv"), 0, 1.0);
  const Workload first = read_trace(trace_path("azure-llm-2023/conv.csv"), 100, 1.0);
  ASSERT_EQ(first.size(), 100u);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].arrival, all[i].arrival);
    EXPECT_EQ(first[i].prompt_tokens, all[i].prompt_tokens);
    EXPECT_EQ(first[i].output_tokens, all[i].output_tokens);
  }
  // More than the trace holds: all of it.
  EXPECT_EQ(read_trace(trace_path("azure-llm-2023/conv.csv"), 50'000, 1.0).size(), all.size());
  // JSONL's first line is data, not a header: max 1 is that line.
  const TraceReadResult one = read_trace_detailed(trace_path("mooncake-fast25/conversation.jsonl"), 1, 1.0);
  ASSERT_EQ(one.requests.size(), 1u);
  EXPECT_EQ(one.requests[0].prompt_tokens, 6758);
  EXPECT_EQ(one.prefix_blocks.offsets.size(), 2u);
}

TEST(RealTraces, SpeedupDividesOffsets) {
  const Workload base = read_trace(trace_path("azure-llm-2023/code.csv"), 0, 1.0);
  const Workload fast = read_trace(trace_path("azure-llm-2023/code.csv"), 0, 4.0);
  const Workload slow = read_trace(trace_path("azure-llm-2023/code.csv"), 0, 0.5);
  ASSERT_EQ(fast.size(), base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    ASSERT_EQ(fast[i].arrival.ns(), std::llround(base[i].arrival.ns() / 4.0));
    ASSERT_EQ(slow[i].arrival.ns(), base[i].arrival.ns() * 2);
    ASSERT_EQ(fast[i].prompt_tokens, base[i].prompt_tokens);
  }
  EXPECT_EQ(fast[1].arrival.ns(), 13'000'000);
}

TEST(RealTraces, TraceLengthsWithPoissonArrivals) {
  // "Azure conversation lengths at Poisson rate 5": lengths are the trace's, in its order;
  // arrivals are exactly those of a synthetic poisson:5 workload of the same seed.
  WorkloadSpec spec;
  spec.trace = trace_path("azure-llm-2023/conv.csv");
  spec.arrival = "poisson:5";
  spec.num_requests = 1000;
  spec.seed = 17;
  const BuiltWorkload mixed = build_workload(spec);
  const Workload trace = read_trace(spec.trace, 1000, 1.0);
  WorkloadSpec synthetic;
  synthetic.arrival = "poisson:5";
  synthetic.num_requests = 1000;
  synthetic.seed = 17;
  const Workload poisson = make_workload(synthetic);
  ASSERT_EQ(mixed.requests.size(), 1000u);
  expect_well_formed(mixed.requests);
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(mixed.requests[i].prompt_tokens, trace[i].prompt_tokens);
    ASSERT_EQ(mixed.requests[i].output_tokens, trace[i].output_tokens);
    ASSERT_EQ(mixed.requests[i].arrival, poisson[i].arrival);
  }
  EXPECT_EQ(mixed.description, "1000 requests: poisson:5 arrivals, seed 17; lengths from " +
                                   spec.trace.filename().string() + " (azure-csv)");

  spec.trace_speedup = 2.0;  // meaningless with generated arrivals: refused, not ignored
  EXPECT_NE(user_error_of([&] { make_workload(spec); }).find("--trace-speedup: 2 scales"), std::string::npos);
}

TEST(RealTraces, MakeWorkloadReplaysTraceTimestampsByDefault) {
  WorkloadSpec spec;
  spec.trace = trace_path("mooncake-fast25/conversation.jsonl");
  spec.num_requests = 500;
  spec.trace_speedup = 2.0;
  const BuiltWorkload built = build_workload(spec);
  const Workload direct = read_trace(spec.trace, 500, 2.0);
  ASSERT_EQ(built.requests.size(), 500u);
  for (size_t i = 0; i < direct.size(); ++i) ASSERT_EQ(built.requests[i].arrival, direct[i].arrival);
  EXPECT_EQ(built.prefix_blocks.offsets.size(), 501u);
  EXPECT_EQ(built.description,
            "500 requests: arrivals / 2 and lengths from " + spec.trace.filename().string() + " (mooncake-jsonl)");
  spec.arrival = "trace";
  EXPECT_EQ(make_workload(spec).back().arrival, direct.back().arrival);
}

// ---- formats, on small files -----------------------------------------------------------------

TEST(TraceFormats, AzureDatesRollOverDaysMonthsYearsAndLeapDays) {
  const auto path = write_file("rollover.csv",
                               "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                               "2023-12-31 23:59:59.5,10,1\r\n"
                               "2024-01-01 00:00:00.25,10,1\r\n"
                               "2024-02-28T23:59:59.000000001,10,1\r\n"
                               "2024-03-01 00:00:00Z,10,1\r\n"
                               "2024-03-01 01:00:00.5+01:00,10,1\r\n");
  const Workload w = read_trace(path, 0, 1.0);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w[1].arrival.ns(), 750'000'000);
  // 2024 is a leap year: Feb 28 23:59:59 → Mar 1 00:00:00 is a day and one second.
  const int64_t to_feb28_ns = (31 + 27) * 86'400'000'000'000LL + 86'399'500'000'000LL;
  EXPECT_EQ(w[2].arrival.ns(), to_feb28_ns + 1);
  EXPECT_EQ(w[3].arrival.ns(), to_feb28_ns + 86'401'000'000'000LL);
  EXPECT_EQ(w[4].arrival.ns(), w[3].arrival.ns() + 500'000'000);  // 01:00 at +01:00 is 00:00Z
}

TEST(TraceFormats, GenericCsvWithBomBlankLinesAndSpaces) {
  const auto path = write_file("generic.csv",
                               "\xEF\xBB\xBF"
                               "arrival_s,prompt_tokens,output_tokens\n"
                               "\n"
                               "100.5, 20, 3\n"
                               "101.0,30,4\n"
                               "\n");
  const TraceReadResult t = read_trace_detailed(path, 0, 1.0);
  EXPECT_EQ(t.format, TraceFormat::kGenericCsv);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].arrival.ns(), 0);  // offsets from the first request
  EXPECT_EQ(t.requests[1].arrival.ns(), 500'000'000);
  EXPECT_EQ(t.requests[0].prompt_tokens, 20);
  EXPECT_EQ(t.requests[1].output_tokens, 4);
}

TEST(TraceFormats, UnsortedRowsAreSortedStablyCountedAndReported) {
  const auto path = write_file("unsorted.csv",
                               "arrival_s,prompt_tokens,output_tokens\n"
                               "5,1,1\n"
                               "3,2,1\n"  // out of order
                               "5,3,1\n"
                               "3,4,1\n"  // out of order; ties with the row of 2 tokens
                               "9,5,1\n");
  const TraceReadResult t = read_trace_detailed(path, 0, 1.0);
  EXPECT_EQ(t.rows_out_of_order, 2);
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("2 rows have a timestamp earlier than the row above"), std::string::npos);
  expect_well_formed(t.requests);
  std::vector<int32_t> prompts;
  for (const Request& r : t.requests) prompts.push_back(r.prompt_tokens);
  EXPECT_EQ(prompts, (std::vector<int32_t>{2, 4, 1, 3, 5}));  // ties keep file order
  EXPECT_EQ(t.requests[2].arrival.ns(), 2'000'000'000);       // relative to the earliest (3 s)
}

TEST(TraceFormats, UnsortedMooncakeRowsCarryTheirHashes) {
  const auto path =
      write_file("unsorted.jsonl", R"({"timestamp": 20, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]})"
                                   "\n"
                                   R"({"timestamp": 10, "input_length": 100, "output_length": 6, "hash_ids": [9]})"
                                   "\n");
  const TraceReadResult t = read_trace_detailed(path, 0, 1.0);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].prompt_tokens, 100);
  EXPECT_EQ(t.requests[1].arrival.ns(), 10'000'000);
  ASSERT_EQ(t.prefix_blocks.of(0).size(), 1u);
  EXPECT_EQ(t.prefix_blocks.of(0)[0], 9u);
  ASSERT_EQ(t.prefix_blocks.of(1).size(), 2u);
  EXPECT_EQ(t.prefix_blocks.of(1)[1], 8u);
}

TEST(TraceFormats, MooncakeLinesOutsideTheFastSubsetReadTheSame) {
  // Line 1 is the flat subset the fast scanner reads. Lines 2-5 make it decline part-way (a
  // string value after hash_ids were scanned, an escaped key, a nested object, an integral
  // float length) and fall back to nlohmann::json; the result must be as if they were flat,
  // with hash ids neither lost nor doubled.
  const auto path = write_file(
      "mixed.jsonl", R"({"timestamp": 1.5, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "turn": 3})"
                     "\n"
                     R"({"timestamp": 2, "input_length": 700, "output_length": 6, "hash_ids": [1, 3], "note": "x"})"
                     "\n"
                     R"({"timestamp": 3, "input_l\u0065ngth": 800, "output_length": 7, "hash_ids": [4]})"
                     "\n"
                     R"({ "timestamp" : 4 , "meta": {"a": [1]}, "input_length": 900, "output_length": 8 })"
                     "\n"
                     R"({"timestamp": 5e0, "input_length": 1000, "output_length": 9.0, "hash_ids": []})"
                     "\n");
  const TraceReadResult t = read_trace_detailed(path, 0, 1.0);
  ASSERT_EQ(t.requests.size(), 5u);
  const int64_t expected_ns[] = {0, 500'000, 1'500'000, 2'500'000, 3'500'000};  // from 1.5 ms
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.requests[i].arrival.ns(), expected_ns[i]) << i;
    EXPECT_EQ(t.requests[i].prompt_tokens, 600 + 100 * i) << i;
    EXPECT_EQ(t.requests[i].output_tokens, 5 + i) << i;
  }
  EXPECT_EQ(t.prefix_blocks.offsets, (std::vector<int64_t>{0, 2, 4, 5, 5, 5}));
  EXPECT_EQ(t.prefix_blocks.hashes, (std::vector<uint64_t>{1, 2, 1, 3, 4}));
}

TEST(TraceFormats, ZeroLengthsAreRaisedToOneCountedAndReported) {
  const auto path = write_file("zeros.csv",
                               "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:00:00.0,100,0\n"
                               "2023-11-16 18:00:01.0,0,5\n"
                               "2023-11-16 18:00:02.0,100,0\n");
  const TraceReadResult t = read_trace_detailed(path, 0, 1.0);
  ASSERT_EQ(t.requests.size(), 3u);  // nothing dropped
  EXPECT_EQ(t.requests[0].output_tokens, 1);
  EXPECT_EQ(t.requests[1].prompt_tokens, 1);
  EXPECT_EQ(t.requests[1].output_tokens, 5);
  EXPECT_EQ(t.rows_prompt_clamped, 1);
  EXPECT_EQ(t.rows_output_clamped, 2);
  ASSERT_EQ(t.warnings.size(), 2u);
  EXPECT_EQ(t.warnings[0], path.string() +
                               ": 1 of 3 requests have ContextTokens=0; given 1 prompt token (a "
                               "prefill needs one)");
  EXPECT_EQ(t.warnings[1], path.string() +
                               ": 2 of 3 requests have GeneratedTokens=0; given 1 output token "
                               "(the prefill samples one)");
  // build_workload passes them on.
  WorkloadSpec spec;
  spec.trace = path;
  EXPECT_EQ(build_workload(spec).warnings, t.warnings);
}

// ---- errors ----------------------------------------------------------------------------------

struct BadFile {
  const char* name;
  const char* contents;
  const char* error;  // after "<path>"
};

TEST(TraceErrors, MalformedLinesNameFileAndLine) {
  const BadFile cases[] = {
      {"fields.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n\n4,5\n", ":4: expected 3 fields, got 2"},
      {"many.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3,4\n", ":2: expected 3 fields, got 4"},
      {"arrival.csv", "arrival_s,prompt_tokens,output_tokens\nsoon,2,3\n", ":2: arrival_s \"soon\" is not a number"},
      {"tokens.csv", "arrival_s,prompt_tokens,output_tokens\n1,12a,3\n", ":2: prompt_tokens \"12a\" is not an integer"},
      {"negative.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,-3\n", ":2: output_tokens must be >= 0, got -3"},
      {"huge.csv", "arrival_s,prompt_tokens,output_tokens\n1,3000000000,3\n",
       ":2: prompt_tokens = 3000000000 is more than 2147483647 tokens"},
      {"date.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 10:00:00.0,1,1\n",
       ":2: TIMESTAMP \"2023-02-29 10:00:00.0\" is not a date and time like "
       "2023-11-16 18:17:03.9799600"},
      {"time.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 24:00:00.0,1,1\r\n",
       ":2: TIMESTAMP \"2023-11-16 24:00:00.0\" is not a date"},
      // A date already read (and remembered, DateMemo) with a time that is not one.
      {"second_time.csv",
       "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00.0,1,1\n2023-11-16 10:60:00.0,1,1\n",
       ":3: TIMESTAMP \"2023-11-16 10:60:00.0\" is not a date"},
      {"second_date.csv",
       "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00.0,1,1\n2023-11-16X10:00:01.0,1,1\n",
       ":3: TIMESTAMP \"2023-11-16X10:00:01.0\" is not a date"},
      {"digits.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00.1234567891,1,1\n", ":2: TIMESTAMP"},
      {"context.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00.0,x,1\n",
       ":2: ContextTokens \"x\" is not an integer"},
      {"json.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": 1,\n",
       ":2: not a JSON object: parse error"},
      {"missing.jsonl", "{\"timestamp\": 0, \"output_length\": 1}\n", ":1: missing \"input_length\""},
      {"type.jsonl", "{\"timestamp\": \"now\", \"input_length\": 5, \"output_length\": 1}\n",
       ":1: \"timestamp\" must be a number of ms, got \"now\""},
      {"length.jsonl", "{\"timestamp\": 0, \"input_length\": 5.5, \"output_length\": 1}\n",
       ":1: \"input_length\" must be an integer, got 5.5"},
      {"hashes.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": 3}\n",
       ":1: \"hash_ids\" must be an array, got 3"},
      {"ids.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, -2]}\n",
       ":1: \"hash_ids\" has a negative id -2"},
      {"neglen.jsonl", "{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 1}\n",
       ":1: input_length must be >= 0, got -5"},
      {"trailing.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1} x\n",
       ":1: not a JSON object: parse error"},
      {"leading_zero.jsonl", "{\"timestamp\": 01, \"input_length\": 5, \"output_length\": 1}\n",
       ":1: not a JSON object: parse error"},
      {"array.jsonl", "[1, 2, 3]\n", ":1: unrecognised trace header \"[1, 2, 3]\""},
      {"header.csv", "time,prompt,output\n1,2,3\n",
       ":1: unrecognised trace header \"time,prompt,output\"; expected "
       "\"TIMESTAMP,ContextTokens,GeneratedTokens\" (Azure LLM inference CSV), "
       "\"arrival_s,prompt_tokens,output_tokens\" (generic CSV) or one JSON object per line "
       "(Mooncake JSONL)"},
      {"empty.csv", "", ": empty file, expected a trace header or a JSON line"},
      {"blank.csv", "\n\r\n  \n", ": empty file"},
      {"header_only.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", ": no requests in trace"},
  };
  for (const BadFile& c : cases) {
    const std::filesystem::path path = write_file(c.name, c.contents);
    const std::string message = user_error_of([&] { read_trace(path, 0, 1.0); });
    EXPECT_EQ(message.rfind(path.string() + c.error, 0), 0u) << c.name << ": " << message;
  }
}

// A user's own gzip-compressed trace reads exactly as the plain file, in every format, and a
// broken one is named with the line where reading stopped.
TEST(TraceFormats, GzipCompressedTracesReadAsThePlainFile) {
  const std::filesystem::path dir = scratch_dir("trace_test_gzip");
  const std::vector<std::pair<std::string, std::string>> traces = {
      {"azure.csv",
       "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,100,7\n"
       "2023-11-16 18:17:04.5000000,200,9\n"},
      {"generic.csv", "arrival_s,prompt_tokens,output_tokens\n0.5,10,3\n1.25,20,4\n2,30,5\n"},
      {"mooncake.jsonl",
       "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [1, 2]}\n"
       "{\"timestamp\": 30, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 3]}\n"}};
  for (const auto& [name, text] : traces) {
    const TraceReadResult plain = read_trace_detailed(write_text_file(dir, name, text), 0, 1.0);
    const TraceReadResult gz = read_trace_detailed(testing::write_gzip_file(dir, name + ".gz", text), 0, 1.0);
    EXPECT_EQ(gz.format, plain.format) << name;
    ASSERT_EQ(gz.requests.size(), plain.requests.size()) << name;
    for (size_t i = 0; i < plain.requests.size(); ++i) {
      EXPECT_EQ(gz.requests[i].arrival, plain.requests[i].arrival) << name;
      EXPECT_EQ(gz.requests[i].prompt_tokens, plain.requests[i].prompt_tokens) << name;
      EXPECT_EQ(gz.requests[i].output_tokens, plain.requests[i].output_tokens) << name;
    }
    EXPECT_EQ(gz.prefix_blocks.hashes, plain.prefix_blocks.hashes) << name;
  }
  // Errors in a compressed trace name the file and the line, as in a plain one.
  const auto bad = testing::write_gzip_file(dir, "bad.csv.gz", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n4,5\n");
  EXPECT_EQ(user_error_of([&] { read_trace(bad, 0, 1.0); }), bad.string() + ":3: expected 3 fields, got 2");
  // A file that is not gzip at all but named .gz is read as text (zlib looks at the bytes).
  const auto plain_named_gz = write_text_file(dir, "plain.csv.gz", traces[1].second);
  EXPECT_EQ(read_trace(plain_named_gz, 0, 1.0).size(), 3u);
}

TEST(TraceErrors, MaxRequestsStopsBeforeALaterBadLine) {
  const auto path = write_file("late_bad.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n2,3,4\ngarbage\n");
  EXPECT_EQ(read_trace(path, 2, 1.0).size(), 2u);
  EXPECT_NE(user_error_of([&] { read_trace(path, 3, 1.0); }).find(":4: expected 3 fields, got 1"), std::string::npos);
}

TEST(TraceErrors, UnreadableFilesAndBadArguments) {
  const std::filesystem::path dir = scratch_dir("trace_test_unreadable");
  EXPECT_EQ(user_error_of([&] { read_trace(dir / "nope.csv", 0, 1.0); }),
            (dir / "nope.csv").string() + ": no such trace file");
  EXPECT_EQ(user_error_of([&] { read_trace(dir, 0, 1.0); }), dir.string() + ": is a directory, not a trace file");
  // An endless device is refused before reading: /dev/zero holds no newline, so reading it
  // line by line would only end when memory does.
  if (std::filesystem::is_character_file("/dev/zero")) {
    EXPECT_EQ(user_error_of([&] { read_trace("/dev/zero", 0, 1.0); }), "/dev/zero: is a device, not a trace file");
  }
  const auto ok = write_file("ok.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n");
  EXPECT_EQ(user_error_of([&] { read_trace(ok, 0, 0.0); }), "--trace-speedup: must be a number > 0, got 0");
  EXPECT_EQ(user_error_of([&] { read_trace(ok, 0, -2.0); }), "--trace-speedup: must be a number > 0, got -2");
  EXPECT_EQ(user_error_of([&] { read_trace(ok, 0, std::nan("")); }), "--trace-speedup: must be a number > 0, got nan");
  EXPECT_EQ(user_error_of([&] { read_trace(ok, -1, 1.0); }), "--num-requests: must be >= 0 (0 = all), got -1");
}

// ---- columns in memory (the Python module's DataFrame workloads) -----------------------------

// The same rows as columns and as a generic CSV file read the same: the order, clamping,
// max_tokens and priority handling, the counts and the warnings (but for the name they carry).
TEST(TraceColumnsInMemory, ReadAsTheSameRowsInAGenericCsv) {
  TraceColumns c;
  c.arrival_s = {5.0, 3.0, 5.0, 3.5, 9.25};
  c.prompt_tokens = {10, 0, 30, 40, 50};
  c.output_tokens = {1, 2, 0, 4, 5};
  c.max_tokens = {8, 8, 16, 16, 32};
  c.priority = {0, 2, -1, 0, 7};
  const auto path = write_file("columns.csv",
                               "arrival_s,prompt_tokens,output_tokens,max_tokens,priority\n"
                               "5,10,1,8,0\n3,0,2,8,2\n5,30,0,16,-1\n3.5,40,4,16,0\n9.25,50,5,32,7\n");
  const TraceReadResult file = read_trace_detailed(path, 0, 2.0);
  const TraceReadResult mem = read_trace_columns(c, "workload", 0, 2.0);
  ASSERT_EQ(mem.requests.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(mem.requests[i].arrival, file.requests[i].arrival) << i;
    EXPECT_EQ(mem.requests[i].prompt_tokens, file.requests[i].prompt_tokens) << i;
    EXPECT_EQ(mem.requests[i].output_tokens, file.requests[i].output_tokens) << i;
    EXPECT_EQ(mem.requests[i].priority, file.requests[i].priority) << i;
  }
  EXPECT_EQ(mem.max_tokens, file.max_tokens);
  EXPECT_TRUE(mem.priority_column);
  EXPECT_EQ(mem.rows_out_of_order, 2);
  EXPECT_EQ(mem.rows_prompt_clamped, 1);
  EXPECT_EQ(mem.rows_output_clamped, 1);
  // The earliest row (3 s) is time 0; 5 s at 2x speed is 1 s later.
  EXPECT_EQ(mem.requests[0].prompt_tokens, 1);  // the 3 s row, its 0 raised to 1
  EXPECT_EQ(mem.requests[2].arrival.ns(), 1'000'000'000);
  ASSERT_EQ(mem.warnings.size(), file.warnings.size());
  for (size_t i = 0; i < mem.warnings.size(); ++i) {
    std::string expected = file.warnings[i];
    expected.replace(0, path.string().size(), "workload");
    EXPECT_EQ(mem.warnings[i], expected);
  }
  // Without the optional columns there are none.
  c.max_tokens.clear();
  c.priority.clear();
  const TraceReadResult bare = read_trace_columns(c, "workload", 3, 1.0);
  EXPECT_EQ(bare.requests.size(), 3u);  // max_requests: the first rows
  EXPECT_TRUE(bare.max_tokens.empty());
  EXPECT_FALSE(bare.priority_column);
}

TEST(TraceColumnsInMemory, ErrorsNameTheWorkloadAndTheRow) {
  TraceColumns c;
  c.arrival_s = {0.0, 1.0, 2.0};
  c.prompt_tokens = {1, -1, 3};
  c.output_tokens = {1, 2, 3};
  EXPECT_EQ(user_error_of([&] { read_trace_columns(c, "workload", 0, 1.0); }).rfind("workload row 1: ", 0), 0u);
  c.prompt_tokens = {1, 2};
  EXPECT_EQ(user_error_of([&] { read_trace_columns(c, "frame", 0, 1.0); }),
            "frame: prompt_tokens has 2 values, arrival_s has 3");
  c.prompt_tokens = {1, 2, 3};
  c.arrival_s[2] = std::nan("");
  EXPECT_EQ(user_error_of([&] { read_trace_columns(c, "workload", 0, 1.0); }).rfind("workload row 2: arrival_s", 0),
            0u);
}

// ---- streaming: one request at a time --------------------------------------------------------

namespace streamed {

void expect_same_requests(const Workload& want, const Workload& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].id, got[i].id) << what << " request " << i;
    ASSERT_EQ(want[i].arrival, got[i].arrival) << what << " request " << i;
    ASSERT_EQ(want[i].prompt_tokens, got[i].prompt_tokens) << what << " request " << i;
    ASSERT_EQ(want[i].output_tokens, got[i].output_tokens) << what << " request " << i;
    ASSERT_EQ(want[i].max_tokens, got[i].max_tokens) << what << " request " << i;
    ASSERT_EQ(want[i].priority, got[i].priority) << what << " request " << i;
  }
}

// Every request of a TraceStream, its max_tokens column apart (as TraceReadResult keeps it).
Workload drain(TraceStream& stream, std::vector<int32_t>& max_tokens) {
  Workload w;
  while (std::optional<TraceStream::Row> row = stream.next()) {
    w.push_back(row->request);
    if (stream.has_max_tokens_column()) max_tokens.push_back(row->max_tokens);
  }
  EXPECT_FALSE(stream.next().has_value());  // and stays ended
  return w;
}

}  // namespace streamed

TEST(TraceStreams, ReadTheRequestsOfTheWholeFileReaderRowByRow) {
  // Real traces (the Azure ones), JSONL (the Mooncake format, without hash_ids), a generic CSV with
  // both optional columns, zero lengths, a BOM, CRLF and blank lines, gzip, and each with a
  // row limit and a speedup.
  const auto generic = write_file("stream_generic.csv",
                                  "\xEF\xBB\xBF"
                                  "arrival_s,prompt_tokens,output_tokens,priority,max_tokens\r\n"
                                  "10.5,100,0,2,7\r\n"
                                  "\r\n"
                                  "10.5,0,20,-1,30\r\n"
                                  " 12.25 , 64 , 8 , 0 , 8 \r\n"
                                  "40,1,1,5,1\r\n");
  // JSONL without hash_ids, a priority on one line only, and a line outside the fast subset.
  const auto jsonl =
      write_file("stream.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}\n"
                 "{\"timestamp\": 1000, \"input_length\": 0, \"output_length\": 3, \"priority\": 2}\n"
                 "{\"timestamp\": 1500.5, \"input_length\": 7, \"output_length\": 2, \"note\": \"x\"}\n");
  struct Case {
    std::filesystem::path path;
    int64_t max_requests;
    double speedup;
  };
  const std::vector<Case> cases = {{trace_path("azure-llm-2023/code.csv"), 0, 1.0},
                                   {trace_path("azure-llm-2023/conv.csv"), 500, 3.0},
                                   {jsonl, 0, 0.5},
                                   {jsonl, 1, 1.0},
                                   {generic, 0, 1.0},
                                   {generic, 3, 2.0},
                                   {trace_path("azure-llm-2023/code.csv.gz"), 0, 1.0}};
  for (const Case& c : cases) {
    const std::string what = c.path.filename().string() + " max " + std::to_string(c.max_requests);
    const TraceReadResult whole = read_trace_detailed(c.path, c.max_requests, c.speedup);
    TraceStream stream(c.path, c.max_requests, c.speedup);
    EXPECT_EQ(stream.format(), whole.format) << what;
    std::vector<int32_t> max_tokens;
    const Workload rows = streamed::drain(stream, max_tokens);
    streamed::expect_same_requests(whole.requests, rows, what);
    EXPECT_EQ(max_tokens, whole.max_tokens) << what;
    EXPECT_EQ(stream.priority_column(), whole.priority_column) << what;
    EXPECT_EQ(stream.warnings(), whole.warnings) << what;
  }
  // The generic file's adjustments are reported as the whole-file reader words them.
  TraceStream stream(generic, 0, 1.0);
  std::vector<int32_t> max_tokens;
  streamed::drain(stream, max_tokens);
  EXPECT_EQ(stream.warnings().size(), 2u);
}

TEST(TraceStreams, RefuseWhatNeedsTheWholeFileNamingTheLine) {
  const auto unsorted = write_file("stream_unsorted.csv",
                                   "arrival_s,prompt_tokens,output_tokens\n0,10,10\n2,10,10\n\n1,10,10\n3,10,10\n");
  TraceStream stream(unsorted, 0, 1.0);
  EXPECT_TRUE(stream.next().has_value());
  // The row ahead is read with the one before it: the error comes as the run reaches it.
  EXPECT_EQ(user_error_of([&] {
              while (stream.next()) {
              }
            }),
            unsorted.string() +
                ":5: timestamp earlier than the row above: --streaming reads a trace in file order "
                "and cannot sort it; sort the file by time, or run without --streaming");
  // Only the rows taken count: the first two of the same file stream.
  TraceStream first_two(unsorted, 2, 1.0);
  std::vector<int32_t> unused;
  EXPECT_EQ(streamed::drain(first_two, unused).size(), 2u);

  // Whether rows carry hash_ids is decided by the first row.
  const auto late =
      write_file("stream_late_hashes.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n"
                 "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [7, 8]}\n");
  TraceStream late_stream(late, 0, 1.0);
  EXPECT_EQ(late_stream.prefix_block_tokens(), 0);
  EXPECT_EQ(user_error_of([&] { late_stream.next(); }),
            late.string() +
                ":2: hash_ids here but not on the first row: --streaming decides from the first row "
                "whether requests carry prompt-block hashes; give the first row hash_ids, or run "
                "without --streaming");
  const auto empty = write_file("stream_empty.csv", "arrival_s,prompt_tokens,output_tokens\n\n");
  EXPECT_EQ(user_error_of([&] { TraceStream s(empty, 0, 1.0); }), empty.string() + ": no requests in trace");
  const auto bad_later = write_file("stream_bad.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,1,1\n2,x,1\n");
  TraceStream bad(bad_later, 0, 1.0);
  EXPECT_TRUE(bad.next().has_value());
  EXPECT_EQ(user_error_of([&] { bad.next(); }), bad_later.string() + ":4: prompt_tokens \"x\" is not an integer");
  EXPECT_EQ(user_error_of([&] { TraceStream s(bad_later, 0, 0.0); }), "--trace-speedup: must be a number > 0, got 0");
  EXPECT_EQ(user_error_of([&] { TraceStream s(bad_later, -1, 1.0); }),
            "--num-requests: must be >= 0 (0 = all), got -1");
}

TEST(TraceStreams, HashIdsComeWithTheirRows) {
  // The real Mooncake traces, and rows without hash_ids after the first (empty lists, as the
  // whole-file reader gives them).
  const auto mixed =
      write_file("stream_mixed_hashes.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 2, \"hash_ids\": [1, 2, 3]}\n"
                 "{\"timestamp\": 5, \"input_length\": 40, \"output_length\": 2}\n"
                 "{\"timestamp\": 9, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 9]}\n");
  for (const auto& path :
       {trace_path("mooncake-fast25/conversation.jsonl"), trace_path("mooncake-fast25/synthetic.jsonl"), mixed}) {
    const TraceReadResult whole = read_trace_detailed(path, 0, 1.0);
    ASSERT_FALSE(whole.prefix_blocks.empty()) << path;
    TraceStream stream(path, 0, 1.0);
    EXPECT_EQ(stream.prefix_block_tokens(), whole.prefix_blocks.block_tokens) << path;
    size_t n = 0;
    while (std::optional<TraceStream::Row> row = stream.next()) {
      const auto want = whole.prefix_blocks.of(row->request.id);
      ASSERT_EQ(std::vector<uint64_t>(row->hashes.begin(), row->hashes.end()),
                std::vector<uint64_t>(want.begin(), want.end()))
          << path << " request " << row->request.id;
      ++n;
    }
    EXPECT_EQ(n, whole.requests.size()) << path;
  }
}

TEST(TraceStreams, AStreamedWorkloadIsTheBuiltOneWithEveryOverride) {
  // Trace timestamps with a speedup; trace lengths with Poisson arrivals; the spec's limits and
  // priorities replacing a trace's columns, with and without ignore_eos.
  const auto generic = write_file("stream_workload.csv",
                                  "arrival_s,prompt_tokens,output_tokens,max_tokens,priority\n"
                                  "0,100,50,40,1\n0.5,30,10,20,0\n0.75,64,300,128,3\n2,10,1,5,2\n");
  std::vector<WorkloadSpec> specs(9);
  specs[0].trace = trace_path("azure-llm-2023/conv.csv");
  specs[0].trace_speedup = 2.5;
  specs[1].trace = trace_path("azure-llm-2023/code.csv");
  specs[1].arrival = "poisson:3";
  specs[1].seed = 7;
  specs[1].num_requests = 800;
  specs[2].trace = generic;
  specs[3].trace = generic;
  specs[3].ignore_eos = true;
  specs[4].trace = generic;
  specs[4].max_tokens = "uniform:1:60";
  specs[4].priority = "uniform:0:3";
  specs[4].arrival = "gamma:2:3";
  specs[5].trace = trace_path("azure-llm-2023/code.csv.gz");
  specs[5].arrival = "trace";
  specs[6].trace = trace_path("mooncake-fast25/conversation.jsonl");  // hash_ids
  specs[7].trace = generic;                                           // --prefix on a trace
  specs[7].prefix = "groups:64:3";
  specs[7].seed = 5;
  specs[8].num_requests = 300;  // --prefix, synthetic
  specs[8].arrival = "poisson:4";
  specs[8].prefix = "shared:128";
  for (const WorkloadSpec& spec : specs) {
    const std::string what = spec.trace.filename().string() + " " + spec.arrival;
    const BuiltWorkload built = build_workload(spec);
    const std::unique_ptr<RequestSource> source = stream_workload(spec);
    Workload rows;
    EXPECT_EQ(source->prefix_block_tokens(), built.prefix_blocks.block_tokens) << what;
    while (std::optional<Request> r = source->next()) {
      rows.push_back(*r);
      if (built.prefix_blocks.empty()) continue;
      const auto want = built.prefix_blocks.of(r->id);
      const auto got = source->prefix_hashes();
      ASSERT_EQ(std::vector<uint64_t>(got.begin(), got.end()), std::vector<uint64_t>(want.begin(), want.end()))
          << what << " request " << r->id;
    }
    streamed::expect_same_requests(built.requests, rows, what);
    EXPECT_EQ(source->warnings(), built.warnings) << what;
  }
}

}  // namespace
}  // namespace batchsim
