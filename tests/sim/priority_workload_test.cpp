// Request priorities in workloads: the --priority distributions (fixed, uniform, weighted
// classes) drawn from a random stream of their own, so that nothing else about a workload moves;
// a trace's `priority` column (generic and Azure CSV, before or after max_tokens) and Mooncake
// key, replaced by --priority when both are given; malformed specs and rows named by option, file
// and line; and the per-priority summary that says how each class fared.
#include <map>
#include <random>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sim/simulation.h"
#include "sim/workload/trace_reader.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::user_error_of;

// Every random quantity a workload has, so that a priority stream that disturbed any would show.
WorkloadSpec synthetic(const std::string& priority) {
  return {.arrival = "poisson:5",
          .prompt_len = "uniform:10:500",
          .output_len = "capexp:100:400",
          .trace = {},
          .num_requests = 4000,
          .trace_speedup = 1.0,
          .seed = 17,
          .prefix = "groups:64:3",
          .max_tokens = "uniform:50:250",
          .ignore_eos = false,
          .priority = priority,
          .think_time = "uniform:0:2",
          .resample = {},
          .session_turns = {},
          .trace_columns = {}};
}

std::filesystem::path trace_file(const std::string& name, const std::string& contents) {
  return testing::write_text_file(testing::scratch_dir("priority_" + name), name, contents);
}

// How often each priority occurs.
std::map<int32_t, int64_t> histogram(const Workload& w) {
  std::map<int32_t, int64_t> counts;
  for (const Request& r : w) ++counts[r.priority];
  return counts;
}

TEST(WorkloadPriority, WithoutASpecEveryRequestHasPriorityZero) {
  for (const Request& r : make_workload(synthetic(""))) EXPECT_EQ(r.priority, 0) << r.id;
}

TEST(WorkloadPriority, AddingPrioritiesChangesNoOtherSample) {
  const BuiltWorkload plain = build_workload(synthetic(""));
  const BuiltWorkload with = build_workload(synthetic("uniform:0:3"));
  // Everything but the priority, request by request.
  const auto arrival_data = [](const Workload& w) {
    std::vector<std::tuple<SimTime, int32_t, int32_t, int32_t>> rows;
    for (const Request& r : w) rows.emplace_back(r.arrival, r.prompt_tokens, r.output_tokens, r.max_tokens);
    return rows;
  };
  EXPECT_EQ(arrival_data(plain.requests), arrival_data(with.requests));
  EXPECT_EQ(plain.prefix_blocks.hashes, with.prefix_blocks.hashes);
  EXPECT_EQ(plain.think_times, with.think_times);
  EXPECT_NE(with.description.find("priority uniform:0:3"), std::string::npos) << with.description;
  // The same seed draws the same priorities; another seed others.
  EXPECT_EQ(histogram(with.requests), histogram(make_workload(synthetic("uniform:0:3"))));
  WorkloadSpec other = synthetic("uniform:0:3");
  other.seed = 18;
  const Workload reseeded = make_workload(other);
  size_t differ = 0;
  for (size_t i = 0; i < reseeded.size(); ++i) differ += reseeded[i].priority != with.requests[i].priority;
  EXPECT_GT(differ, reseeded.size() / 2);
}

TEST(WorkloadPriority, DistributionsDrawWhatTheySay) {
  for (const Request& r : make_workload(synthetic("fixed:-7"))) ASSERT_EQ(r.priority, -7);

  // uniform:A:B is inclusive at both ends and flat: 4000 draws over 4 values, 1000 expected
  // each, sd ~27.
  const auto uniform = histogram(make_workload(synthetic("uniform:-1:2")));
  ASSERT_EQ(uniform.size(), 4u);
  EXPECT_EQ(uniform.begin()->first, -1);
  EXPECT_EQ(uniform.rbegin()->first, 2);
  for (const auto& [priority, count] : uniform) EXPECT_NEAR(count, 1000, 120) << priority;

  // classes:P=W: shares in proportion to the weights (1:3:4 of 4000: 500, 1500, 2000).
  const auto classes = histogram(make_workload(synthetic("classes:0=1,5=3,9=4")));
  ASSERT_EQ(classes.size(), 3u);
  EXPECT_NEAR(classes.at(0), 500, 90);
  EXPECT_NEAR(classes.at(5), 1500, 120);
  EXPECT_NEAR(classes.at(9), 2000, 130);

  // The whole int32 range is allowed, as vLLM takes any integer.
  const auto wide = histogram(make_workload(synthetic("uniform:-2147483648:2147483647")));
  EXPECT_GT(wide.size(), 3900u);
}

TEST(WorkloadPriority, DescribeRoundTrips) {
  for (const std::string spec : {"fixed:3", "uniform:-2:5", "classes:0=1,1=4"}) {
    EXPECT_EQ(parse_priority_distribution(spec, "--priority")->describe(), spec);
  }
}

TEST(WorkloadPriority, MalformedSpecsNameTheOptionTheSpecAndTheProblem) {
  const std::pair<std::string, std::string> cases[] = {
      {"high",
       "--priority: \"high\": unknown priority distribution \"high\"; expected fixed:P, uniform:A:B or "
       "classes:P=W,P=W,..."},
      {"fixed:x", "--priority: \"fixed:x\": P must be an integer >= -2147483648"},
      {"fixed:2147483648", "--priority: \"fixed:2147483648\": P must be at most 2147483647"},
      {"uniform:3:1", "--priority: \"uniform:3:1\": B must be an integer >= A"},
      {"uniform:1", "--priority: \"uniform:1\": expected uniform:A:B (2 parameters"},
      {"classes:0", "--priority: \"classes:0\": \"0\" is not P=W"},
      {"classes:0=1,,1=2", "--priority: \"classes:0=1,,1=2\": \"\" is not P=W"},
      {"classes:0=0", "--priority: \"classes:0=0\": the weight of priority 0 must be a positive number, got \"0\""},
      {"classes:0=1,0=2", "--priority: \"classes:0=1,0=2\": priority 0 is listed twice"},
      {"classes:a=1", "--priority: \"classes:a=1\": a class's priority P must be an integer"},
  };
  for (const auto& [spec_text, error] : cases) {
    const std::string spec = spec_text;  // clang 14 cannot capture a structured binding
    const std::string message = user_error_of([&] { build_workload(synthetic(spec)); });
    EXPECT_EQ(message.rfind(error, 0), 0u) << spec << ": " << message;
  }
}

TEST(TracePriority, CsvColumnsInEitherOrderAndTheMooncakeKey) {
  const auto generic = read_trace_detailed(
      trace_file("generic.csv", "arrival_s,prompt_tokens,output_tokens,priority\n0,5,5,2\n1,5,5,-1\n2,5,5,0\n"), 0,
      1.0);
  EXPECT_TRUE(generic.priority_column);
  EXPECT_TRUE(generic.max_tokens.empty());
  ASSERT_EQ(generic.requests.size(), 3u);
  EXPECT_EQ(generic.requests[0].priority, 2);
  EXPECT_EQ(generic.requests[1].priority, -1);

  // With max_tokens, in either order: each column keeps its own values.
  for (const std::string header : {"arrival_s,prompt_tokens,output_tokens,max_tokens,priority",
                                   "arrival_s,prompt_tokens,output_tokens,priority,max_tokens"}) {
    const bool priority_last = header.ends_with("priority");
    const std::string rows = priority_last ? "0,5,5,40,3\n1,5,5,30,1\n" : "0,5,5,3,40\n1,5,5,1,30\n";
    const auto both = read_trace_detailed(trace_file("both.csv", header + "\n" + rows), 0, 1.0);
    ASSERT_EQ(both.requests.size(), 2u) << header;
    EXPECT_EQ(both.requests[0].priority, 3) << header;
    EXPECT_EQ(both.requests[1].priority, 1) << header;
    EXPECT_EQ(both.max_tokens, (std::vector<int32_t>{40, 30})) << header;
  }

  // Rows out of file order carry their priorities with them through the sort.
  const auto azure = read_trace_detailed(trace_file("azure.csv",
                                                    "TIMESTAMP,ContextTokens,GeneratedTokens,priority\n"
                                                    "2023-11-16 18:00:02.0,10,5,7\n"
                                                    "2023-11-16 18:00:01.0,20,5,4\n"),
                                         0, 1.0);
  ASSERT_EQ(azure.requests.size(), 2u);
  EXPECT_EQ(azure.requests[0].prompt_tokens, 20);
  EXPECT_EQ(azure.requests[0].priority, 4);
  EXPECT_EQ(azure.requests[1].priority, 7);

  // JSONL: a line may have the key or not (0 then); the fast scanner and nlohmann read the same.
  const auto mooncake = read_trace_detailed(
      trace_file("trace.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"priority\": 3}\n"
                 "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}\n"
                 "{\"timestamp\": 2, \"input_length\": 5, \"output_length\": 1, \"priority\": -2, \"note\": \"x\"}\n"),
      0, 1.0);
  EXPECT_TRUE(mooncake.priority_column);
  ASSERT_EQ(mooncake.requests.size(), 3u);
  EXPECT_EQ(mooncake.requests[0].priority, 3);
  EXPECT_EQ(mooncake.requests[1].priority, 0);
  EXPECT_EQ(mooncake.requests[2].priority, -2);  // a string value sends the line to nlohmann

  EXPECT_FALSE(read_trace_detailed(trace_file("plain.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,5\n"), 0, 1.0)
                   .priority_column);
}

TEST(TracePriority, APrioritySpecReplacesTheTraceColumn) {
  WorkloadSpec spec;
  spec.trace = trace_file("replaced.csv", "arrival_s,prompt_tokens,output_tokens,priority\n0,5,5,9\n1,5,5,9\n");
  const BuiltWorkload kept = build_workload(spec);
  EXPECT_EQ(kept.requests[1].priority, 9);
  EXPECT_NE(kept.description.find("priorities from the trace"), std::string::npos) << kept.description;
  spec.priority = "fixed:1";
  const BuiltWorkload replaced = build_workload(spec);
  for (const Request& r : replaced.requests) EXPECT_EQ(r.priority, 1);
  // Trace lengths at synthetic arrivals keep the column too.
  spec.priority = "";
  spec.arrival = "poisson:3";
  EXPECT_EQ(build_workload(spec).requests[0].priority, 9);
}

TEST(TracePriority, BadColumnsAndValuesNameTheFileAndLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"arrival_s,prompt_tokens,output_tokens,priority\n0,5,5,high\n", ":2: priority \"high\" is not an integer"},
      {"arrival_s,prompt_tokens,output_tokens,priority\n0,5,5,1\n1,5,5\n", ":3: expected 4 fields, got 3"},
      {"arrival_s,prompt_tokens,output_tokens,priority\n0,5,5,3000000000\n",
       ":2: priority 3000000000 is out of range [-2147483648, 2147483647]"},
      {"arrival_s,prompt_tokens,output_tokens,urgency\n0,5,5,1\n",
       ":1: unknown column \"urgency\" after arrival_s,prompt_tokens,output_tokens; the optional columns of "
       "this format are max_tokens, priority"},
      {"arrival_s,prompt_tokens,output_tokens,priority,priority\n0,5,5,1,1\n", ":1: column \"priority\" appears twice"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens,max_tokens\n2023-11-16 18:00:02.0,10,5,7\n",
       ":1: unknown column \"max_tokens\" after TIMESTAMP,ContextTokens,GeneratedTokens; the optional columns of "
       "this format are priority"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"priority\": 1.5}\n",
       ":1: \"priority\" must be an integer, got 1.5"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"priority\": \"high\"}\n",
       ":1: \"priority\" must be an integer, got \"high\""},
  };
  int n = 0;
  for (const auto& [contents, error] : cases) {
    const std::string name = fmt::format("bad{}.{}", n++, contents.starts_with("{") ? "jsonl" : "csv");
    const auto path = trace_file(name, contents);
    const std::string message = user_error_of([&] { read_trace(path, 0, 1.0); });
    EXPECT_EQ(message.rfind(path.string() + error, 0), 0u) << name << ": " << message;
  }
}

RequestRecord record(int32_t priority, double arrival_s, double first_token_s, double finished_s, int32_t output_tokens,
                     RequestState state = RequestState::kFinished) {
  RequestRecord r;
  r.priority = priority;
  r.arrival = SimTime::from_seconds(arrival_s);
  r.first_scheduled = r.arrival;
  r.first_token = SimTime::from_seconds(first_token_s);
  r.finished = SimTime::from_seconds(finished_s);
  r.output_tokens = output_tokens;
  r.state = state;
  return r;
}

TEST(PriorityClasses, OneClassPerPriorityMostUrgentFirstNoneForASinglePriority) {
  std::vector<RequestRecord> records = {record(2, 0, 1, 5, 5), record(0, 0, 0.5, 1, 2), record(2, 1, 4, 9, 3),
                                        record(2, 0, 0, 0, 1, RequestState::kRejected), record(-1, 0, 0.1, 0.2, 1)};
  records[2].preemptions = 2;
  const auto classes = summarize_priority_classes(records);
  ASSERT_EQ(classes.size(), 3u);
  EXPECT_EQ(classes[0].priority, -1);
  EXPECT_EQ(classes[1].priority, 0);
  const PriorityClassSummary& low = classes[2];
  EXPECT_EQ(low.priority, 2);
  EXPECT_EQ(low.requests, 3);
  EXPECT_EQ(low.completed, 2);
  EXPECT_EQ(low.rejected, 1);
  EXPECT_EQ(low.preemptions, 2);
  EXPECT_EQ(low.ttft_s.count, 2);
  EXPECT_DOUBLE_EQ(low.ttft_s.mean, (1.0 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(low.e2e_s.max, 8.0);
  EXPECT_DOUBLE_EQ(low.tpot_s.mean, ((5.0 - 1) / 4 + (9.0 - 4) / 2) / 2);
  EXPECT_EQ(classes[0].tpot_s.count, 0);  // a one-token output has no TPOT

  for (RequestRecord& r : records) r.priority = 4;
  EXPECT_TRUE(summarize_priority_classes(records).empty());
}

// A run's figures keep one set of samples while every request has one priority, and copy it
// out as that priority's class when a second priority comes: each class must equal the
// figures of its own requests alone, wherever the second priority first appears.
TEST(PriorityClasses, EachClassEqualsTheFiguresOfItsRequestsAlone) {
  std::mt19937_64 rng(5);
  for (const size_t first_other : {size_t{1}, size_t{57}, size_t{400}}) {
    std::vector<RequestRecord> records;
    for (size_t i = 0; i < 500; ++i) {
      const int32_t priority = i < first_other ? 3 : static_cast<int32_t>(rng() % 3);
      const double arrival = static_cast<double>(i) * 0.1;
      const double first_token = arrival + 0.01 * static_cast<double>(1 + rng() % 50);
      const double finished = first_token + 0.02 * static_cast<double>(1 + rng() % 80);
      records.push_back(record(priority, arrival, first_token, finished, 1 + static_cast<int32_t>(rng() % 40),
                               rng() % 25 == 0 ? RequestState::kRejected : RequestState::kFinished));
      records.back().preemptions = static_cast<int32_t>(rng() % 2);
    }
    const auto classes = summarize_priority_classes(records);
    ASSERT_GE(classes.size(), 2u);
    for (const PriorityClassSummary& c : classes) {
      RequestFigures<WeightedSamples> alone;
      for (const RequestRecord& r : records) {
        if (r.priority == c.priority) alone.add(r);
      }
      Summary s;
      alone.finish(s, 0.0, WeightedSamples{});
      EXPECT_EQ(c.requests, s.requests_total) << first_other << " " << c.priority;
      EXPECT_EQ(c.completed, s.requests_completed);
      EXPECT_EQ(c.rejected, s.requests_rejected);
      EXPECT_EQ(c.preemptions, s.preemptions);
      for (const auto& [got, want] : {std::pair{c.e2e_s, s.e2e_s}, std::pair{c.ttft_s, s.ttft_s},
                                      std::pair{c.tpot_s, s.tpot_s}, std::pair{c.queueing_s, s.queueing_s}}) {
        EXPECT_EQ(got.count, want.count) << first_other << " " << c.priority;
        EXPECT_EQ(got.mean, want.mean);
        EXPECT_EQ(got.p50, want.p50);
        EXPECT_EQ(got.p90, want.p90);
        EXPECT_EQ(got.p99, want.p99);
        EXPECT_EQ(got.max, want.max);
      }
    }
  }
}

}  // namespace
}  // namespace batchsim
