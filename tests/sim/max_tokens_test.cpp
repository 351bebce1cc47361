// Tests of the client's max_tokens in workloads: the output ends at EOS or at max_tokens,
// whichever comes first; --ignore-eos runs every request to max_tokens; the limits come from
// their own random stream, so nothing else about a workload moves; a generic CSV's max_tokens
// column gives them for a trace, and --max-tokens overrides it without losing the EOS lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "sim/workload/trace_reader.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::user_error_of;

WorkloadSpec synthetic(const std::string& max_tokens, bool ignore_eos = false) {
  WorkloadSpec spec;
  spec.arrival = "poisson:5";
  spec.prompt_len = "uniform:16:400";
  spec.output_len = "uniform:1:300";
  spec.num_requests = 500;
  spec.seed = 7;
  spec.max_tokens = max_tokens;
  spec.ignore_eos = ignore_eos;
  return spec;
}

std::filesystem::path write_trace(const std::string& name, const std::string& contents) {
  return testing::write_text_file(testing::scratch_dir("max_tokens_" + name), name, contents);
}

TEST(MaxTokens, WithoutALimitEachRequestMayRunToItsOutputAndNothingChanges) {
  const Workload w = build_workload(synthetic("")).requests;
  for (const Request& r : w) {
    EXPECT_EQ(r.max_tokens, 0) << r.id;
    EXPECT_EQ(r.output_limit(), r.output_tokens) << r.id;
  }
}

TEST(MaxTokens, TheOutputEndsAtEosOrAtMaxTokensWhicheverComesFirst) {
  const Workload eos = build_workload(synthetic("")).requests;
  const Workload capped = build_workload(synthetic("uniform:50:250")).requests;
  ASSERT_EQ(eos.size(), capped.size());
  int cut = 0, kept = 0;
  for (size_t i = 0; i < eos.size(); ++i) {
    const Request &a = eos[i], &b = capped[i];
    // The limit is a stream of its own: arrivals and prompts are sample for sample the same.
    EXPECT_EQ(a.arrival, b.arrival) << i;
    EXPECT_EQ(a.prompt_tokens, b.prompt_tokens) << i;
    ASSERT_GE(b.max_tokens, 50) << i;
    ASSERT_LE(b.max_tokens, 250) << i;
    EXPECT_EQ(b.output_tokens, std::min(a.output_tokens, b.max_tokens)) << i;
    EXPECT_EQ(b.output_limit(), b.max_tokens) << i;
    (a.output_tokens > b.max_tokens ? cut : kept) += 1;
  }
  // Both branches of the minimum are exercised (outputs uniform on 1..300, limits on 50..250).
  EXPECT_GT(cut, 50);
  EXPECT_GT(kept, 50);
}

TEST(MaxTokens, ALimitAboveEveryOutputChangesNoOutput) {
  const Workload eos = build_workload(synthetic("")).requests;
  const Workload roomy = build_workload(synthetic("fixed:4096")).requests;
  for (size_t i = 0; i < eos.size(); ++i) {
    EXPECT_EQ(roomy[i].output_tokens, eos[i].output_tokens) << i;
    EXPECT_EQ(roomy[i].max_tokens, 4096) << i;
  }
}

TEST(MaxTokens, IgnoreEosRunsEveryRequestToItsMaxTokens) {
  const Workload w = build_workload(synthetic("uniform:50:250", /*ignore_eos=*/true)).requests;
  const Workload capped = build_workload(synthetic("uniform:50:250")).requests;
  bool longer = false;
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].output_tokens, w[i].max_tokens) << i;
    EXPECT_EQ(w[i].max_tokens, capped[i].max_tokens) << i;  // the same limits
    longer |= w[i].output_tokens > capped[i].output_tokens;
  }
  EXPECT_TRUE(longer) << "some requests would have ended at EOS before their max_tokens";
  // Without a limit, max_tokens is the output length, which every request already runs to.
  const Workload plain = build_workload(synthetic("")).requests;
  const Workload ignored = build_workload(synthetic("", /*ignore_eos=*/true)).requests;
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(ignored[i].output_tokens, plain[i].output_tokens);
}

TEST(MaxTokens, TheDescriptionSaysSo) {
  const BuiltWorkload b = build_workload(synthetic("fixed:100", true));
  EXPECT_NE(b.description.find("max_tokens fixed:100"), std::string::npos) << b.description;
  EXPECT_NE(b.description.find("ignoring EOS"), std::string::npos) << b.description;
}

TEST(MaxTokens, AMalformedLimitNamesTheOption) {
  EXPECT_EQ(user_error_of([] { build_workload(synthetic("fixed:0")); }),
            "--max-tokens: \"fixed:0\": N must be an integer >= 1");
  EXPECT_EQ(user_error_of([] { build_workload(synthetic("many")); }),
            "--max-tokens: \"many\": unknown length distribution \"many\"; expected fixed:N, "
            "uniform:A:B, capexp:MEAN:CAP or lognormal:MEDIAN:SIGMA");
  // Checked even where a trace would bring the lengths.
  WorkloadSpec spec = synthetic("uniform:9:3");
  spec.trace = write_trace("unused.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,5\n");
  spec.arrival = "";
  EXPECT_EQ(user_error_of([&] { build_workload(spec); }), "--max-tokens: \"uniform:9:3\": B must be an integer >= A");
}

// ---- traces -------------------------------------------------------------------------------

constexpr const char* kTraceWithLimits =
    "arrival_s,prompt_tokens,output_tokens,max_tokens\n"
    "0.0,10,500,100\n"  // EOS after max_tokens: cut to 100
    "2.0,20,30,64\n"    // EOS first: 30
    "1.0,30,7,7\n";     // out of order: sorted before the row above, with its limit

TEST(MaxTokensTrace, AGenericCsvColumnIsReadInRequestOrder) {
  const auto path = write_trace("limits.csv", kTraceWithLimits);
  const TraceReadResult t = read_trace_detailed(path, 0, 1.0);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.max_tokens, (std::vector<int32_t>{100, 7, 64}));
  // The reader keeps the EOS lengths; the workload applies the limits.
  EXPECT_EQ(t.requests[0].output_tokens, 500);
  EXPECT_EQ(t.requests[0].max_tokens, 0);
  // A trace without the column has none.
  EXPECT_TRUE(read_trace_detailed(write_trace("plain.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,5\n"), 0, 1.0)
                  .max_tokens.empty());
}

TEST(MaxTokensTrace, TheWorkloadEndsTraceOutputsAtTheColumnsLimits) {
  WorkloadSpec spec;
  spec.trace = write_trace("limits.csv", kTraceWithLimits);
  const BuiltWorkload b = build_workload(spec);
  ASSERT_EQ(b.requests.size(), 3u);
  EXPECT_EQ(b.requests[0].output_tokens, 100);
  EXPECT_EQ(b.requests[0].max_tokens, 100);
  EXPECT_EQ(b.requests[1].output_tokens, 7);
  EXPECT_EQ(b.requests[2].output_tokens, 30);
  EXPECT_EQ(b.requests[2].max_tokens, 64);
  EXPECT_NE(b.description.find("max_tokens from the trace"), std::string::npos);
  // With the trace's lengths at new arrivals too.
  spec.arrival = "poisson:2";
  const BuiltWorkload p = build_workload(spec);
  EXPECT_EQ(p.requests[0].output_tokens, 100);
  EXPECT_EQ(p.requests[2].max_tokens, 64);
  // --ignore-eos: every request runs to its column's limit.
  spec.arrival = "";
  spec.ignore_eos = true;
  const BuiltWorkload i = build_workload(spec);
  EXPECT_EQ(i.requests[2].output_tokens, 64);
  EXPECT_EQ(i.requests[0].output_tokens, 100);
}

TEST(MaxTokensTrace, MaxTokensOverridesTheColumnAndStillEndsAtTheTracesEos) {
  WorkloadSpec spec;
  spec.trace = write_trace("limits.csv", kTraceWithLimits);
  spec.max_tokens = "fixed:1000";
  const BuiltWorkload b = build_workload(spec);
  // The first request's EOS is at 500: the column's 100 no longer cuts it.
  EXPECT_EQ(b.requests[0].output_tokens, 500);
  EXPECT_EQ(b.requests[0].max_tokens, 1000);
  EXPECT_EQ(b.requests[2].output_tokens, 30);
  spec.max_tokens = "fixed:20";
  const BuiltWorkload c = build_workload(spec);
  EXPECT_EQ(c.requests[0].output_tokens, 20);
  EXPECT_EQ(c.requests[1].output_tokens, 7);
}

TEST(MaxTokensTrace, MalformedLimitsNameFileAndLine) {
  const auto bad = [](const std::string& name, const std::string& body) {
    const auto path = write_trace(name, "arrival_s,prompt_tokens,output_tokens,max_tokens\n" + body);
    return user_error_of([&] { read_trace_detailed(path, 0, 1.0); });
  };
  EXPECT_NE(bad("zero.csv", "0,5,5,1\n1,5,5,0\n").find("zero.csv:3: max_tokens must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(bad("text.csv", "0,5,5,lots\n").find("text.csv:2: max_tokens \"lots\" is not an integer"),
            std::string::npos);
  EXPECT_NE(bad("short.csv", "0,5,5\n").find("short.csv:2: expected 4 fields, got 3"), std::string::npos);
  EXPECT_NE(bad("huge.csv", "0,5,5,3000000000\n").find("huge.csv:2: max_tokens = 3000000000 is more than"),
            std::string::npos);
}

}  // namespace
}  // namespace batchsim
