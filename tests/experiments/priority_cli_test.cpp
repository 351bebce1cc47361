// Priorities end to end: --priority and the `priority` YAML key, scheduling_policy through
// --policy-opt and an experiment's policy-opt, per-priority figures in summary.json, the
// terminal and requests.csv, and bad input named by option with a UserError (exit status 2).
#include "experiments/cli/cli.h"

#include <algorithm>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Runs the CLI in-process and returns what it printed; a failing status fails the test.
std::string cli_output(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  EXPECT_EQ(cli_main(args, out, err), 0) << err.str();
  return out.str() + err.str();
}

std::string error_of(const std::vector<std::string>& args) {
  return testing::user_error_of([&] { cli_output(args); });
}

// A loaded vllm replica: a fifth of the requests urgent (priority 0), the rest priority 1.
std::vector<std::string> loaded_run(const std::string& scheduling_policy, const std::filesystem::path& out) {
  return {"run",
          "--policy",
          "vllm",
          "--policy-opt",
          "scheduling_policy=" + scheduling_policy,
          "--arrival",
          "poisson:60",
          "--num-requests",
          "400",
          "--prompt-len",
          "uniform:200:800",
          "--output-len",
          "uniform:50:250",
          "--priority",
          "classes:0=1,1=4",
          "--out",
          out.string()};
}

json summary_of(const std::filesystem::path& dir) { return json::parse(testing::read_text_file(dir / "summary.json")); }

TEST(PriorityCli, SummaryReportsEachClassAndPriorityServesTheUrgentFirst) {
  const auto dir = testing::scratch_dir("priority_cli_run");
  EXPECT_THAT(cli_output(loaded_run("priority", dir / "priority")), HasSubstr("priority  done/rej"));
  cli_output(loaded_run("fcfs", dir / "fcfs"));

  const json priority = summary_of(dir / "priority");
  const json fcfs = summary_of(dir / "fcfs");
  EXPECT_EQ(priority["config"]["priority"], "classes:0=1,1=4");
  EXPECT_EQ(priority["config"]["policy_opts"]["scheduling_policy"], "priority");
  ASSERT_TRUE(priority.contains("priority_classes"));
  const json& classes = priority["priority_classes"];
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes.begin().key(), "0");  // most urgent first
  EXPECT_EQ(classes["0"]["requests"].get<int64_t>() + classes["1"]["requests"].get<int64_t>(), 400);
  EXPECT_EQ(classes["0"]["ttft_s"]["count"], classes["0"]["completed"]);

  // The urgent class's share is what --priority asked for (80 of 400 expected, sd ~8).
  EXPECT_NEAR(classes["0"]["requests"].get<double>(), 80, 30);
  // The same requests and the same classes under both orders: only the order differs.
  EXPECT_EQ(fcfs["priority_classes"]["0"]["requests"], classes["0"]["requests"]);
  // Overloaded (arrivals outrun the GPU, so a queue builds): ordering by priority cuts the
  // urgent class's queueing well below the others' and below its own under fcfs, where both
  // classes wait alike.
  const double urgent = classes["0"]["ttft_s"]["p50"].get<double>();
  EXPECT_LT(urgent, 0.5 * classes["1"]["ttft_s"]["p50"].get<double>());
  EXPECT_LT(urgent, 0.5 * fcfs["priority_classes"]["0"]["ttft_s"]["p50"].get<double>());

  // requests.csv names each request's priority, as the summary counts them.
  const std::string csv = testing::read_text_file(dir / "priority" / "requests.csv");
  std::istringstream lines(csv);
  std::string header, row;
  std::getline(lines, header);
  // The priority column by its header (the breakdown columns follow it).
  std::vector<std::string> columns;
  std::string cell;
  for (std::istringstream cells(header); std::getline(cells, cell, ',');) columns.push_back(cell);
  const auto at = std::find(columns.begin(), columns.end(), "priority");
  ASSERT_NE(at, columns.end()) << header;
  const auto priority_column = static_cast<size_t>(at - columns.begin());
  int64_t urgent_rows = 0;
  while (std::getline(lines, row)) {
    std::vector<std::string> cells;
    for (std::istringstream in(row); std::getline(in, cell, ',');) cells.push_back(cell);
    ASSERT_GT(cells.size(), priority_column) << row;
    urgent_rows += cells[priority_column] == "0";
  }
  EXPECT_EQ(urgent_rows, classes["0"]["requests"].get<int64_t>());
}

TEST(PriorityCli, ASinglePriorityWritesNoClasses) {
  const auto dir = testing::scratch_dir("priority_cli_single");
  cli_output({"run", "--num-requests", "20", "--priority", "fixed:3", "--out", dir.string()});
  EXPECT_FALSE(summary_of(dir).contains("priority_classes"));
}

TEST(PriorityCli, BadInputNamesTheOption) {
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--priority", "urgent"}),
              HasSubstr("--priority: \"urgent\": unknown priority distribution"));
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--policy", "vllm", "--policy-opt", "scheduling_policy=edf"}),
              HasSubstr("--policy-opt scheduling_policy=edf: expected one of fcfs, priority, sjf"));
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--policy", "vllm", "--policy-opt", "sjf_by=prompt"}),
              HasSubstr("sjf_by=prompt: only applies with scheduling_policy=sjf"));
  const auto dir = testing::scratch_dir("priority_cli_yaml");
  const auto config = testing::write_text_file(dir, "run.yaml", "num-requests: 5\npriority: 3\n");
  EXPECT_THAT(error_of({"run", "--config", config.string()}), HasSubstr("--priority: \"3\""));
}

TEST(PriorityCli, ListPoliciesShowsTheOptionsAndTheExample) {
  const std::string text = cli_output({"list", "policies"});
  EXPECT_THAT(text, HasSubstr("scheduling_policy"));
  EXPECT_THAT(text, HasSubstr("sjf_by"));
  EXPECT_THAT(text, HasSubstr("preempt_for_waiting=true"));  // the vllm-v0 preset
  EXPECT_THAT(text, HasSubstr("options of example-sjf"));
}

// An experiment file takes the workload's priorities in `base` and the order as a variant's
// policy-opt; each run's summary.json has its classes.
TEST(PriorityCli, AnExperimentComparesOrdersOnTheSameRequests) {
  const auto dir = testing::scratch_dir("priority_cli_experiment");
  const auto file = testing::write_text_file(dir, "priorities.yaml", R"(name: priorities
base:
  arrival: poisson:40
  num-requests: 120
  prompt-len: uniform:100:600
  output-len: uniform:20:120
  priority: uniform:0:2
policies:
  - {policy: vllm, label: fcfs}
  - {policy: vllm, label: priority, policy-opt: {scheduling_policy: priority}}
  - {policy: vllm-v0, label: v0-priority, policy-opt: {scheduling_policy: priority}}
  - {policy: vllm, label: sjf-oracle, policy-opt: {scheduling_policy: sjf}}
)");
  cli_output({"compare", file.string(), "--out", (dir / "out").string(), "--jobs", "1"});
  int runs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "out" / "runs")) {
    const json s = summary_of(entry.path());
    EXPECT_EQ(s["config"]["priority"], "uniform:0:2") << entry.path();
    EXPECT_EQ(s["priority_classes"].size(), 3u) << entry.path();
    ++runs;
  }
  EXPECT_EQ(runs, 4);
}

// Each combination of a sweep runs on the workload of its own spec, all of it: an axis that
// varies only the priorities (or the clients' think time) must not reuse another value's
// requests.
TEST(PriorityCli, AnAxisOfPrioritiesOrThinkTimesGivesEachRunItsOwnWorkload) {
  const auto dir = testing::scratch_dir("priority_cli_axis");
  const auto file = testing::write_text_file(dir, "axes.yaml", R"(name: axes
base:
  arrival: poisson:40
  num-requests: 60
  max-concurrency: 4
policies:
  - {policy: vllm, label: priority, policy-opt: {scheduling_policy: priority}}
axes:
  priority: ["fixed:0", "classes:0=1,1=4"]
  think-time: ["fixed:0.5", "fixed:2"]
)");
  cli_output({"compare", file.string(), "--out", (dir / "out").string(), "--jobs", "1"});
  int runs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "out" / "runs")) {
    const json s = summary_of(entry.path());
    const std::string priority = s["config"]["priority"], think = s["config"]["think_time"];
    // Two classes only where the run's own spec draws them.
    const size_t classes = s.contains("priority_classes") ? s["priority_classes"].size() : 0;
    EXPECT_EQ(classes, priority == "fixed:0" ? 0u : 2u) << entry.path();
    // Its first request goes its own think time after t = 0: the first arrival is the smallest.
    const std::string requests = testing::read_text_file(entry.path() / "requests.csv");
    const std::string first_row = requests.substr(requests.find('\n') + 1);
    const double first_arrival = std::stod(first_row.substr(first_row.find(',') + 1));
    EXPECT_DOUBLE_EQ(first_arrival, think == "fixed:0.5" ? 0.5 : 2.0) << entry.path();
    ++runs;
  }
  EXPECT_EQ(runs, 4);
}

}  // namespace
}  // namespace batchsim
