// The `batchsim` CLI end to end, in-process: bad input is one UserError naming what is wrong,
// unservable requests are rejected (not looped on), and reruns are byte-identical.
#include "experiments/cli/cli.h"

#include <fstream>
#include <map>
#include <sstream>

#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;
using testing::run_cli;

using ::testing::HasSubstr;

TEST(Cli, BadInputNamesTheCulprit) {
  EXPECT_THAT(cli_error_of({"run", "--model", "gpt-5", "--num-requests", "5"}), HasSubstr("gpt-5"));
  EXPECT_THAT(cli_error_of({"run", "--gpu", "tpu-v9", "--num-requests", "5"}), HasSubstr("tpu-v9"));
  EXPECT_THAT(cli_error_of({"run", "--policy", "fastest", "--num-requests", "5"}), HasSubstr("fastest"));
  EXPECT_THAT(cli_error_of({"run", "--prompt-len", "normal:5", "--num-requests", "5"}), HasSubstr("--prompt-len"));
  EXPECT_THAT(cli_error_of({"run", "--arrival", "poisson:-1", "--num-requests", "5"}), HasSubstr("--arrival"));
  EXPECT_THAT(cli_error_of({"run", "--policy-opt", "max_num_seqs", "--num-requests", "5"}), HasSubstr("KEY=VALUE"));
  EXPECT_THAT(cli_error_of({"run", "--policy-opt", "max_num_seqz=4", "--num-requests", "5"}),
              HasSubstr("max_num_seqz"));
  EXPECT_THAT(cli_error_of({"run", "--policy-opt", "max_num_seqs=0", "--num-requests", "5"}),
              HasSubstr("max_num_seqs"));
  EXPECT_THAT(cli_error_of({"run", "--tp", "0", "--num-requests", "5"}), HasSubstr("--tp"));
  EXPECT_THAT(cli_error_of({"run", "--trace", "/nonexistent/trace.csv"}), HasSubstr("/nonexistent/trace.csv"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "many"}), HasSubstr("num-requests"));
  EXPECT_THAT(cli_error_of({"run", "--no-such-flag"}), HasSubstr("no-such-flag"));
  EXPECT_THAT(cli_error_of({"list", "toasters"}), HasSubstr("toasters"));
  EXPECT_THAT(cli_error_of({"frobnicate"}), HasSubstr("frobnicate"));
}

// --replicas and --router: bad values name the option (flag or YAML key); a cluster's run says
// how many replicas and which router in its header, echoes both in summary.json with one entry
// per replica, and adds a replica column to requests.csv and iterations.csv.
TEST(Cli, ReplicasAndRouterAreValidatedEchoedAndReported) {
  EXPECT_THAT(cli_error_of({"run", "--replicas", "0", "--num-requests", "5"}), HasSubstr("--replicas 0"));
  EXPECT_THAT(cli_error_of({"run", "--replicas", "100000", "--num-requests", "5"}), HasSubstr("--replicas"));
  EXPECT_THAT(cli_error_of({"run", "--replicas", "two", "--num-requests", "5"}), HasSubstr("replicas"));
  EXPECT_THAT(cli_error_of({"run", "--router", "fastest", "--num-requests", "5"}), HasSubstr("--router 'fastest'"));
  const auto dir = testing::scratch_dir("cli-replicas");
  {
    std::ofstream(dir / "bad.yaml") << "replicas: 2\nrouter: nearest\n";
    EXPECT_THAT(cli_error_of({"run", "--config", (dir / "bad.yaml").string(), "--num-requests", "5"}),
                HasSubstr("nearest"));
  }
  std::ofstream(dir / "cluster.yaml") << "replicas: 3\nrouter: least-outstanding\n";
  std::string text;
  ASSERT_EQ(run_cli({"run", "--config", (dir / "cluster.yaml").string(), "--arrival", "poisson:20", "--num-requests",
                     "90", "--iteration-log", "--out", (dir / "out").string()},
                    &text),
            0);
  EXPECT_THAT(text, HasSubstr("3 replicas x (tp 1), router least-outstanding"));
  const auto summary = nlohmann::json::parse(testing::read_text_file(dir / "out" / "summary.json"));
  EXPECT_EQ(summary["config"]["replicas"], 3);
  EXPECT_EQ(summary["config"]["router"], "least-outstanding");
  ASSERT_EQ(summary["replicas"].size(), 3u);
  int64_t routed = 0;
  for (const auto& r : summary["replicas"]) {
    routed += r["requests"].get<int64_t>();
    EXPECT_GT(r["busy_fraction"].get<double>(), 0);
  }
  EXPECT_EQ(routed, 90);
  const std::string requests = testing::read_text_file(dir / "out" / "requests.csv");
  EXPECT_THAT(requests.substr(0, requests.find('\n')), ::testing::EndsWith(",replica"));
  const std::string iterations = testing::read_text_file(dir / "out" / "iterations.csv");
  EXPECT_THAT(iterations.substr(0, iterations.find('\n')), ::testing::EndsWith(",replica"));

  // One replica: the header, requests.csv and summary.json read as they did before clusters.
  ASSERT_EQ(run_cli({"run", "--arrival", "poisson:20", "--num-requests", "30", "--out", (dir / "one").string()}, &text),
            0);
  EXPECT_THAT(text, HasSubstr("(tp 1), engine vllm, 30 requests"));
  EXPECT_THAT(testing::read_text_file(dir / "one" / "requests.csv"), ::testing::Not(HasSubstr("replica")));
  const auto one = nlohmann::json::parse(testing::read_text_file(dir / "one" / "summary.json"));
  EXPECT_FALSE(one.contains("replicas"));
  EXPECT_EQ(one["config"]["replicas"], 1);

  ASSERT_EQ(run_cli({"list", "routers"}, &text), 0);
  for (const char* r : {"round-robin", "random", "least-outstanding", "least-kv", "prefix"}) {
    EXPECT_THAT(text, HasSubstr(r));
  }
}

TEST(Cli, MalformedTraceLineIsNamedByLine) {
  const auto dir = testing::scratch_dir("cli-bad-trace");
  std::ofstream(dir / "t.csv") << "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,abc,5\n";
  const std::string msg = cli_error_of({"run", "--trace", (dir / "t.csv").string()});
  EXPECT_THAT(msg, HasSubstr("t.csv"));
  EXPECT_THAT(msg, HasSubstr("3"));  // the line number
}

TEST(Cli, ConfigFileKeysAreCheckedAndFlagsOverrideThem) {
  const auto dir = testing::scratch_dir("cli-config");
  std::ofstream(dir / "bad.yaml") << "model: llama-2-7b\nnum_requestz: 5\n";
  EXPECT_THAT(cli_error_of({"run", "--config", (dir / "bad.yaml").string()}), HasSubstr("num_requestz"));

  std::ofstream(dir / "good.yaml") << "model: llama-2-7b\nnum-requests: 7\npolicy: vllm\n"
                                      "policy-opt:\n  max_num_seqs: 4\nseed: 3\n";
  ASSERT_EQ(run_cli({"run", "--config", (dir / "good.yaml").string(), "--num-requests", "9", "--out",
                     (dir / "out").string()}),
            0);
  const auto summary = nlohmann::json::parse(testing::read_text_file(dir / "out" / "summary.json"));
  EXPECT_EQ(summary["config"]["num_requests"], 9);  // the flag wins
  EXPECT_EQ(summary["config"]["policy"], "vllm");   // from the file
  EXPECT_EQ(summary["config"]["policy_opts"]["max_num_seqs"], "4");
  EXPECT_EQ(summary["requests"]["completed"], 9);
}

// --kv-cache-dtype fp8 halves KV bytes per token: the same memory holds about twice the
// tokens (exactly, up to rounding); --weight-dtype fp8 frees weight memory for more KV. Both are
// echoed in summary.json (also from a config file) and a bad value names its option.
TEST(Cli, DtypeOptionsChangeKvCapacityAndAreEchoed) {
  const auto dir = testing::scratch_dir("cli-dtypes");
  const auto capacity = [&](const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = {"run", "--model",        "mixtral-8x7b", "--gpu", "h100-sxm",           "--tp",
                                     "2",   "--num-requests", "20",           "--out", (dir / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run_cli(args), 0);
    const auto summary = nlohmann::json::parse(testing::read_text_file(dir / name / "summary.json"));
    // ... and says how it was sized.
    EXPECT_THAT(summary["kv"]["capacity_rule"].get<std::string>(),
                HasSubstr("--gpu-memory-utilization 0.9 after a profile run of"));
    return std::make_pair(summary["kv"]["capacity_tokens"].get<int64_t>(), summary["config"]);
  };
  const auto [bf16, bf16_config] = capacity({}, "auto");
  const auto [kv8, kv8_config] = capacity({"--kv-cache-dtype", "fp8"}, "kv8");
  EXPECT_NEAR(static_cast<double>(kv8), 2.0 * static_cast<double>(bf16), 2.0);
  EXPECT_EQ(bf16_config["kv_cache_dtype"], "auto");
  EXPECT_EQ(kv8_config["kv_cache_dtype"], "fp8");
  // FP8 weights: ~46.7B parameters at one byte instead of two leave more room for KV.
  std::ofstream(dir / "w8.yaml") << "weight-dtype: fp8\n";
  const auto [w8, w8_config] = capacity({"--config", (dir / "w8.yaml").string()}, "w8");
  EXPECT_GT(w8, bf16 * 3 / 2);
  EXPECT_EQ(w8_config["weight_dtype"], "fp8");

  EXPECT_THAT(cli_error_of({"run", "--kv-cache-dtype", "fp4", "--num-requests", "5"}), HasSubstr("--kv-cache-dtype"));
  EXPECT_THAT(cli_error_of({"run", "--weight-dtype", "int3", "--num-requests", "5"}), HasSubstr("--weight-dtype"));
}

TEST(Cli, UnservableRequestsAreRejectedWithAReasonAndTheRunGoesOn) {
  const auto dir = testing::scratch_dir("cli-reject");
  // OPT-13B has a 2048-token context: the second request can never be served.
  std::ofstream(dir / "t.csv") << "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.1,3000,10\n0.2,50,5\n";
  for (const char* policy : {"continuous", "hf-static", "vllm", "orca"}) {
    std::string text;
    ASSERT_EQ(run_cli({"run", "--model", "opt-13b", "--gpu", "a100-40gb", "--policy", policy, "--trace",
                       (dir / "t.csv").string(), "--out", (dir / policy).string()},
                      &text),
              0);
    EXPECT_THAT(text, HasSubstr("rejected")) << policy;
    const auto summary = nlohmann::json::parse(testing::read_text_file(dir / policy / "summary.json"));
    EXPECT_EQ(summary["requests"]["rejected"], 1) << policy;
    EXPECT_EQ(summary["requests"]["beyond_context"], 1) << policy;  // every policy's context rejection
    EXPECT_EQ(summary["requests"]["completed"], 2) << policy;
    // The trace gave the lengths: no length distribution is echoed as if it had run.
    EXPECT_FALSE(summary["config"].contains("prompt_len")) << policy;
    EXPECT_FALSE(summary["config"].contains("output_len")) << policy;
    EXPECT_THAT(testing::read_text_file(dir / policy / "requests.csv"), HasSubstr("exceed")) << policy;
  }
}

TEST(Cli, SameSeedGivesByteIdenticalOutputs) {
  const auto dir = testing::scratch_dir("cli-determinism");
  for (const char* run : {"a", "b"}) {
    ASSERT_EQ(run_cli({"run", "--policy", "vllm", "--arrival", "gamma:8:3", "--num-requests", "300", "--prompt-len",
                       "lognormal:400:1", "--output-len", "capexp:100:800", "--seed", "11", "--iteration-log", "--out",
                       (dir / run).string()}),
              0);
  }
  for (const char* file : {"summary.json", "requests.csv", "iterations.csv"}) {
    const std::string a = testing::read_text_file(dir / "a" / file), b = testing::read_text_file(dir / "b" / file);
    EXPECT_FALSE(a.empty()) << file;
    EXPECT_EQ(a, b) << file;
  }
  ASSERT_EQ(
      run_cli({"run", "--policy", "vllm", "--arrival", "gamma:8:3", "--num-requests", "300", "--prompt-len",
               "lognormal:400:1", "--output-len", "capexp:100:800", "--seed", "12", "--out", (dir / "c").string()}),
      0);
  EXPECT_NE(testing::read_text_file(dir / "a" / "requests.csv"), testing::read_text_file(dir / "c" / "requests.csv"));
}

// Every command answers --help with its usage and options, exit 0; the top level lists every
// command. A command whose help broke (a duplicate option, a bad default) fails here, not in a
// user's terminal.
// SGLang's and TensorRT-LLM's own spellings are refused with batchsim's in the message, and so
// are vLLM's where a command does not read them as its own (run, compare and bench do:
// vllm_spellings_test.cpp); the option each hint names is one the command has (or a
// --policy-opt key it knows).
TEST(Cli, EnginesSpellingsAreRefusedWithOurs) {
  const std::vector<std::tuple<std::string, std::string, std::string>> hints = {
      {"plan", "--tensor-parallel-size", "batchsim says --tp N"},
      {"plan", "--num-prompts", "batchsim says --num-requests N"},
      {"plan", "--request-rate", "batchsim says --arrival poisson:RATE"},
      {"plan", "--max-num-seqs", "batchsim says --policy-opt max_num_seqs=N"},
      {"run", "--tp-size", "SGLang's spelling: batchsim says --tp N"},
      {"run", "--tp_size", "TensorRT-LLM's spelling: batchsim says --tp N"},
  };
  for (const auto& [command, flag, hint] : hints) {
    SCOPED_TRACE(flag);
    const std::string why = cli_error_of({command, flag, "4", "--num-requests", "5"});
    EXPECT_THAT(why, HasSubstr("'" + flag + "'"));
    EXPECT_THAT(why, HasSubstr(hint));
  }
  // The hinted spellings run.
  std::string text;
  EXPECT_EQ(run_cli({"run", "--tp", "2", "--arrival", "poisson:4", "--policy-opt", "max_num_seqs=8", "--policy-opt",
                     "max_num_batched_tokens=1024", "--num-requests", "5"},
                    &text),
            0);
  // Any other unknown option keeps Boost's message alone.
  EXPECT_THAT(cli_error_of({"run", "--bogus", "1"}), ::testing::Not(HasSubstr("spelling")));
}

TEST(Cli, EveryCommandHasHelp) {
  const std::vector<std::vector<std::string>> commands = {{"run"},
                                                          {"compare"},
                                                          {"merge"},
                                                          {"plan"},
                                                          {"list"},
                                                          {"bench"},
                                                          {"validate"},
                                                          {"validate-serving"},
                                                          {"calibrate"},
                                                          {"calibrate", "fit"},
                                                          {"calibrate", "transfer"},
                                                          {"calibrate", "engine"},
                                                          {"calibrate", "shapes"}};
  std::string top;
  ASSERT_EQ(run_cli({"--help"}, &top), 0);
  for (std::vector<std::string> args : commands) {
    SCOPED_TRACE(args.back());
    EXPECT_THAT(top, HasSubstr(args.front()));
    args.push_back("--help");
    std::string text;
    ASSERT_EQ(run_cli(args, &text), 0);
    EXPECT_THAT(text, HasSubstr("usage: batchsim " + args.front()));
  }
}

TEST(Cli, ListsShowEverythingBuiltIn) {
  std::string text;
  ASSERT_EQ(run_cli({"list", "models"}, &text), 0);
  for (const char* m :
       {"opt-13b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b"}) {
    EXPECT_THAT(text, HasSubstr(m));
  }
  ASSERT_EQ(run_cli({"list", "gpus"}, &text), 0);
  for (const char* g : {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s"}) {
    EXPECT_THAT(text, HasSubstr(g));
  }
  ASSERT_EQ(run_cli({"list", "policies"}, &text), 0);
  for (const char* p : {"hf-static", "ft-static", "orca", "tgi", "vllm-v0", "vllm", "sarathi", "max_num_batched_tokens",
                        "watermark=0.01", "(engine hf-transformers)"}) {
    EXPECT_THAT(text, HasSubstr(p));
  }
  ASSERT_EQ(run_cli({"list", "engines"}, &text), 0);
  for (const char* e : {"bare", "vllm", "vllm-v0", "hf-transformers", "fastertransformer", "tgi", "sglang", "trtllm",
                        "concat", "custom"}) {
    EXPECT_THAT(text, HasSubstr(e));
  }
}

// A run simulates its policy's engine unless --engine (or an `engine` key) names another; the
// engine is echoed in the header and in summary.json, and an unknown one is an error naming it.
TEST(Cli, EngineDefaultsToThePresetsAndCanBeChosen) {
  const auto dir = testing::scratch_dir("cli-engine");
  std::string text;
  ASSERT_EQ(run_cli({"run", "--policy", "hf-static", "--num-requests", "8", "--out", (dir / "hf").string()}, &text), 0);
  EXPECT_THAT(text, HasSubstr("engine hf-transformers"));
  EXPECT_EQ(nlohmann::json::parse(testing::read_text_file(dir / "hf" / "summary.json"))["config"]["engine"],
            "hf-transformers");
  ASSERT_EQ(run_cli({"run", "--policy", "hf-static", "--engine", "bare", "--num-requests", "8", "--out",
                     (dir / "bare").string()},
                    &text),
            0);
  const auto hf = nlohmann::json::parse(testing::read_text_file(dir / "hf" / "summary.json"));
  const auto bare = nlohmann::json::parse(testing::read_text_file(dir / "bare" / "summary.json"));
  EXPECT_EQ(bare["config"]["engine"], "bare");
  // The same schedule on a faster engine: HF's concatenated cache and eager launches cost time.
  EXPECT_GT(bare["throughput"]["total_tokens_per_s"].get<double>(),
            hf["throughput"]["total_tokens_per_s"].get<double>());
  std::ofstream(dir / "run.yaml") << "engine: fastertransformer\npolicy: hf-static\n";
  ASSERT_EQ(run_cli({"run", "--config", (dir / "run.yaml").string(), "--num-requests", "8"}, &text), 0);
  EXPECT_THAT(text, HasSubstr("engine fastertransformer"));
  EXPECT_THAT(cli_error_of({"run", "--engine", "vllm-9", "--num-requests", "8"}), HasSubstr("unknown engine 'vllm-9'"));
}

// MoE rows show experts, top-k, the shared experts, the dense layers, the attention kind and the
// weight format besides the total and active parameters; dense rows read "-"; every row of the
// table is as wide as the header (columns stay aligned).
TEST(Cli, ListModelsShowsExpertsAttentionAndWeights) {
  std::string text;
  ASSERT_EQ(run_cli({"list", "models"}, &text), 0);
  std::istringstream lines(text);
  std::string header;
  std::getline(lines, header);
  EXPECT_THAT(header,
              ::testing::ContainsRegex("attention +ffn +experts +top-k +shared +dense +weights +KV/token +context "
                                       "+params +active$"));
  std::map<std::string, std::string> rows;
  for (std::string line; std::getline(lines, line) && !line.empty();) {
    EXPECT_EQ(line.size(), header.size()) << line;
    rows[line.substr(0, line.find(' '))] = line;
  }
  // Mixtral 8x7B: 46.7B parameters, 12.9B active (Jiang et al. 2024, section 2.1).
  EXPECT_THAT(rows["mixtral-8x7b"], ::testing::ContainsRegex(" gqa +14336 +8 +2 +- +- +bf16 .* 46\\.7B +12\\.9B$"));
  // Qwen1.5-MoE-A2.7B: 60 experts, top 4, a shared expert of 5632; 14.3B total, 2.7B active.
  EXPECT_THAT(rows["qwen1.5-moe"], ::testing::ContainsRegex(" 60 +4 +5632 +- +bf16 .* 14\\.3B +2\\.7B$"));
  EXPECT_THAT(rows["llama-2-70b"], ::testing::ContainsRegex(" gqa +28672 +- +- +- +- +bf16 .* 69\\.0B +69\\.0B$"));
  // DeepSeek-V3 (its config.json): MLA, 256 routed experts top-8, one shared expert of 2048, the first
  // 3 of 61 layers dense, block-scaled FP8; 671B parameters, 37B active (the V3 report's figures).
  EXPECT_THAT(rows["deepseek-v3"],
              ::testing::ContainsRegex(" mla +2048 +256 +8 +2048 +3 +fp8-block .* 671\\.0B +37\\.6B$"));
  // gpt-oss-120b: half its layers see a 128-token window; MXFP4 experts, 16-bit attention.
  EXPECT_THAT(rows["gpt-oss-120b"], ::testing::ContainsRegex(" gqa sw128 18/36 +2880 +128 +4 +- +- +bf16\\+mxfp4 "));
  // Llama 4 Maverick: every other layer MoE with a shared expert; 36 of 48 layers chunked.
  EXPECT_THAT(rows["llama-4-maverick"],
              ::testing::ContainsRegex(" gqa chunk8192 36/48 +8192 +128 +1 +8192 +24 +bf16 "));
}

}  // namespace
}  // namespace batchsim

namespace batchsim {
namespace {

TEST(Cli, AModelThatDoesNotFitSaysSoAndSuggestsTp) {
  const std::string msg = cli_error_of({"run", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--num-requests", "5"});
  EXPECT_THAT(msg, HasSubstr("llama-2-70b"));
  EXPECT_THAT(msg, HasSubstr("--tp"));
  EXPECT_EQ(run_cli({"run", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--tp", "4", "--num-requests", "5"}), 0);
}

TEST(Cli, PrefixOptionIsValidatedAndFeedsPrefixCaching) {
  EXPECT_THAT(cli_error_of({"run", "--prefix", "shared:x", "--num-requests", "5"}),
              HasSubstr("--prefix: \"shared:x\""));
  EXPECT_THAT(cli_error_of({"run", "--prefix", "groups:100", "--num-requests", "5"}), HasSubstr("--prefix"));
  EXPECT_THAT(cli_error_of({"run", "--policy", "orca", "--policy-opt", "prefix_caching=true", "--num-requests", "5"}),
              HasSubstr("prefix_caching=true: only applies with kv=paged"));
  EXPECT_THAT(
      cli_error_of({"run", "--policy", "hf-static", "--policy-opt", "prefix_caching=true", "--num-requests", "5"}),
      HasSubstr("no option 'prefix_caching'"));
  // A shared system prompt with the vllm preset (prefix caching on): hits, reported and written.
  const auto dir = testing::scratch_dir("cli_prefix");
  const auto config = testing::write_text_file(dir, "run.yaml",
                                               "prefix: shared:512\nnum-requests: 40\n"
                                               "arrival: poisson:20\npolicy: vllm\n");
  std::string text;
  ASSERT_EQ(run_cli({"run", "--config", config.string(), "--out", (dir / "out").string()}, &text), 0);
  EXPECT_THAT(text, HasSubstr("prefix cache:"));
  const auto summary = nlohmann::json::parse(testing::read_text_file(dir / "out" / "summary.json"));
  EXPECT_EQ(summary["config"]["prefix"], "shared:512");
  EXPECT_GT(summary["prefix_cache"]["hit_rate"].get<double>(), 0.4);  // 496 of ~1024 per request
  EXPECT_THAT(testing::read_text_file(dir / "out" / "requests.csv"),
              HasSubstr(",cached_tokens,priority,breakdown_queueing_s,"));
}

}  // namespace
}  // namespace batchsim
