// vLLM's own option names (experiments/cli/vllm_spellings.h): each read as batchsim's, said in a
// note, composed where vLLM composes them (rate and burstiness, lengths and their range), bad
// values refused by name; a run given the command line serves every request; an unknown
// option gets the command's closest one.
#include "experiments/cli/vllm_spellings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::run_cli;

using Args = std::vector<std::string>;

TEST(VllmSpellings, EachIsReadAsOursAndSaidSo) {
  const VllmSpellings s = read_vllm_spellings(
      {"--model", "llama-3-8b", "--num-prompts", "200", "--tensor-parallel-size=2", "--max-num-seqs", "128",
       "--max-num-batched-tokens", "2048", "--dataset-path", "t.csv", "--enable-prefix-caching", "--seed", "3"});
  EXPECT_EQ(s.args, (Args{"--model", "llama-3-8b", "--num-requests", "200", "--tp", "2", "--policy-opt",
                          "max_num_seqs=128", "--policy-opt", "max_num_batched_tokens=2048", "--trace", "t.csv",
                          "--policy-opt", "prefix_caching=true", "--seed", "3"}));
  EXPECT_THAT(s.notes,
              ElementsAre("read vLLM's --num-prompts 200 as --num-requests 200",
                          "read vLLM's --tensor-parallel-size 2 as --tp 2",
                          "read vLLM's --max-num-seqs 128 as --policy-opt max_num_seqs=128",
                          "read vLLM's --max-num-batched-tokens 2048 as --policy-opt max_num_batched_tokens=2048",
                          "read vLLM's --dataset-path t.csv as --trace t.csv",
                          "read vLLM's --enable-prefix-caching as --policy-opt prefix_caching=true"));
  EXPECT_FALSE(s.chunked_prefill_required);
  // batchsim's own spellings, and the options spelled alike, pass untouched.
  const Args ours = {"--tp", "2", "--gpu-memory-utilization", "0.8", "--max-concurrency", "16"};
  EXPECT_EQ(read_vllm_spellings(ours).args, ours);
  EXPECT_TRUE(read_vllm_spellings(ours).notes.empty());
  EXPECT_EQ(read_vllm_spellings({"-tp", "4"}).args, (Args{"--tp", "4"}));
  EXPECT_EQ(read_vllm_spellings({"--no-enable-prefix-caching"}).args, (Args{"--policy-opt", "prefix_caching=false"}));
  EXPECT_TRUE(read_vllm_spellings({"--enable-chunked-prefill"}).chunked_prefill_required);
  EXPECT_TRUE(read_vllm_spellings({"--enable-chunked-prefill"}).args.empty());
}

// vLLM's arrivals: gamma gaps of shape `burstiness` and mean 1 / rate (1: Poisson, inf: all at
// once); its random lengths: N, or int(N(1 - r)) to int(N(1 + r)).
TEST(VllmSpellings, RateAndBurstinessAndLengthsComposeAsVllmsDo) {
  EXPECT_EQ(read_vllm_spellings({"--request-rate", "4"}).args, (Args{"--arrival", "poisson:4"}));
  EXPECT_EQ(read_vllm_spellings({"--request-rate", "4", "--burstiness", "1"}).args, (Args{"--arrival", "poisson:4"}));
  EXPECT_EQ(read_vllm_spellings({"--burstiness", "0.25", "--request-rate", "8"}).args,
            (Args{"--arrival", "gamma:8:2"}));
  EXPECT_EQ(read_vllm_spellings({"--request-rate", "inf"}).args, (Args{"--arrival", "offline"}));
  EXPECT_EQ(read_vllm_spellings({"--random-input-len", "1000", "--random-output-len", "100"}).args,
            (Args{"--prompt-len", "fixed:1000", "--output-len", "fixed:100"}));
  EXPECT_EQ(read_vllm_spellings({"--random-input-len", "1000", "--random-range-ratio", "0.5"}).args,
            (Args{"--prompt-len", "uniform:500:1500"}));
}

TEST(VllmSpellings, BadValuesAreRefusedByName) {
  const auto why = [](const Args& a) { return testing::user_error_of([&] { read_vllm_spellings(a); }); };
  EXPECT_THAT(why({"--num-prompts"}), HasSubstr("--num-prompts: needs a value"));
  EXPECT_THAT(why({"-tp"}), HasSubstr("-tp: needs a value"));
  EXPECT_THAT(why({"--request-rate", "fast"}), HasSubstr("--request-rate"));
  EXPECT_THAT(why({"--request-rate", "-2"}), HasSubstr("--request-rate"));
  EXPECT_THAT(why({"--request-rate", "4", "--burstiness", "0"}), HasSubstr("--burstiness"));
  EXPECT_THAT(why({"--burstiness", "2"}), HasSubstr("give --request-rate too"));
  EXPECT_THAT(why({"--random-input-len", "0"}), HasSubstr("--random-input-len"));
  EXPECT_THAT(why({"--random-input-len", "10", "--random-range-ratio", "1.5"}), HasSubstr("--random-range-ratio"));
  EXPECT_THAT(why({"--random-range-ratio", "0.5"}), HasSubstr("give --random-input-len"));
  EXPECT_THAT(why({"--enable-prefix-caching=yes"}), HasSubstr("takes no value"));
}

// The command line: 200 requests at 4 req/s on TP 1 with vLLM's limits, all served.
TEST(VllmSpellings, ARunGivenVllmsFlagsServesEveryRequest) {
  const auto dir = testing::scratch_dir("vllm-spellings-run");
  const testing::CliRun r =
      testing::cli({"run", "--num-prompts", "200", "--request-rate", "4", "--tensor-parallel-size", "1",
                    "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--out", (dir / "out").string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("batchsim: note: read vLLM's --request-rate 4 as --arrival poisson:4"));
  const auto s = nlohmann::json::parse(testing::read_text_file(dir / "out" / "summary.json"));
  EXPECT_EQ(s["requests"]["total"], 200);
  EXPECT_EQ(s["requests"]["completed"], 200);
  EXPECT_EQ(s["config"]["tp"], 1);
  EXPECT_EQ(s["config"]["policy_opts"]["max_num_seqs"], "128");
  EXPECT_EQ(s["config"]["policy_opts"]["max_num_batched_tokens"], "2048");
  // compare and bench read them too.
  EXPECT_EQ(run_cli({"bench", "--num-prompts", "20", "--request-rate", "inf", "--repeat", "1"}), 0);
  EXPECT_EQ(run_cli({"compare", "--policies", "vllm", "--num-prompts", "20", "-tp", "1", "--jobs", "1", "--no-plots",
                     "--out", (dir / "cmp").string()}),
            0);
  // --enable-chunked-prefill holds the policy to chunking its prefills.
  EXPECT_EQ(run_cli({"run", "--policy", "vllm", "--enable-chunked-prefill", "--num-prompts", "5"}), 0);
  EXPECT_THAT(cli_error_of({"run", "--policy", "vllm-v0", "--enable-chunked-prefill", "--num-prompts", "5"}),
              HasSubstr("--enable-chunked-prefill: policy 'vllm-v0' does not chunk prefills"));
  EXPECT_THAT(
      cli_error_of({"compare", "--policies", "vllm,hf-static", "--enable-chunked-prefill", "--num-prompts", "5"}),
      HasSubstr("policy 'hf-static' does not chunk prefills"));
}

// An unknown option names the command's closest, when it is close.
TEST(VllmSpellings, AnUnknownOptionGetsTheClosestOne) {
  EXPECT_THAT(cli_error_of({"run", "--num-request", "5"}), HasSubstr("did you mean --num-requests?"));
  EXPECT_THAT(cli_error_of({"run", "--polcy", "vllm"}), HasSubstr("did you mean --policy?"));
  EXPECT_THAT(cli_error_of({"plan", "--max-replica", "4"}), HasSubstr("did you mean --max-replicas?"));
  EXPECT_THAT(cli_error_of({"run", "--bogus", "1"}), ::testing::Not(HasSubstr("did you mean")));
}

}  // namespace
}  // namespace batchsim
