// The traps a new user fell into, each pinned: help that exits 0 and says what the command
// really does, options spelled in full, a run's summary.json fed back as --config, one warning
// line for many rejected requests, model names from config files, and sweeps that go on past
// one point that cannot run.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/cli/cli.h"
#include "hwmodel/base/error.h"
#include "hwmodel/model_spec.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::user_error_of;

using testing::cli;
using testing::CliRun;

TEST(NewUser, HelpOfEveryCommandExitsZero) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--help"},
                                               {"run", "--help"},
                                               {"compare", "--help"},
                                               {"merge", "--help"},
                                               {"list", "--help"},
                                               {"bench", "--help"},
                                               {"validate", "--help"},
                                               {"calibrate", "--help"},
                                               {"calibrate", "fit", "--help"},
                                               {"calibrate", "transfer", "--help"}}) {
    const CliRun r = cli(args);
    EXPECT_EQ(r.rc, 0) << args[0];
    EXPECT_THAT(r.out, HasSubstr("usage: batchsim")) << args[0];
  }
  EXPECT_THAT(cli({"list", "--help"}).out, HasSubstr("models"));
}

// --num-requests is 1000 for a synthetic workload, but a trace replays all of itself: the help
// says both. bench's default repeat is what the README's figures use, and it says so.
TEST(NewUser, HelpTextSaysWhatTheDefaultsAre) {
  const std::string help = cli({"run", "--help"}).out;
  EXPECT_THAT(help, HasSubstr("(default 1000; with --trace,"));
  EXPECT_THAT(help, HasSubstr("every request of the trace unless N is given"));
  const std::string bench = cli({"bench", "--help"}).out;
  EXPECT_THAT(bench, HasSubstr("--repeat arg (=5)"));
  const CliRun b = cli({"bench", "--num-requests", "20", "--output-len", "fixed:4"});
  EXPECT_EQ(b.rc, 0);
  EXPECT_THAT(b.out, HasSubstr("best of 5:"));
}

// Long options are never guessed from a prefix; a negative seed does not wrap to 2^64-1;
// --iteration-log has nowhere to go without --out.
TEST(NewUser, OptionsMustBeSpelledInFullAndSeedsAreWholeNumbers) {
  EXPECT_THAT(user_error_of([] { cli({"run", "--num-req", "5"}); }), HasSubstr("--num-req"));
  EXPECT_THAT(user_error_of([] { cli({"compare", "--polic", "vllm"}); }), HasSubstr("--polic"));
  EXPECT_THAT(user_error_of([] { cli({"validate", "--measure", "x"}); }), HasSubstr("validate: "));
  EXPECT_THAT(user_error_of([] {
                cli({"run", "--seed", "-1", "--num-requests", "5"});
              }),
              HasSubstr("--seed: '-1' is not a seed"));
  EXPECT_THAT(user_error_of([] { cli({"run", "--seed", "1e3", "--num-requests", "5"}); }), HasSubstr("--seed: '1e3'"));
  EXPECT_EQ(cli({"run", "--seed", "18446744073709551615", "--num-requests", "5"}).rc, 0);
  const auto dir = testing::scratch_dir("new-user-seed");
  std::ofstream(dir / "neg.yaml") << "num-requests: 5\nseed: -3\n";
  EXPECT_THAT(user_error_of([&] {
                cli({"run", "--config", (dir / "neg.yaml").string()});
              }),
              AllOf(HasSubstr("neg.yaml:2"), HasSubstr("'-3' is not a seed")));
  EXPECT_THAT(user_error_of([] {
                cli({"run", "--num-requests", "5", "--iteration-log"});
              }),
              HasSubstr("--iteration-log: iterations.csv is written into the --out folder"));
}

// `batchsim run --config DIR/summary.json` reruns the run it describes, byte for byte, policy
// options included.
TEST(NewUser, ASummaryJsonFeedsBackAsConfig) {
  const auto dir = testing::scratch_dir("new-user-config");
  ASSERT_EQ(cli({"run", "--policy", "vllm", "--policy-opt", "max_num_seqs=7", "--policy-opt",
                 "max_num_batched_tokens=1024", "--arrival", "poisson:20", "--num-requests", "80", "--seed", "5",
                 "--tp", "2", "--out", (dir / "a").string()})
                .rc,
            0);
  ASSERT_EQ(cli({"run", "--config", (dir / "a" / "summary.json").string(), "--out", (dir / "b").string()}).rc, 0);
  for (const char* file : {"summary.json", "requests.csv"}) {
    EXPECT_EQ(testing::read_text_file(dir / "a" / file), testing::read_text_file(dir / "b" / file)) << file;
  }
  const auto summary = nlohmann::json::parse(testing::read_text_file(dir / "b" / "summary.json"));
  EXPECT_EQ(summary["config"]["policy_opts"]["max_num_seqs"], "7");
  // A flag still overrides the file.
  ASSERT_EQ(
      cli({"run", "--config", (dir / "a" / "summary.json").string(), "--seed", "6", "--out", (dir / "c").string()}).rc,
      0);
  EXPECT_NE(testing::read_text_file(dir / "a" / "requests.csv"), testing::read_text_file(dir / "c" / "requests.csv"));
}

// Hundreds of requests over the context limit make one warning line, per kind of reason.
TEST(NewUser, RejectionsAreSummarisedOnOneLine) {
  const auto dir = testing::scratch_dir("new-user-reject");
  std::ofstream t(dir / "t.csv");
  t << "arrival_s,prompt_tokens,output_tokens\n";
  for (int i = 0; i < 200; ++i) t << i * 0.01 << "," << 2100 + i << ",10\n";  // over OPT's 2048
  t << "3,100,10\n";
  t.close();
  const CliRun r =
      cli({"run", "--model", "opt-13b", "--gpu", "a100-40gb", "--policy", "vllm", "--trace", (dir / "t.csv").string()});
  ASSERT_EQ(r.rc, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("vllm: 200 of 201 requests rejected, never to be served: 200 prompt + "
                               "output exceed max_model_len 2048 (first: request 0)"));
}

TEST(NewUser, AConfigFileIsNamedByItsOwnNameNotItsFolder) {
  const auto dir = testing::scratch_dir("new-user-model-name");
  const std::string body = R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096)";
  const auto named = testing::write_text_file(dir / "models", "my-llama-7b.json", body + "}");
  EXPECT_EQ(resolve_model(named.string()).name, "my-llama-7b");
  const auto hf = testing::write_text_file(dir / "models" / "Llama-2-7b-hf", "config.json", body + "}");
  EXPECT_EQ(resolve_model(hf.string()).name, "Llama-2-7b-hf");
  EXPECT_EQ(resolve_model((dir / "models" / "Llama-2-7b-hf").string()).name, "Llama-2-7b-hf");
  const auto with_id =
      testing::write_text_file(dir / "models", "x.json", body + R"(, "_name_or_path": "meta-llama/Llama-2-7b-hf"})");
  EXPECT_EQ(resolve_model(with_id.string()).name, "meta-llama/Llama-2-7b-hf");
}

// A sweep with one point that cannot run (Llama-2-70B does not fit on one A100-40GB) runs the
// other points, says which one failed and why, in the terminal and in report.md, and exits 1.
TEST(NewUser, OneInfeasiblePointDoesNotAbortTheSweep) {
  const auto dir = testing::scratch_dir("new-user-sweep");
  std::ofstream(dir / "e.yaml") << R"(description: a model axis with one model too large
base: {gpu: a100-40gb, num-requests: 20, output-len: "fixed:8"}
policies: [vllm, hf-static]
axes:
  model: [opt-13b, llama-2-70b, llama-2-7b]
)";
  const CliRun r =
      cli({"compare", (dir / "e.yaml").string(), "--out", (dir / "out").string(), "--no-plots", "--jobs", "2"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("batchsim: error: 2 of 6 runs failed"));
  EXPECT_THAT(r.out, HasSubstr("FAILED 0002_vllm_model-llama-2-70b_s0: "));
  EXPECT_THAT(r.out, HasSubstr("llama-2-70b"));
  const std::string report = testing::read_text_file(dir / "out" / "report.md");
  EXPECT_THAT(report, HasSubstr("## Failed runs"));
  EXPECT_THAT(report, HasSubstr("`0003_hf-static_model-llama-2-70b_s0`: "));
  // The feasible points ran and wrote their figures; the failed rows say why in results.csv.
  const std::string csv = testing::read_text_file(dir / "out" / "results.csv");
  EXPECT_THAT(csv, HasSubstr("error"));
  const auto ok = nlohmann::json::parse(
      testing::read_text_file(dir / "out" / "runs" / "0004_vllm_model-llama-2-7b_s0" / "summary.json"));
  EXPECT_EQ(ok["requests"]["completed"], 20);
  // merge keeps the failure (and so the non-zero exit's reason) with the rest.
  std::ostringstream out, err;
  EXPECT_EQ(cli_main({"merge", (dir / "out").string(), "--out", (dir / "merged").string(), "--no-plots"}, out, err), 1);
  EXPECT_THAT(out.str(), HasSubstr("FAILED 0002_vllm_model-llama-2-70b_s0"));
}

// Quick mode (--policies) whose every run fails reports each failure and exits 1; the setup line,
// which it reads from a run's figures, is left out rather than read from a failed run.
TEST(NewUser, QuickCompareWhoseRunsAllFailSaysWhy) {
  const CliRun r = cli({"compare", "--policies", "vllm,sarathi", "--model", "llama-3.1-70b", "--gpu", "a40",
                        "--num-requests", "20", "--no-plots"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("batchsim: error: 2 of 2 runs failed"));
  EXPECT_THAT(r.err, Not(HasSubstr("internal error")));
  EXPECT_THAT(r.out, HasSubstr("FAILED 0001_sarathi_s0: model 'llama-3.1-70b'"));
}

}  // namespace
}  // namespace batchsim
