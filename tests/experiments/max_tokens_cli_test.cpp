// --max-tokens, --ignore-eos and --num-gpu-blocks end to end: flags and YAML keys, bad values
// named, echoed in summary.json (which reruns the same run), a max_tokens column in
// requests.csv, kv.capacity_tokens from the block count, and experiment axes over them.
#include "experiments/cli/cli.h"

#include <fstream>
#include <map>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/study/experiment.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;
using testing::run_cli;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(MaxTokensCli, BadValuesNameTheOption) {
  EXPECT_THAT(cli_error_of({"run", "--max-tokens", "uniform:5:1", "--num-requests", "5"}),
              HasSubstr("--max-tokens: \"uniform:5:1\""));
  EXPECT_THAT(cli_error_of({"run", "--max-tokens", "fixed:-3", "--num-requests", "5"}),
              HasSubstr("--max-tokens: \"fixed:-3\""));
  EXPECT_THAT(cli_error_of({"run", "--num-gpu-blocks", "-5", "--num-requests", "5"}),
              HasSubstr("--num-gpu-blocks -5: must be in [0, 16777216]"));
  EXPECT_THAT(cli_error_of({"run", "--num-gpu-blocks", "20000000", "--num-requests", "5"}),
              HasSubstr("--num-gpu-blocks 20000000"));
  EXPECT_THAT(cli_error_of({"run", "--num-gpu-blocks", "lots", "--num-requests", "5"}), HasSubstr("num-gpu-blocks"));
  const auto dir = testing::scratch_dir("max_tokens_cli_bad_yaml");
  const auto yaml = testing::write_text_file(dir, "run.yaml", "num-requests: 5\nignore-eos: maybe\n");
  EXPECT_THAT(cli_error_of({"run", "--config", yaml.string()}), HasSubstr("run.yaml:2: key 'ignore-eos'"));
}

TEST(MaxTokensCli, TheOptionsAreEchoedWrittenAndRerunFromTheSummary) {
  const auto dir = testing::scratch_dir("max_tokens_cli_run");
  ASSERT_EQ(run_cli({"run", "--policy", "tgi-router", "--num-requests", "40", "--arrival", "poisson:20", "--output-len",
                     "uniform:1:200", "--max-tokens", "fixed:128", "--ignore-eos", "--num-gpu-blocks", "500", "--out",
                     (dir / "a").string()}),
            0);
  const auto summary = nlohmann::json::parse(testing::read_text_file(dir / "a" / "summary.json"));
  EXPECT_EQ(summary["config"]["max_tokens"], "fixed:128");
  EXPECT_EQ(summary["config"]["ignore_eos"], true);
  EXPECT_EQ(summary["config"]["num_gpu_blocks"], 500);
  EXPECT_EQ(summary["kv"]["capacity_tokens"], 500 * 16);  // tgi-router reserves: blocks of 16
  EXPECT_EQ(summary["tokens"]["output"], 40 * 128);       // every request ran to max_tokens
  const std::string requests = testing::read_text_file(dir / "a" / "requests.csv");
  EXPECT_THAT(requests, HasSubstr("id,arrival_s,prompt_tokens,output_tokens,max_tokens,state,"));
  std::istringstream rows(requests);
  std::string line;
  std::getline(rows, line);
  int n = 0;
  while (std::getline(rows, line)) {
    EXPECT_THAT(line, HasSubstr(",128,128,finished,")) << line;
    ++n;
  }
  EXPECT_EQ(n, 40);
  // The summary reruns the run (its config block holds the new keys), byte for byte.
  ASSERT_EQ(run_cli({"run", "--config", (dir / "a" / "summary.json").string(), "--out", (dir / "b").string()}), 0);
  EXPECT_EQ(testing::read_text_file(dir / "a" / "summary.json"), testing::read_text_file(dir / "b" / "summary.json"));
  EXPECT_EQ(requests, testing::read_text_file(dir / "b" / "requests.csv"));
  // A paged policy gets the blocks at its own block size.
  ASSERT_EQ(run_cli({"run", "--policy", "vllm", "--policy-opt", "block_size=32", "--num-requests", "10",
                     "--num-gpu-blocks", "500", "--out", (dir / "c").string()}),
            0);
  EXPECT_EQ(nlohmann::json::parse(testing::read_text_file(dir / "c" / "summary.json"))["kv"]["capacity_tokens"],
            500 * 32);
}

TEST(MaxTokensCli, TheYamlKeysSetTheSameRun) {
  const auto dir = testing::scratch_dir("max_tokens_cli_yaml");
  const auto yaml =
      testing::write_text_file(dir, "run.yaml",
                               "policy: tgi-router\nnum-requests: 40\narrival: poisson:20\noutput-len: uniform:1:200\n"
                               "max_tokens: fixed:128\nignore-eos: true\nnum_gpu_blocks: 500\n");
  ASSERT_EQ(run_cli({"run", "--config", yaml.string(), "--out", (dir / "y").string()}), 0);
  ASSERT_EQ(run_cli({"run", "--policy", "tgi-router", "--num-requests", "40", "--arrival", "poisson:20", "--output-len",
                     "uniform:1:200", "--max-tokens", "fixed:128", "--ignore-eos", "--num-gpu-blocks", "500", "--out",
                     (dir / "f").string()}),
            0);
  EXPECT_EQ(testing::read_text_file(dir / "y" / "summary.json"), testing::read_text_file(dir / "f" / "summary.json"));
}

TEST(MaxTokensCli, TheOptionsAreExperimentAxes) {
  const auto dir = testing::scratch_dir("max_tokens_cli_axes");
  const std::string text =
      "base: {num-requests: 60, output-len: 'uniform:1:100', num-gpu-blocks: 64}\n"
      "policies: [tgi-router, vllm]\n"
      "axes:\n"
      "  max-tokens: ['fixed:100', 'fixed:1000']\n"
      "  ignore-eos: [false, true]\n";
  const Experiment e = parse_experiment_text(text, dir / "axes.yaml");
  const std::vector<PlannedRun> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs[0].config.workload.max_tokens, "fixed:100");
  EXPECT_FALSE(runs[0].config.workload.ignore_eos);
  EXPECT_TRUE(runs[3].config.workload.ignore_eos);
  EXPECT_EQ(runs[7].config.workload.max_tokens, "fixed:1000");
  EXPECT_EQ(runs[7].config.num_gpu_blocks, 64);
  // A malformed axis value is caught before anything runs, naming the run and the option.
  const std::string bad = "base: {num-requests: 5}\naxes:\n  max-tokens: ['fixed:0']\n";
  EXPECT_THAT(testing::user_error_of([&] { parse_experiment_text(bad, dir / "bad.yaml"); }),
              HasSubstr("--max-tokens: \"fixed:0\""));
  // Each value gets its own request sequence (compare shares a workload between runs whose
  // workload keys are equal, so the key must hold the limits): output fixed:10 ends at 5 tokens
  // under max_tokens 5 and runs to 50 under max_tokens 50 with ignore-eos.
  const auto file = testing::write_text_file(dir, "run.yaml",
                                             "base: {num-requests: 20, output-len: 'fixed:10', ignore-eos: true}\n"
                                             "policies: [tgi-router]\n"
                                             "axes:\n  max-tokens: ['fixed:5', 'fixed:50']\n");
  std::ostringstream out, err;
  ASSERT_EQ(
      cli_main({"compare", file.string(), "--out", (dir / "cmp").string(), "--no-plots", "--jobs", "1"}, out, err), 0);
  std::map<std::string, int64_t> output_tokens;
  for (const auto& entry : fs::directory_iterator(dir / "cmp" / "runs")) {
    const auto s = nlohmann::json::parse(testing::read_text_file(entry.path() / "summary.json"));
    output_tokens[s["config"]["max_tokens"].get<std::string>()] = s["tokens"]["output"].get<int64_t>();
  }
  EXPECT_EQ(output_tokens, (std::map<std::string, int64_t>{{"fixed:5", 20 * 5}, {"fixed:50", 20 * 50}}));
  // The report's setup says what the runs were asked to do.
  EXPECT_THAT(testing::read_text_file(dir / "cmp" / "report.md"),
              HasSubstr("- max_tokens per axis `max-tokens`; EOS ignored: every request runs to its max_tokens\n"));
}

}  // namespace
}  // namespace batchsim
