// `batchsim run --streaming` end to end: the same requests.csv rows as the exact run (sorted by
// id: a streaming run writes them as requests settle), summary.json equal but for percentiles
// (within the stated relative error, which it states), the automatic switch and its notice,
// and clear refusals of what streaming cannot do yet.
#include "experiments/cli/cli.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::cli;
using testing::CliRun;

// The data rows of a requests.csv, sorted by id (the first column), and its header.
std::vector<std::string> rows_by_id(const fs::path& file, std::string& header) {
  std::istringstream in(testing::read_text_file(file));
  std::getline(in, header);
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  std::sort(rows.begin(), rows.end(), [](const std::string& a, const std::string& b) {
    return std::stoll(a.substr(0, a.find(','))) < std::stoll(b.substr(0, b.find(',')));
  });
  return rows;
}

// Runs `workload` exact and streaming (into scratch folder `name`) and checks everything the
// streaming run promises: the same rows, the same summary but for percentiles, which are within
// the relative error it states. Returns the streaming run.
CliRun expect_streaming_equals_exact(const std::vector<std::string>& workload, const std::string& name,
                                     size_t requests) {
  const auto dir = testing::scratch_dir(name);
  auto args = workload;
  args.insert(args.begin(), "run");
  auto exact_args = args, stream_args = args;
  exact_args.insert(exact_args.end(), {"--out", (dir / "exact").string()});
  stream_args.insert(stream_args.end(), {"--streaming", "--out", (dir / "stream").string()});
  const CliRun exact = cli(exact_args);
  const CliRun stream = cli(stream_args);
  EXPECT_EQ(exact.rc, 0) << exact.err;
  EXPECT_EQ(stream.rc, 0) << stream.err;
  EXPECT_THAT(stream.out, HasSubstr("streaming: percentiles from a DDSketch, within 1%"));
  EXPECT_THAT(exact.out, ::testing::Not(HasSubstr("DDSketch")));

  std::string exact_header, stream_header;
  const auto exact_rows = rows_by_id(dir / "exact" / "requests.csv", exact_header);
  const auto stream_rows = rows_by_id(dir / "stream" / "requests.csv", stream_header);
  EXPECT_EQ(exact_header, stream_header);
  EXPECT_EQ(exact_rows.size(), requests);
  EXPECT_EQ(exact_rows, stream_rows);  // every row, to the digit
  EXPECT_FALSE(fs::exists(dir / "stream" / "bench.json"));

  const auto e = nlohmann::json::parse(testing::read_text_file(dir / "exact" / "summary.json"));
  const auto s = nlohmann::json::parse(testing::read_text_file(dir / "stream" / "summary.json"));
  EXPECT_FALSE(e.contains("percentiles"));  // an exact run's file is as it was
  EXPECT_EQ(s["percentiles"]["method"], "ddsketch");
  EXPECT_EQ(s["percentiles"]["relative_error"], 0.01);
  for (const char* key : {"requests", "tokens", "throughput", "makespan_s", "iterations", "preemptions", "kv",
                          "bubble_fraction", "busy_fraction", "config"}) {
    EXPECT_EQ(e[key], s[key]) << key;
  }
  // Goodput is counted as requests settle: exact.
  EXPECT_EQ(e.contains("goodput"), s.contains("goodput"));
  if (e.contains("goodput")) {
    EXPECT_EQ(e["goodput"], s["goodput"]);
  }
  for (const auto& item : e["latency"].items()) {
    const std::string& metric = item.key();
    const auto& dist = item.value();
    const auto& got = s["latency"][metric];
    EXPECT_EQ(dist["count"], got["count"]) << metric;
    EXPECT_EQ(dist["max"], got["max"]) << metric;
    EXPECT_NEAR(dist["mean"].get<double>(), got["mean"].get<double>(), 1e-12 * dist["mean"].get<double>()) << metric;
    for (const char* q : {"p50", "p90", "p99"}) {
      const double want = dist[q].get<double>();
      EXPECT_LE(std::abs(got[q].get<double>() - want), (0.01 + 1e-9) * want) << metric << " " << q;
    }
  }
  // Whole-run shares are exact; the p99 requests' are unknown, and say so rather than read 0.
  EXPECT_EQ(e["latency_breakdown"]["queueing"]["share"], s["latency_breakdown"]["queueing"]["share"]);
  EXPECT_TRUE(s["latency_breakdown"]["queueing"]["share_of_p99_requests"].is_null());
  EXPECT_THAT(s["latency_breakdown"]["diagnosis"].get<std::string>(), HasSubstr("streaming"));
  return stream;
}

TEST(StreamingCli, SameRowsAndSummaryButPercentilesWithinTheirStatedError) {
  expect_streaming_equals_exact({"--num-requests",
                                 "400",
                                 "--arrival",
                                 "poisson:8",
                                 "--policy",
                                 "vllm",
                                 "--output-len",
                                 "capexp:128:512",
                                 "--prompt-len",
                                 "lognormal:400:0.8",
                                 "--priority",
                                 "uniform:0:2",
                                 "--replicas",
                                 "2",
                                 "--router",
                                 "least-outstanding",
                                 "--streaming-slots",
                                 "64",
                                 "--goodput",
                                 "ttft:300",
                                 "tpot:40"},
                                "streaming_cli_same", 400);
}

TEST(StreamingCli, ATraceIsReadAsTheRunGoesWithTheExactRunsRows) {
  // The shipped Azure code trace at 8x its speed (a backlog, rejections of over-long requests),
  // and a generic CSV with a zero output length, whose warning comes at the end of the run.
  const std::string azure = testing::data_file(testing::traces_dir(), "azure-llm-2023/code.csv").string();
  const CliRun replay = expect_streaming_equals_exact({"--trace", azure, "--trace-speedup", "8", "--num-requests",
                                                       "3000", "--policy", "sarathi", "--streaming-slots", "4096"},
                                                      "streaming_cli_trace", 3000);
  EXPECT_THAT(replay.err, HasSubstr("rejected"));                       // the same tally as the exact run
  EXPECT_THAT(replay.err, ::testing::Not(HasSubstr("requests have")));  // nothing clamped
  const fs::path generic = testing::write_text_file(testing::scratch_dir("streaming_cli_generic"), "g.csv",
                                                    "arrival_s,prompt_tokens,output_tokens,max_tokens\n"
                                                    "0,100,0,8\n0.01,50,40,30\n0.02,70,10,64\n");
  const CliRun small = expect_streaming_equals_exact(
      {"--trace", generic.string(), "--arrival", "poisson:50", "--max-tokens", "uniform:1:20", "--policy", "vllm"},
      "streaming_cli_generic_runs", 3);
  EXPECT_THAT(small.err, HasSubstr("g.csv: 1 of 3 requests have output_tokens=0; given 1 output token"));
}

TEST(StreamingCli, PromptBlockHashesStreamWithTheirRequests) {
  // Mooncake's hash_ids (the conversation trace shares long prefixes), replayed at 4x on two
  // SGLang replicas behind the prefix router; and --prefix groups on the vLLM preset's prefix
  // cache. Each hit or miss is in the requests' cached_tokens, which must match the exact run's.
  const std::string mooncake = testing::data_file(testing::traces_dir(), "mooncake-fast25/conversation.jsonl").string();
  const CliRun trace =
      expect_streaming_equals_exact({"--trace", mooncake, "--num-requests", "2000", "--trace-speedup", "4", "--policy",
                                     "sglang", "--replicas", "2", "--router", "prefix", "--streaming-slots", "512"},
                                    "streaming_cli_mooncake", 2000);
  EXPECT_THAT(trace.out, HasSubstr("prefix cache: "));
  const CliRun groups = expect_streaming_equals_exact({"--num-requests", "600", "--arrival", "poisson:6", "--prefix",
                                                       "groups:1024:3", "--policy", "vllm", "--streaming-slots", "64"},
                                                      "streaming_cli_prefix_groups", 600);
  EXPECT_THAT(groups.out, HasSubstr("prefix cache: "));
}

TEST(StreamingCli, RefusesWhatItCannotDoYetNamingTheOption) {
  const std::vector<std::string> base = {"run", "--streaming", "--num-requests", "20"};
  const auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return cli_error_of(args);
  };
  EXPECT_THAT(with({"--max-concurrency", "4"}), HasSubstr("--streaming with --max-concurrency: not supported yet"));
  EXPECT_THAT(with({"--prefill-replicas", "1", "--decode-replicas", "1"}),
              HasSubstr("--streaming with --prefill-replicas/--decode-replicas: not supported yet"));
  EXPECT_THAT(with({"--chrome-trace", "t.json"}), HasSubstr("--streaming with --chrome-trace: not supported yet"));
  // A trace streams, but not one that needs sorting, or whose first row decided against hashes.
  const fs::path unsorted = testing::write_text_file(testing::scratch_dir("streaming_cli_unsorted"), "t.csv",
                                                     "arrival_s,prompt_tokens,output_tokens\n1,10,5\n0,10,5\n");
  EXPECT_THAT(with({"--trace", unsorted.string()}), HasSubstr("t.csv:3: timestamp earlier than the row above"));
  const fs::path late = testing::write_text_file(testing::scratch_dir("streaming_cli_late_hashes"), "late.jsonl",
                                                 "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n"
                                                 "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 2, "
                                                 "\"hash_ids\": [7, 8]}\n");
  EXPECT_THAT(with({"--trace", late.string()}), HasSubstr("late.jsonl:2: hash_ids here but not on the first row"));
  // A Mooncake trace's hash_ids and --prefix exclude each other, as in exact mode.
  const std::string mooncake = testing::data_file(testing::traces_dir(), "mooncake-fast25/synthetic.jsonl").string();
  EXPECT_THAT(with({"--trace", mooncake, "--prefix", "shared:64"}), HasSubstr("brings its own prompt-block hashes"));
  EXPECT_THAT(with({"--no-streaming"}), HasSubstr("--streaming, --no-streaming: give one or the other"));
  EXPECT_THAT(with({"--streaming-slots", "0"}), HasSubstr("--streaming-slots: must be >= 1"));
  EXPECT_THAT(with({"--arrival", "offline", "--streaming-slots", "5"}), HasSubstr("--streaming-slots"));
  EXPECT_THAT(cli_error_of({"compare", "--streaming", "--policies", "vllm,sarathi", "--num-requests", "20"}),
              HasSubstr("--streaming with `batchsim compare`: not supported yet"));
}

TEST(StreamingCli, ExactUnlessAskedOrAboveTheThreshold) {
  // An ordinary run prints no notice and stays exact; --no-streaming keeps a huge one exact
  // (checked by its refusal to stream a run of 2,000,001 requests with a closed loop: no notice).
  const CliRun small = cli({"run", "--num-requests", "30"});
  ASSERT_EQ(small.rc, 0);
  EXPECT_THAT(small.err, ::testing::Not(HasSubstr("streaming mode")));
  EXPECT_THAT(small.out, ::testing::Not(HasSubstr("DDSketch")));
  // Above the threshold it streams on its own, and says so in one line. Offline arrivals with
  // one slot stop at once (the second request finds no slot), so the test is quick and shows
  // that the run was streaming.
  std::ostringstream out, err;
  const std::string message = testing::user_error_of([&] {
    cli_main({"run", "--num-requests", "2000001", "--arrival", "offline", "--streaming-slots", "1"}, out, err);
  });
  EXPECT_THAT(err.str(), HasSubstr("2000001 requests > 2000000: streaming mode"));
  EXPECT_THAT(message, HasSubstr("--streaming-slots"));
}

}  // namespace
}  // namespace batchsim
