// Input from a hostile or careless hand, through the CLI: third-party parser exceptions become
// the project's UserError naming the file and line, non-finite numbers are refused, and an
// experiment that would expand to billions of runs is counted and refused before expanding.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "experiments/cli/cli.h"
#include "experiments/run/runner.h"
#include "policies/registry.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::user_error_of;
using testing::write_text_file;

int cli(const std::vector<std::string>& args, std::string* text = nullptr) {
  std::ostringstream out, err;
  const int rc = cli_main(args, out, err);
  if (text != nullptr) *text = out.str() + err.str();
  return rc;
}

std::string cli_error(const std::vector<std::string>& args) {
  return user_error_of([&] { cli(args); });
}

TEST(HostileInput, ThirdPartyParserErrorsNameTheFileAndLine) {
  const fs::path dir = testing::scratch_dir("hostile_cli_parsers");
  // nlohmann throws out_of_range (not parse_error) for a number beyond a double.
  const auto jsonl = write_text_file(dir, "big.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                                     "{\"timestamp\": 1e400, \"input_length\": 5, \"output_length\": 1}\n");
  EXPECT_THAT(cli_error({"run", "--trace", jsonl.string()}),
              AllOf(HasSubstr("big.jsonl:2: not a JSON object"), HasSubstr("1e400")));
  // yaml-cpp's conversion of a key that is a list.
  const auto config = write_text_file(dir, "run.yaml", "num-requests: 5\n[a, b]: 3\n");
  EXPECT_THAT(cli_error({"run", "--config", config.string()}), HasSubstr("run.yaml:2: unexpected YAML here"));
  const auto opts = write_text_file(dir, "opts.yaml", "policy-opt:\n  [x]: 3\n");
  EXPECT_THAT(cli_error({"run", "--config", opts.string()}), HasSubstr("opts.yaml:2"));
  // A '~' in an SLO path was an invalid JSON pointer (nlohmann parse_error).
  const auto slo = write_text_file(dir, "slo.yaml", "capacity:\n  slo: {latency.ttft_s.p9~9: 2}\n");
  EXPECT_THAT(
      cli_error({"compare", slo.string(), "--dry-run"}),
      AllOf(HasSubstr("slo.yaml:2"), HasSubstr("latency.ttft_s.p9~9"), HasSubstr("not a numeric summary.json figure")));
}

TEST(HostileInput, NonFiniteNumbersAreRefusedWhereverTheyAreTyped) {
  const fs::path dir = testing::scratch_dir("hostile_cli_finite");
  // A NaN bound is met by every rate: the search would report the top of its range.
  const auto nan_slo = write_text_file(dir, "nan.yaml", "capacity:\n  slo: {latency.ttft_s.p99: .nan}\n");
  EXPECT_THAT(cli_error({"compare", nan_slo.string(), "--dry-run"}),
              AllOf(HasSubstr("nan.yaml:2"), HasSubstr("a finite number")));
  const auto neg_slo = write_text_file(dir, "neg.yaml", "capacity:\n  slo: {latency.ttft_s.p99: -1}\n");
  EXPECT_THAT(cli_error({"compare", neg_slo.string(), "--dry-run"}), HasSubstr("an upper bound must be >= 0"));
  const auto inf_rate =
      write_text_file(dir, "inf.yaml", "capacity:\n  slo: {latency.ttft_s.p99: 2}\n  rate-high: .inf\n");
  EXPECT_THAT(cli_error({"compare", inf_rate.string(), "--dry-run"}),
              AllOf(HasSubstr("inf.yaml:3"), HasSubstr("finite")));
  const auto axis = write_text_file(dir, "axis.yaml", "axes:\n  rate: [1, .inf]\n");
  EXPECT_THAT(cli_error({"compare", axis.string(), "--dry-run"}), HasSubstr("axis.yaml:2"));
  const auto seeds = write_text_file(dir, "seeds.yaml", "seeds: [1, -1]\n");
  EXPECT_THAT(cli_error({"compare", seeds.string(), "--dry-run"}),
              HasSubstr("seeds.yaml:1: seeds[1]: expected a non-negative integer"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--policy", "vllm", "--policy-opt", "watermark=nan"}),
              HasSubstr("watermark=nan: must be a finite number"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--policy", "vllm", "--policy-opt", "watermark=inf"}),
              HasSubstr("must be a finite number"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--trace-speedup", "inf", "--trace",
                         write_text_file(dir, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,5\n").string()}),
              HasSubstr("--trace-speedup"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--arrival", "poisson:inf"}), HasSubstr("--arrival"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--arrival", "gamma:2:nan"}), HasSubstr("--arrival"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--output-len", "lognormal:100:inf"}),
              HasSubstr("--output-len"));
  EXPECT_THAT(cli_error({"run", "--num-requests", "5", "--gpu-memory-utilization", "nan"}),
              HasSubstr("--gpu-memory-utilization"));
}

// Three axes of 3,000 values are 2.7e10 runs: counted and refused at once, not expanded.
TEST(HostileInput, AnExperimentTooLargeToExpandIsCountedAndRefused) {
  const fs::path dir = testing::scratch_dir("hostile_cli_expand");
  std::string axis;
  for (int i = 1; i <= 3000; ++i) axis += (i > 1 ? ", " : "") + std::to_string(i);
  const auto huge = write_text_file(
      dir, "huge.yaml", "axes:\n  num-requests: [" + axis + "]\n  tp: [" + axis + "]\n  replicas: [" + axis + "]\n");
  EXPECT_THAT(cli_error({"compare", huge.string(), "--dry-run"}),
              AllOf(HasSubstr("huge.yaml: expands to 2.7e+10 runs (1 policies x 1 seeds x 3000 (num-requests) x "
                              "3000 (tp) x 3000 (replicas)), more than the limit of 100000"),
                    HasSubstr("--max-runs")));
  // The limit is the file's or the flag's; dry-run says how many runs there are.
  const auto six = write_text_file(dir, "six.yaml", "policies: [vllm, orca]\naxes:\n  tp: [1, 2, 4]\n");
  std::string text;
  ASSERT_EQ(cli({"compare", six.string(), "--dry-run"}, &text), 0);
  EXPECT_THAT(text, HasSubstr("\n6 runs\n"));
  EXPECT_THAT(cli_error({"compare", six.string(), "--dry-run", "--max-runs", "5"}),
              HasSubstr("expands to 6 runs (2 policies x 1 seeds x 3 (tp)), more than the limit of 5"));
  const auto capped =
      write_text_file(dir, "capped.yaml", "max-runs: 4\npolicies: [vllm, orca]\naxes:\n  tp: [1, 2, 4]\n");
  EXPECT_THAT(cli_error({"compare", capped.string(), "--dry-run"}), HasSubstr("more than the limit of 4"));
  EXPECT_EQ(cli({"compare", capped.string(), "--dry-run", "--max-runs", "6"}), 0);
  EXPECT_THAT(cli_error({"compare", six.string(), "--dry-run", "--max-runs", "0"}), HasSubstr("--max-runs"));
}

}  // namespace
}  // namespace batchsim

namespace batchsim {
namespace {

// A run too large for the machine's memory stops before it starts, with the figures, instead of
// being killed by the kernel halfway.
TEST(HostileInput, ARunThatCannotFitInMemoryIsRefusedUpFront) {
  const auto bytes_of = [](const char* base) { return policy_base_traits(base).host_bytes_per_request; };
  EXPECT_EQ(memory_needed_bytes(bytes_of("continuous"), 1'000'000), int64_t(1.1 * 734 * 1e6) + (int64_t{64} << 20));
  EXPECT_GT(memory_needed_bytes(bytes_of("static"), 1000), memory_needed_bytes(bytes_of("chunked-prefill"), 1000));
  const int64_t gib = int64_t{1} << 30;
  EXPECT_NO_THROW(check_memory(2 * gib, 3 * gib, 100, "vllm"));
  EXPECT_NO_THROW(check_memory(2 * gib, 0, 100, "vllm"));  // unknown: no check
  EXPECT_THAT(user_error_of([&] { check_memory(5 * gib, 2 * gib, 12'000'000, "vllm"); }),
              HasSubstr("--num-requests: 12000000 requests under vllm need about 5.0 GiB, more than the 2.0 GiB"));
  EXPECT_GT(available_memory_bytes(), 0);  // Linux: /proc/meminfo
}

}  // namespace
}  // namespace batchsim
