// `batchsim validate-serving` on mixture-of-experts and disaggregated rows: how a row's
// aiconfigurator columns become a run (layout, concurrency, weight format), each rule that
// rewrites a row's columns where they contradict what ran, the reasons rows are skipped, the
// repeated measurements, prefill/decode pools, the report's per-model part, and the figures on
// NVIDIA's H100 MoE measurements (docs/validation.md quotes them).
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/cli.h"
#include "experiments/fidelity/validate_serving.h"
#include "experiments/run/runner.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// One row of a silicon file: `fields` by column name, the rest blank, in kSiliconHeader's order.
// Defaults: an aggregated h100_sxm row measured at TTFT 200 ms and TPOT 20 ms.
std::string silicon_row(std::map<std::string, std::string> fields) {
  const std::map<std::string, std::string> defaults = {{"id", "row"},
                                                       {"silicon_data_source", "src"},
                                                       {"system", "h100_sxm"},
                                                       {"mode", "agg"},
                                                       {"isl", "1024"},
                                                       {"osl", "128"},
                                                       {"pp_size", "1"},
                                                       {"silicon_ttft_ms", "200.0"},
                                                       {"silicon_tpot_ms", "20.0"}};
  for (const auto& [k, v] : defaults) fields.try_emplace(k, v);
  std::string line;
  std::istringstream header(testing::kSiliconHeader.substr(0, testing::kSiliconHeader.find('\n')));
  std::string column;
  bool first = true;
  while (std::getline(header, column, ',')) {
    if (!first) line += ',';
    if (fields.count(column)) line += fields.at(column);
    first = false;
  }
  return line + "\n";
}

// The rows validate-serving reads from `rows` (silicon_row lines).
ServingRows read_rows(const std::string& test, const std::string& rows, ServingReplayOptions o = {}) {
  const auto csv = testing::write_text_file(testing::scratch_dir(test), "s.csv", testing::kSiliconHeader + rows);
  return read_serving_rows(csv.string(), o);
}

// A row's replay run by hand on `c`: `clients` closed-loop clients sending `requests` requests of
// the silicon row's 1024-token prompts and `osl` output tokens, all due at once.
RunOutcome run_by_hand(RunConfig c, int osl, int64_t requests, int64_t clients) {
  c.workload.arrival = "offline";
  c.workload.prompt_len = "fixed:1024";
  c.workload.output_len = fmt::format("fixed:{}", osl);
  c.workload.num_requests = requests;
  c.max_concurrency = clients;
  return run_simulation(c);
}

const std::string kQwen3 = "Qwen/Qwen3-235B-A22B-FP8";  // 128 experts, top 8, block FP8
const std::string kGptOss = "openai/gpt-oss-120b";      // MXFP4 experts, 16-bit attention
const std::string kMiniMax = "MiniMaxAI/MiniMax-M2.5";  // 256 experts, block FP8

// aiconfigurator's columns are RunConfig's: tp the attention TP of one attention-DP rank,
// attention_dp_size the ranks, moe_tp x moe_ep the experts over the same GPUs; a size left 0 is
// inferred from the other; the client's concurrency comes from silicon_data_source.
TEST(ValidateServingMoe, ColumnsMapToTheRunsLayout) {
  const ServingRows read =
      read_rows("moe-layouts", silicon_row({{"id", "tep"},
                                            {"backend", "trtllm"},
                                            {"backend_version", "1.0.0rc3"},
                                            {"model_path", kQwen3},
                                            {"precision", "fp8"},
                                            {"gemm_quant_mode", "fp8_block"},
                                            {"moe_quant_mode", "fp8_block"},
                                            {"batch_size", "16"},
                                            {"tp_size", "4"},
                                            {"moe_tp_size", "1"},
                                            {"moe_ep_size", "4"},
                                            {"silicon_data_source", "source_file=q.csv; silicon_concurrency=16"}}) +
                                   silicon_row({{"id", "mixed"},
                                                {"backend", "trtllm"},
                                                {"model_path", kQwen3},
                                                {"precision", "fp8"},
                                                {"gemm_quant_mode", "fp8_block"},
                                                {"moe_quant_mode", "fp8_block"},
                                                {"batch_size", "16"},
                                                {"tp_size", "4"},
                                                {"moe_tp_size", "2"},
                                                {"moe_ep_size", "0"}}) +
                                   silicon_row({{"id", "tp"},
                                                {"backend", "vllm"},
                                                {"backend_version", "0.18.0"},
                                                {"model_path", kGptOss},
                                                {"precision", "fp4"},
                                                {"gemm_quant_mode", "nvfp4"},
                                                {"moe_quant_mode", "nvfp4"},
                                                {"batch_size", "8"},
                                                {"tp_size", "8"},
                                                {"attention_dp_size", "1"},
                                                {"moe_tp_size", "8"},
                                                {"moe_ep_size", "1"}}) +
                                   silicon_row({{"id", "dep"},
                                                {"backend", "sglang"},
                                                {"model_path", kQwen3},
                                                {"precision", "fp8"},
                                                {"gemm_quant_mode", "fp8_block"},
                                                {"moe_quant_mode", "fp8_block"},
                                                {"batch_size", "8"},
                                                {"tp_size", "1"},
                                                {"attention_dp_size", "4"},
                                                {"moe_tp_size", "1"},
                                                {"moe_ep_size", "4"}}));
  ASSERT_EQ(read.rows.size(), 4u);
  const ServingRow& tep = read.rows[0];
  EXPECT_EQ(tep.layout(), (ParallelLayout{4, 1, 4, 1}));
  EXPECT_EQ(tep.concurrency, 16);
  EXPECT_EQ(tep.weight_dtype, "fp8-block");  // the checkpoint's and the label's
  EXPECT_TRUE(tep.normalisations.empty());
  EXPECT_EQ(read.rows[1].layout(), (ParallelLayout{4, 1, 2, 2}));  // moe_ep_size 0: 4 / 2
  EXPECT_EQ(read.rows[1].concurrency, 16);                         // batch_size x 1 rank
  EXPECT_EQ(read.rows[2].layout(), (ParallelLayout{8, 1, 1, 8}));
  EXPECT_TRUE(read.rows[2].layout().is_plain_tp());
  // batch_size is per attention-DP rank: 8 x 4 ranks (aiconfigurator base_backend.py).
  EXPECT_EQ(read.rows[3].layout(), (ParallelLayout{1, 4, 4, 1}));
  EXPECT_EQ(read.rows[3].concurrency, 32);
  EXPECT_TRUE(read.moe_or_disaggregated);
  EXPECT_TRUE(read.skipped.empty());
}

// vLLM's DP rows with tp = attention_dp ran DP attention on attention_dp GPUs (rule vllm-dep):
// NVIDIA's MiniMax rows say tp4 adp4 moe_ep16 for a 4-GPU DEP. The experts go EP over those GPUs
// when the row has EP, TP otherwise; other backends' rows keep their columns.
TEST(ValidateServingMoe, VllmTpEqualToAttentionDpIsDataParallelAttentionOnTpGpus) {
  const std::string common_source = "source_file=2026-04-06.csv; silicon_concurrency=64";
  const ServingRows read = read_rows("moe-vllm-dep", silicon_row({{"backend", "vllm"},
                                                                  {"backend_version", "0.18.0"},
                                                                  {"model_path", kMiniMax},
                                                                  {"precision", "fp8"},
                                                                  {"gemm_quant_mode", "fp8"},
                                                                  {"moe_quant_mode", "fp8"},
                                                                  {"batch_size", "16"},
                                                                  {"tp_size", "4"},
                                                                  {"attention_dp_size", "4"},
                                                                  {"moe_tp_size", "1"},
                                                                  {"moe_ep_size", "16"},
                                                                  {"silicon_data_source", common_source}}) +
                                                         silicon_row({{"backend", "vllm"},
                                                                      {"backend_version", "0.18.0"},
                                                                      {"model_path", kMiniMax},
                                                                      {"precision", "fp8"},
                                                                      {"batch_size", "16"},
                                                                      {"tp_size", "4"},
                                                                      {"attention_dp_size", "4"},
                                                                      {"moe_tp_size", "16"},
                                                                      {"moe_ep_size", "1"},
                                                                      {"silicon_data_source", common_source}}) +
                                                         silicon_row({{"backend", "sglang"},
                                                                      {"model_path", kMiniMax},
                                                                      {"precision", "fp8"},
                                                                      {"batch_size", "16"},
                                                                      {"tp_size", "2"},
                                                                      {"attention_dp_size", "2"},
                                                                      {"moe_tp_size", "1"},
                                                                      {"moe_ep_size", "4"}}));
  ASSERT_EQ(read.rows.size(), 3u);
  EXPECT_EQ(read.rows[0].layout(), (ParallelLayout{1, 4, 4, 1}));
  EXPECT_EQ(read.rows[0].concurrency, 64);
  EXPECT_THAT(read.rows[0].normalisations, ElementsAre("vllm-dep", "checkpoint-format"));
  EXPECT_EQ(read.rows[1].layout(), (ParallelLayout{1, 4, 1, 4}));
  EXPECT_EQ(read.rows[2].layout(), (ParallelLayout{2, 2, 4, 1}));              // SGLang: as recorded
  EXPECT_THAT(read.rows[2].normalisations, ElementsAre("checkpoint-format"));  // fp8: its block FP8
  EXPECT_EQ(read.rows[2].concurrency, 32);
  EXPECT_EQ(read.normalised.at("vllm-dep"), 2);
}

// A TensorRT-LLM row whose client concurrency is batch_size x tp_size ran attention DP over its
// tp_size GPUs (rule trtllm-attention-dp, NVIDIA's gpt-oss rows); one whose concurrency is its
// batch_size did not.
TEST(ValidateServingMoe, TrtllmConcurrencyOfTpRanksIsAttentionDp) {
  auto gpt_oss = [](const std::string& concurrency) {
    return silicon_row({{"backend", "trtllm"},
                        {"backend_version", "1.3.0rc1"},
                        {"model_path", kGptOss},
                        {"precision", "fp8"},
                        {"gemm_quant_mode", "fp8"},
                        {"moe_quant_mode", "fp8"},
                        {"isl", "4000"},
                        {"osl", "1000"},
                        {"batch_size", "40"},
                        {"tp_size", "4"},
                        {"moe_tp_size", "2"},
                        {"moe_ep_size", "2"},
                        {"silicon_data_source", "source_file=g.csv; silicon_concurrency=" + concurrency}});
  };
  const ServingRows read = read_rows("moe-trtllm-dp", gpt_oss("160") + gpt_oss("40"));
  ASSERT_EQ(read.rows.size(), 2u);
  EXPECT_EQ(read.rows[0].layout(), (ParallelLayout{1, 4, 2, 2}));
  EXPECT_EQ(read.rows[0].concurrency, 160);
  EXPECT_THAT(read.rows[0].normalisations, ElementsAre("trtllm-attention-dp", "checkpoint-format"));
  EXPECT_EQ(read.rows[1].layout(), (ParallelLayout{4, 1, 2, 2}));
  EXPECT_THAT(read.rows[1].normalisations, ElementsAre("checkpoint-format"));
  EXPECT_EQ(read.normalised.at("trtllm-attention-dp"), 1);
  EXPECT_EQ(read.normalised.at("checkpoint-format"), 2);
}

// A quantized checkpoint runs in its own formats whatever the labels say (rule
// checkpoint-format); a 16-bit checkpoint in the label's, both layers alike.
TEST(ValidateServingMoe, AQuantizedCheckpointRunsItsOwnFormats) {
  auto row = [](const std::string& model, const std::string& gemm, const std::string& moe) {
    return silicon_row({{"backend", "vllm"},
                        {"backend_version", "0.18.0"},
                        {"model_path", model},
                        {"precision", gemm == "nvfp4" ? "fp4" : gemm},
                        {"gemm_quant_mode", gemm},
                        {"moe_quant_mode", moe},
                        {"batch_size", "8"},
                        {"tp_size", "4"},
                        {"moe_tp_size", "1"},
                        {"moe_ep_size", "4"}});
  };
  const ServingRows read = read_rows(
      "moe-formats", row(kMiniMax, "fp8", "fp8") + row(kQwen3, "fp8_block", "fp8_block") +
                         row(kGptOss, "nvfp4", "nvfp4") + row("Qwen/Qwen3-235B-A22B", "fp8", "fp8") +
                         row("Qwen/Qwen3-235B-A22B", "fp8", "fp8_block") + row(kQwen3, "int4_awq", "int4_awq") +
                         silicon_row({{"backend", "vllm"},
                                      {"model_path", "meta-llama/Llama-3.1-8B-Instruct"},
                                      {"precision", "fp8"},
                                      {"gemm_quant_mode", "fp8"},
                                      {"batch_size", "8"},
                                      {"tp_size", "1"},
                                      {"moe_tp_size", "1"},
                                      {"moe_ep_size", "1"}}));
  ASSERT_EQ(read.rows.size(), 5u);
  EXPECT_EQ(read.rows[0].weight_dtype, "fp8-block");  // MiniMax-M2.5: 128 x 128 block FP8
  EXPECT_THAT(read.rows[0].normalisations, ElementsAre("checkpoint-format"));
  EXPECT_EQ(read.rows[1].weight_dtype, "fp8-block");
  EXPECT_TRUE(read.rows[1].normalisations.empty());
  EXPECT_EQ(read.rows[2].weight_dtype, "auto");  // MXFP4 experts, 16-bit attention
  EXPECT_THAT(read.rows[2].normalisations, ElementsAre("checkpoint-format"));
  EXPECT_EQ(read.rows[3].weight_dtype, "fp8");  // a 16-bit checkpoint quantised online
  EXPECT_TRUE(read.rows[3].normalisations.empty());
  EXPECT_EQ(read.rows[4].weight_dtype, "fp8");  // dense Llama: layouts of MoE columns ignored
  EXPECT_EQ(read.rows[4].layout(), (ParallelLayout{1, 1, 1, 0}));
  EXPECT_EQ(read.skipped.at("gemm_quant_mode fp8 and moe_quant_mode fp8_block on a 16-bit checkpoint: one "
                            "--weight-dtype sets both"),
            1);
  EXPECT_EQ(read.skipped.at("precision int4_awq: not modelled"), 1);
}

// Rows whose layout the simulator does not express are skipped and counted, each with its reason.
TEST(ValidateServingMoe, RowsItCannotExpressAreCountedWithTheirReason) {
  auto agg = [](std::map<std::string, std::string> f) {
    f.try_emplace("backend", "trtllm");
    f.try_emplace("model_path", kQwen3);
    f.try_emplace("precision", "fp8");
    f.try_emplace("batch_size", "8");
    return silicon_row(f);
  };
  auto disagg = [](std::map<std::string, std::string> f) {
    const std::map<std::string, std::string> pools = {
        {"prefill_tp_size", "8"},     {"prefill_pp_size", "1"},    {"prefill_moe_tp_size", "8"},
        {"prefill_moe_ep_size", "1"}, {"decode_tp_size", "8"},     {"decode_pp_size", "1"},
        {"decode_moe_tp_size", "8"},  {"decode_moe_ep_size", "1"}, {"prefill_num_workers", "1"},
        {"decode_num_workers", "1"},  {"decode_batch_size", "8"},  {"prefill_batch_size", "1"}};
    for (const auto& [k, v] : pools) f.try_emplace(k, v);
    f.try_emplace("backend", "trtllm");
    f.try_emplace("model_path", kQwen3);
    f.try_emplace("precision", "fp8");
    f["mode"] = "disagg";
    return silicon_row(f);
  };
  const ServingRows read = read_rows(
      "moe-skips",
      agg({{"tp_size", "4"}, {"moe_tp_size", "1"}, {"moe_ep_size", "8"}}) +      // 4 GPUs, experts over 8
          agg({{"tp_size", "4"}, {"moe_tp_size", "0"}, {"moe_ep_size", "0"}}) +  // experts' layout not recorded
          agg({{"tp_size", "4"}, {"pp_size", "2"}, {"moe_ep_size", "8"}}) +
          agg({{"tp_size", "3"}, {"moe_tp_size", "1"}, {"moe_ep_size", "3"}}) +  // 128 experts over 3 GPUs
          agg({{"model_path", "meta-llama/Llama-3.1-8B-Instruct"}, {"tp_size", "1"}, {"attention_dp_size", "2"}}) +
          // No workers, and no recorded row with its measurement (rule recorded-twin).
          disagg({{"prefill_num_workers", ""}, {"decode_num_workers", ""}, {"silicon_ttft_ms", "321.5"}}) +
          disagg({{"prefill_tp_size", "1"},  // expressible: a prefill pool of 8 attention-DP ranks, EP 8
                  {"prefill_attention_dp_size", "8"},
                  {"prefill_moe_tp_size", "1"},
                  {"prefill_moe_ep_size", "8"},
                  {"decode_batch_size", "4"},
                  {"decode_attention_dp_size", "2"},
                  {"decode_tp_size", "4"}}) +
          disagg({{"decode_moe_tp_size", "1"}, {"decode_moe_ep_size", "8"}}) +  // expressible: EP 8 decode pool
          disagg({{"backend", "sglang"}}) +  // expressible: SGLang's own P/D on its preset
          disagg({}),                        // expressible: 1 x TP 8 + 1 x TP 8 on TensorRT-LLM's preset
      ServingReplayOptions{});
  ASSERT_EQ(read.rows.size(), 4u);
  EXPECT_EQ(read.rows[0].mode, "disagg");
  EXPECT_EQ(read.rows[0].prefill.layout, (ParallelLayout{1, 8, 8, 1}));
  EXPECT_EQ(read.rows[0].decode.layout, (ParallelLayout{4, 2, 1, 8}));
  // decode_batch_size is per attention-DP rank: 4 x 2 ranks x 1 worker.
  EXPECT_EQ(read.rows[0].concurrency, 8);
  EXPECT_EQ(read.rows[1].decode.layout, (ParallelLayout{8, 1, 8, 1}));
  EXPECT_EQ(read.rows[1].prefill.layout, (ParallelLayout{8, 1, 1, 8}));
  EXPECT_EQ(read.rows[2].backend, "sglang");
  EXPECT_EQ(read.rows[3].decode.layout, (ParallelLayout{8, 1, 1, 8}));
  const std::map<std::string, int64_t> expected = {
      {"tp_size x attention_dp_size != moe_tp_size x moe_ep_size (aiconfigurator's width rule, sdk/config.py "
       "resolve_moe_parallelism)",
       1},
      {"moe_tp_size and moe_ep_size not recorded (aiconfigurator's resolve_moe_parallelism refuses that too)", 1},
      {"pipeline parallelism: not simulated", 1},
      {"layout TP 3, EP 3: --ep 3: model 'qwen3-235b-a22b-fp8' has 128 experts, which EP 3 does not divide", 1},
      {"attention DP of a dense model (independent replicas): not replayed", 1},
      {"no worker counts in the row (aiconfigurator's own estimator refuses them: "
       "tools/accuracy_regression_testing/predict_silicon_sample.py)",
       1},
  };
  for (const auto& [why, n] : expected) {
    ASSERT_TRUE(read.skipped.count(why)) << why;
    EXPECT_EQ(read.skipped.at(why), n) << why;
  }
  EXPECT_EQ(static_cast<int64_t>(read.skipped.size()), static_cast<int64_t>(expected.size()));
}

// Rule recorded-twin: a disaggregated row without worker counts that repeats the measurement of a
// row that records them (the same backend, lengths, clients, TTFT and TPOT) replays that row's
// pools, layouts included, wherever in the file the twin is; one that repeats none, or differs
// in a length, stays skipped.
TEST(ValidateServingMoe, ARepeatWithoutWorkersReplaysItsRecordedTwinsPools) {
  auto disagg = [](std::map<std::string, std::string> f) {
    const std::map<std::string, std::string> pools = {{"prefill_tp_size", "1"},
                                                      {"prefill_attention_dp_size", "8"},
                                                      {"prefill_moe_tp_size", "1"},
                                                      {"prefill_moe_ep_size", "8"},
                                                      {"decode_tp_size", "8"},
                                                      {"decode_moe_tp_size", "1"},
                                                      {"decode_moe_ep_size", "8"},
                                                      {"prefill_num_workers", "1"},
                                                      {"decode_num_workers", "3"},
                                                      {"decode_batch_size", "2"},
                                                      {"prefill_batch_size", "1"},
                                                      {"silicon_ttft_ms", "13693.258112009305"},
                                                      {"silicon_tpot_ms", "14.657867551218844"}};
    for (const auto& [k, v] : pools) f.try_emplace(k, v);
    f.try_emplace("backend", "trtllm");
    f.try_emplace("model_path", kQwen3);
    f.try_emplace("precision", "fp8");
    f.try_emplace("silicon_data_source", "silicon_concurrency=6");
    f["mode"] = "disagg";
    return silicon_row(f);
  };
  // The repeats write the prefill pool as TP 8 without DP (as NVIDIA's R1 dumps do) and no workers.
  const std::map<std::string, std::string> repeat = {{"prefill_num_workers", ""},
                                                     {"decode_num_workers", ""},
                                                     {"decode_batch_size", ""},
                                                     {"prefill_batch_size", ""},
                                                     {"prefill_tp_size", "8"},
                                                     {"prefill_attention_dp_size", "1"},
                                                     {"silicon_ttft_ms", "13693.258112009304"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    std::map<std::string, std::string> f = repeat;
    for (const auto& [k, v] : extra) f[k] = v;
    return disagg(f);
  };
  const ServingRows read = read_rows("moe-recorded-twin",
                                     with({{"id", "repeat-first"}}) + disagg({{"id", "recorded"}}) +
                                         with({{"id", "other-osl"}, {"osl", "256"}}) +
                                         with({{"id", "other-tpot"}, {"silicon_tpot_ms", "14.7"}}),
                                     ServingReplayOptions{});
  ASSERT_EQ(read.rows.size(), 2u);
  EXPECT_EQ(read.rows[0].id, "repeat-first");
  EXPECT_EQ(read.rows[1].id, "recorded");
  for (const ServingRow& r : read.rows) {
    SCOPED_TRACE(r.id);
    EXPECT_EQ(r.prefill.workers, 1);
    EXPECT_EQ(r.decode.workers, 3);
    EXPECT_EQ(r.decode.batch, 2);
    EXPECT_EQ(r.prefill.layout, (ParallelLayout{1, 8, 8, 1}));
    EXPECT_EQ(r.decode.layout, (ParallelLayout{8, 1, 8, 1}));
    EXPECT_EQ(r.concurrency, 6);
  }
  EXPECT_EQ(read.rows[0].normalisations, (std::vector<std::string>{"recorded-twin", "checkpoint-format"}));
  EXPECT_EQ(read.normalised.at("recorded-twin"), 1);
  EXPECT_EQ(read.skipped.at("no worker counts in the row (aiconfigurator's own estimator refuses them: "
                            "tools/accuracy_regression_testing/predict_silicon_sample.py)"),
            2);
}

// Rule sglang-one-pair: SGLang's disaggregated rows without worker counts are read as one
// prefill and one decode worker (an assumption the rule's text argues), and counted; another
// backend's such row is not.
TEST(ValidateServingMoe, SglangRowsWithoutWorkersAssumeOnePair) {
  auto row = [](const std::string& backend, const std::string& ttft) {
    return silicon_row({{"backend", backend},
                        {"model_path", kQwen3},
                        {"precision", "fp8"},
                        {"mode", "disagg"},
                        {"silicon_data_source", "silicon_concurrency=16"},
                        {"silicon_ttft_ms", ttft},
                        {"prefill_tp_size", "8"},
                        {"prefill_moe_tp_size", "8"},
                        {"decode_tp_size", "8"},
                        {"decode_moe_tp_size", "8"}});
  };
  const ServingRows read =
      read_rows("moe-sglang-one-pair", row("sglang", "300.5") + row("trtllm", "301.5"), ServingReplayOptions{});
  ASSERT_EQ(read.rows.size(), 1u);
  const ServingRow& r = read.rows[0];
  EXPECT_EQ(r.backend, "sglang");
  EXPECT_EQ(r.prefill.workers, 1);
  EXPECT_EQ(r.decode.workers, 1);
  EXPECT_EQ(r.concurrency, 16);
  EXPECT_EQ(r.decode.layout, (ParallelLayout{8, 1, 1, 8}));
  EXPECT_EQ(read.normalised.at("sglang-one-pair"), 1);
  const ServingNormalisation* rule = nullptr;
  for (const ServingNormalisation& n : serving_normalisations()) {
    if (std::string(n.name) == "sglang-one-pair") rule = &n;
  }
  ASSERT_NE(rule, nullptr);
  EXPECT_THAT(rule->rule, HasSubstr("ASSUMED"));
  EXPECT_EQ(read.skipped.size(), 1u);  // the TensorRT-LLM row: no worker counts
}

// Rule vllm-experts-tp: a vLLM row that records neither expert size runs vLLM's default, the
// experts TP over the worker's GPUs; another backend's such row stays skipped.
TEST(ValidateServingMoe, VllmRowsWithoutExpertSizesRunTheExpertsTensorParallel) {
  auto row = [](const std::string& backend) {
    return silicon_row({{"backend", backend},
                        {"model_path", kQwen3},
                        {"precision", "fp8"},
                        {"batch_size", "8"},
                        {"tp_size", "1"},
                        {"attention_dp_size", "4"},
                        {"moe_tp_size", "0"},
                        {"moe_ep_size", ""}});
  };
  const ServingRows read = read_rows("moe-vllm-experts-tp", row("vllm") + row("trtllm"), ServingReplayOptions{});
  ASSERT_EQ(read.rows.size(), 1u);
  EXPECT_EQ(read.rows[0].backend, "vllm");
  EXPECT_EQ(read.rows[0].layout(), (ParallelLayout{1, 4, 1, 4}));
  EXPECT_EQ(read.normalised.at("vllm-experts-tp"), 1);
  EXPECT_EQ(read.skipped.at("moe_tp_size and moe_ep_size not recorded (aiconfigurator's resolve_moe_parallelism "
                            "refuses that too)"),
            1);
}

// A row that repeats an earlier row's TTFT and TPOT (to the 17th digit the dumps re-print) is
// counted, and named by the earlier row's id.
TEST(ValidateServingMoe, RepeatedMeasurementsAreFound) {
  auto row = [](const std::string& id, const std::string& ttft, const std::string& tpot) {
    return silicon_row({{"id", id},
                        {"backend", "vllm"},
                        {"backend_version", "0.18.0"},
                        {"model_path", kGptOss},
                        {"precision", "fp4"},
                        {"batch_size", "4"},
                        {"tp_size", "2"},
                        {"moe_tp_size", "2"},
                        {"moe_ep_size", "1"},
                        {"silicon_ttft_ms", ttft},
                        {"silicon_tpot_ms", tpot}});
  };
  const ServingRows read = read_rows("moe-repeats", row("a", "31.777605996467173", "3.6378634292781338") +
                                                        row("b", "31.777605996467173", "3.6378634292781333") +
                                                        row("c", "31.8", "3.6378634292781338"));
  ASSERT_EQ(read.rows.size(), 3u);
  EXPECT_EQ(read.repeated, 1);
  EXPECT_EQ(read.rows[0].repeats, "");
  EXPECT_EQ(read.rows[1].repeats, "a");
  EXPECT_EQ(read.rows[2].repeats, "");
}

// A disaggregated row with its worker counts runs as prefill and decode pools of those workers,
// each with the limits aiconfigurator's generator writes for its role: the same run by hand.
TEST(ValidateServingMoe, DisaggregatedRowsRunAsPrefillAndDecodePools) {
  const auto dir = testing::scratch_dir("moe-disagg");
  const auto csv = testing::write_text_file(
      dir, "s.csv",
      testing::kSiliconHeader + silicon_row({{"backend", "vllm"},
                                             {"backend_version", "0.12.0"},
                                             {"model_path", "meta-llama/Llama-3.1-8B-Instruct"},
                                             {"mode", "disagg"},
                                             {"osl", "64"},
                                             {"prefill_num_workers", "1"},
                                             {"prefill_batch_size", "1"},
                                             {"prefill_tp_size", "1"},
                                             {"decode_num_workers", "2"},
                                             {"decode_batch_size", "4"},
                                             {"decode_tp_size", "2"}}));
  ServingReplayOptions o;
  o.gpu = "h100-sxm-fitted";
  o.requests_per_client = 3;
  const ServingRows read = read_serving_rows(csv.string(), o);
  ASSERT_EQ(read.rows.size(), 1u);
  const ServingRow& r = read.rows[0];
  EXPECT_EQ(r.concurrency, 8);  // decode_batch_size x decode workers (no silicon_concurrency)
  EXPECT_EQ(r.prefill.workers, 1);
  EXPECT_EQ(r.decode.layout.tp, 2);
  const ServingPrediction p = replay_serving_row(r, o);
  EXPECT_EQ(p.config.prefill_replicas, 1);
  EXPECT_EQ(p.config.decode_replicas, 2);
  EXPECT_EQ(p.config.prefill.policy_opts.at("max_num_batched_tokens"), "2524");  // isl + 1500
  EXPECT_EQ(p.config.prefill.policy_opts.at("max_num_seqs"), "1");
  EXPECT_EQ(p.config.decode.policy_opts.at("max_num_seqs"), "4");
  EXPECT_EQ(p.config.decode.policy_opts.at("max_num_batched_tokens"), "4");
  RunConfig c = default_run_config();
  c.model = "llama-3.1-8b";
  c.gpu = "h100-sxm-fitted";
  c.policy = "vllm-v1-2025";
  c.engine = "vllm";
  c.prefill_replicas = 1;
  c.decode_replicas = 2;
  c.prefill.tp = 1;
  c.decode.tp = 2;
  c.prefill.policy_opts = {{"max_num_seqs", "1"}, {"max_num_batched_tokens", "2524"}};
  c.decode.policy_opts = {{"max_num_seqs", "4"}, {"max_num_batched_tokens", "4"}};
  const RunOutcome run = run_by_hand(c, 64, 24, 8);
  EXPECT_GT(run.result.summary.ttft_s.mean, 0);
  EXPECT_DOUBLE_EQ(p.ttft_ms, run.result.summary.ttft_s.mean * 1e3);
  EXPECT_DOUBLE_EQ(p.tpot_ms, run.result.summary.tpot_s.mean * 1e3);
}

// A disaggregated MoE row runs each pool in its own layout, its experts' parallelism included:
// the same run by hand, and a decode pool whose experts split by TP instead runs differently.
TEST(ValidateServingMoe, DisaggregatedPoolsRunInTheirOwnExpertLayouts) {
  const auto csv = testing::write_text_file(
      testing::scratch_dir("moe-disagg-1p1d"), "s.csv",
      testing::kSiliconHeader + silicon_row({{"backend", "trtllm"},
                                             {"model_path", kQwen3},
                                             {"precision", "fp8"},
                                             {"mode", "disagg"},
                                             {"osl", "16"},
                                             {"silicon_data_source", "x; silicon_concurrency=4"},
                                             {"prefill_num_workers", "1"},
                                             {"decode_num_workers", "2"},
                                             {"prefill_tp_size", "8"},
                                             {"prefill_pp_size", "1"},
                                             {"prefill_moe_tp_size", "1"},
                                             {"prefill_moe_ep_size", "8"},
                                             {"decode_tp_size", "8"},
                                             {"decode_pp_size", "1"},
                                             {"decode_moe_tp_size", "1"},
                                             {"decode_moe_ep_size", "8"}}));
  ServingReplayOptions o;
  o.gpu = "h100-sxm-fitted";
  o.requests_per_client = 2;
  const ServingRows read = read_serving_rows(csv.string(), o);
  ASSERT_EQ(read.rows.size(), 1u);
  const ServingRow& r = read.rows[0];
  EXPECT_EQ(r.decode.layout, (ParallelLayout{8, 1, 8, 1}));
  const ServingPrediction p = replay_serving_row(r, o);
  EXPECT_EQ(p.config.prefill_replicas, 1);
  EXPECT_EQ(p.config.decode_replicas, 2);
  ASSERT_TRUE(p.config.decode.ep.has_value());
  EXPECT_EQ(*p.config.decode.ep, 8);
  EXPECT_EQ(*p.config.prefill.ep, 8);
  RunConfig c = p.config;
  const RunOutcome run = run_by_hand(c, 16, 8, 4);
  EXPECT_DOUBLE_EQ(p.ttft_ms, run.result.summary.ttft_s.mean * 1e3);
  EXPECT_DOUBLE_EQ(p.tpot_ms, run.result.summary.tpot_s.mean * 1e3);
  // The decode pool's experts are costed in its own layout: over 8 GPUs by TP instead, each
  // GPU reads an eighth of every touched expert rather than its whole experts.
  c.decode.ep = 1;
  c.decode.moe_tp = 8;
  const RunOutcome tp_decode = run_by_hand(c, 16, 8, 4);
  EXPECT_NE(tp_decode.result.summary.tpot_s.mean, run.result.summary.tpot_s.mean);
}

// An MoE row with attention DP replays on dp schedulers in lockstep, each capped at the
// deployment's per-rank max_batch_size; the same run by hand.
TEST(ValidateServingMoe, AttentionDpRowsRunOnTheirRanks) {
  const auto csv = testing::write_text_file(
      testing::scratch_dir("moe-dp-replay"), "s.csv",
      testing::kSiliconHeader + silicon_row({{"backend", "vllm"},
                                             {"backend_version", "0.18.0"},
                                             {"model_path", kMiniMax},
                                             {"precision", "fp8"},
                                             {"gemm_quant_mode", "fp8"},
                                             {"moe_quant_mode", "fp8"},
                                             {"osl", "32"},
                                             {"batch_size", "2"},
                                             {"tp_size", "4"},
                                             {"attention_dp_size", "4"},
                                             {"moe_tp_size", "1"},
                                             {"moe_ep_size", "16"},
                                             {"silicon_data_source", "x; silicon_concurrency=8"}}));
  ServingReplayOptions o;
  o.gpu = "h100-sxm-fitted";
  o.requests_per_client = 2;
  const ServingRows read = read_serving_rows(csv.string(), o);
  ASSERT_EQ(read.rows.size(), 1u);
  const ServingPrediction p = replay_serving_row(read.rows[0], o);
  EXPECT_EQ(p.config.tp, 1);
  EXPECT_EQ(p.config.dp, 4);
  EXPECT_EQ(p.config.ep, 4);
  EXPECT_EQ(p.config.weight_dtype, "fp8-block");
  EXPECT_EQ(p.config.policy_opts.at("max_num_seqs"), "2");               // 8 clients over 4 ranks
  EXPECT_EQ(p.config.policy_opts.at("max_num_batched_tokens"), "2526");  // 2 + 1024 + 1500
  RunConfig c = default_run_config();
  c.model = "minimax-m2.5";
  c.gpu = "h100-sxm-fitted";
  c.tp = 1;
  c.dp = 4;
  c.ep = 4;
  c.moe_tp = 1;
  c.weight_dtype = "fp8-block";
  c.kv_cache_dtype = "fp8";
  c.policy = "vllm-v1-2025";
  c.engine = "vllm-async";
  c.policy_opts = {{"max_num_seqs", "2"}, {"max_num_batched_tokens", "2526"}, {"async_scheduling", "true"}};
  const RunOutcome run = run_by_hand(c, 32, 16, 8);
  EXPECT_DOUBLE_EQ(p.ttft_ms, run.result.summary.ttft_s.mean * 1e3);
  EXPECT_DOUBLE_EQ(p.tpot_ms, run.result.summary.tpot_s.mean * 1e3);
  // --moe-routing reaches every replayed run.
  o.moe_routing = "power:1.2";
  EXPECT_EQ(replay_serving_row(read.rows[0], o).config.moe_routing, "power:1.2");
}

// A file of MoE rows gets the report's further parts (per model, coverage, rules, repeats) in the
// terminal and in --out; a dense aggregated file's report does not.
TEST(ValidateServingMoe, TheReportOfAMoeFileHasItsFurtherParts) {
  const auto dir = testing::scratch_dir("moe-report");
  auto gpt_oss = [](const std::string& id, int clients, const std::string& ttft) {
    return silicon_row({{"id", id},
                        {"backend", "vllm"},
                        {"backend_version", "0.18.0"},
                        {"model_path", kGptOss},
                        {"precision", "fp4"},
                        {"gemm_quant_mode", "nvfp4"},
                        {"moe_quant_mode", "nvfp4"},
                        {"osl", "32"},
                        {"batch_size", std::to_string(clients)},
                        {"tp_size", "2"},
                        {"moe_tp_size", "2"},
                        {"moe_ep_size", "1"},
                        {"silicon_ttft_ms", ttft}});
  };
  const auto csv = testing::write_text_file(dir, "s.csv",
                                            testing::kSiliconHeader + gpt_oss("a", 4, "60.0") +
                                                gpt_oss("a-again", 4, "60.0") + gpt_oss("b", 8, "70.0") +
                                                silicon_row({{"backend", "trtllm"},
                                                             {"model_path", "deepseek-ai/DeepSeek-R1"},
                                                             {"mode", "disagg"},
                                                             {"precision", "fp8"}}));
  std::ostringstream out, err;
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted",
                      "--requests-per-client", "2", "--out", (dir / "r.json").string()},
                     out, err),
            0)
      << err.str();
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("each measurement once (1 replayed rows repeat an earlier one's TTFT and TPOT)"));
  EXPECT_THAT(text, HasSubstr(fmt::format("\n{:<30} {:<8} {:<7} {:>6} ", kGptOss, "vllm", "agg", 2)));
  EXPECT_THAT(text, HasSubstr("replayed 3 of 4 rows (75.0%)"));
  EXPECT_THAT(text, HasSubstr("skipped 1 rows: no worker counts in the row"));
  EXPECT_THAT(text, HasSubstr("rule checkpoint-format changed 3 replayed rows: "));
  EXPECT_THAT(text, Not(HasSubstr("rule vllm-dep")));
  EXPECT_THAT(text, HasSubstr("1 rows repeat an earlier row's TTFT and TPOT exactly, 1 of them replayed"));
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["rows_read"], 4);
  EXPECT_EQ(j["rows_replayed"], 3);
  EXPECT_EQ(j["repeated_rows"], 1);
  EXPECT_EQ(j["distinct"]["count"], 2);
  ASSERT_EQ(j["by_model"].size(), 1u);
  EXPECT_EQ(j["by_model"][0]["rows"], 3);
  EXPECT_EQ(j["by_model"][0]["distinct"]["count"], 2);
  EXPECT_EQ(j["by_model"][0]["by_layout"]["TP 2"]["count"], 2);
  EXPECT_EQ(j["normalisations"]["checkpoint-format"]["rows"], 3);
  EXPECT_EQ(j["normalisations"]["vllm-dep"]["rows"], 0);
  EXPECT_EQ(j["rows"][1]["repeats"], "a");
  EXPECT_EQ(j["rows"][1]["distinct"], false);
  EXPECT_EQ(j["rows"][0]["layout"], "TP 2");
  EXPECT_EQ(j["rows"][0]["weight_dtype"], "auto");
  // The distinct figures leave the repeat out: row a's ratios once, row b's once.
  auto ratio = [&](int i, const char* what) {
    return j["rows"][i][fmt::format("predicted_{}_ms", what)].get<double>() /
           j["rows"][i][fmt::format("measured_{}_ms", what)].get<double>();
  };
  EXPECT_NEAR(j["distinct"]["tpot_mape"].get<double>(),
              (std::abs(ratio(0, "tpot") - 1) + std::abs(ratio(2, "tpot") - 1)) * 50, 1e-9);

  const auto dense = testing::write_text_file(
      dir, "d.csv",
      testing::kSiliconHeader + silicon_row({{"backend", "vllm"},
                                             {"backend_version", "0.12.0"},
                                             {"model_path", "meta-llama/Llama-3.1-8B-Instruct"},
                                             {"osl", "32"},
                                             {"batch_size", "4"},
                                             {"tp_size", "1"}}));
  std::ostringstream dense_out;
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", dense.string(), "--gpu", "h100-sxm-fitted",
                      "--requests-per-client", "2", "--out", (dir / "d.json").string()},
                     dense_out, err),
            0);
  EXPECT_THAT(dense_out.str(), Not(HasSubstr("each measurement once")));
  EXPECT_THAT(dense_out.str(), Not(HasSubstr("replayed 1 of")));
  std::ifstream dense_in(dir / "d.json");
  const auto d = nlohmann::json::parse(dense_in);
  EXPECT_FALSE(d.contains("by_model"));
  EXPECT_FALSE(d["rows"][0].contains("layout"));
}

// One group's figures as pinned: MAPE of TTFT and TPOT in percent, their medians of predicted /
// measured, and the rows.
struct Figures {
  double ttft_mape, ttft_ratio, tpot_mape, tpot_ratio;
  int64_t count;
};
void expect_figures(const nlohmann::json& g, const Figures& f, const std::string& what) {
  EXPECT_NEAR(g["ttft_mape"].get<double>(), f.ttft_mape, 0.051) << what;
  EXPECT_NEAR(g["ttft_median_ratio"].get<double>(), f.ttft_ratio, 0.0051) << what;
  EXPECT_NEAR(g["tpot_mape"].get<double>(), f.tpot_mape, 0.051) << what;
  EXPECT_NEAR(g["tpot_median_ratio"].get<double>(), f.tpot_ratio, 0.0051) << what;
  EXPECT_EQ(g["count"].get<int64_t>(), f.count) << what;
}

// The figures of docs/validation.md ("Mixtures of experts"): NVIDIA's 333 measured H100
// runs of Qwen3-235B-A22B-FP8, gpt-oss-120b, MiniMax-M2.5 and DeepSeek-R1/V3, replayed with the
// shipped H100 profile and each backend's preset, engine and deployment, per model over distinct
// measurements. Issue 43's targets (TPOT 15%, TTFT 25%, 90% of the rows) are not met; the page
// says where the error lies. A change of the cost model, the presets or the replay moves these
// numbers: update them and the page together.
TEST(ValidateServingMoe, FiguresOnNvidiasH100MoeMeasurements) {
  const auto dir = testing::scratch_dir("moe-h100");
  const std::string file = (testing::measured_dir() / "aiconfigurator/silicon/h100_sxm_moe.csv.gz").string();
  std::ostringstream out, err;
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", file, "--gpu", "h100-sxm-fitted", "--out",
                      (dir / "r.json").string()},
                     out, err),
            0)
      << err.str();
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  // Coverage: every row but the 33 disaggregated DeepSeek-R1 ones on TensorRT-LLM that record no
  // worker counts and repeat no row that does; 46 of those replayed assume SGLang's one pair.
  EXPECT_EQ(j["rows_read"], 333);
  EXPECT_EQ(j["rows_replayed"], 300);
  EXPECT_EQ(j["skipped"]["no worker counts in the row (aiconfigurator's own estimator refuses them: "
                         "tools/accuracy_regression_testing/predict_silicon_sample.py)"],
            33);
  EXPECT_EQ(j["skipped"].size(), 1u);
  const std::map<std::string, int> rules = {
      {"vllm-dep", 15},        {"trtllm-attention-dp", 5}, {"vllm-experts-tp", 2},       {"recorded-twin", 13},
      {"sglang-one-pair", 46}, {"checkpoint-format", 174}, {"client-connection-pool", 9}};
  for (const auto& [rule, rows] : rules) EXPECT_EQ(j["normalisations"][rule]["rows"], rows) << rule;
  EXPECT_EQ(j["repeated_rows"], 57);
  EXPECT_EQ(j["repeated_rows_replayed"], 44);

  expect_figures(j["distinct"], {35.9, 1.06, 20.0, 0.99, 256}, "distinct");
  const std::map<std::string, Figures> by_model = {
      {"MiniMaxAI/MiniMax-M2.5 vllm agg", {68.0, 1.45, 13.3, 0.885, 30}},
      {"Qwen/Qwen3-235B-A22B-FP8 trtllm agg", {20.2, 1.16, 10.1, 1.05, 127}},
      {"Qwen/Qwen3-235B-A22B-FP8 vllm disagg", {54.5, 0.45, 85.9, 1.86, 2}},
      {"deepseek-ai/DeepSeek-R1 sglang disagg", {50.7, 0.87, 33.4, 1.08, 30}},
      {"deepseek-ai/DeepSeek-R1 trtllm disagg", {0, 0, 0, 0, 0}},  // every row repeats a V3 row
      {"deepseek-ai/DeepSeek-V3 trtllm disagg", {88.4, 0.07, 17.8, 0.83, 8}},
      {"openai/gpt-oss-120b trtllm agg", {63.1, 0.34, 49.0, 0.55, 5}},
      {"openai/gpt-oss-120b vllm agg", {35.9, 1.03, 34.9, 0.92, 54}},
  };
  ASSERT_EQ(j["by_model"].size(), by_model.size());
  for (const auto& m : j["by_model"]) {
    const std::string key =
        m["model"].get<std::string>() + " " + m["backend"].get<std::string>() + " " + m["mode"].get<std::string>();
    ASSERT_TRUE(by_model.count(key)) << key;
    expect_figures(m["distinct"], by_model.at(key), key);
  }
  expect_figures(j["by_backend"]["sglang"], {45.6, 0.83, 32.4, 1.23, 46}, "sglang, every row");
  expect_figures(j["by_backend"]["trtllm"], {30.9, 1.06, 12.3, 1.02, 153}, "trtllm, every row");
  expect_figures(j["by_backend"]["vllm"], {42.9, 1.04, 26.1, 0.91, 101}, "vllm, every row");

  // Where the error lies (docs/validation.md): the nine gpt-oss rows at 512 clients, whose
  // measured TTFT and TPOT say about 100 requests ran at once, are replayed with the client's
  // 100-connection pool (rule client-connection-pool). Their TTFT is then the wait for the
  // requests ahead to finish, so its error follows their TPOT's (within 8%; with all 512 at the
  // server their TTFT was predicted at 0.001-0.63 of the measured and TPOT at 2.6-15x); what is
  // left is the decode step of about 100 sequences, predicted at 1.2-4.6x.
  Mape tpot_without_512, ttft_without_512;
  int pooled_512 = 0;
  for (const auto& r : j["rows"]) {
    if (!r["distinct"].get<bool>()) continue;
    const double tpot_ratio = r["predicted_tpot_ms"].get<double>() / r["measured_tpot_ms"].get<double>();
    const double ttft_ratio = r["predicted_ttft_ms"].get<double>() / r["measured_ttft_ms"].get<double>();
    if (r["concurrency"] == 512) {
      pooled_512 += r["config"]["client_connections"] == 100;
      EXPECT_NEAR(ttft_ratio / tpot_ratio, 1.0, 0.08) << r["id"];
      EXPECT_GT(tpot_ratio, 1.2) << r["id"];
      EXPECT_LT(tpot_ratio, 4.6) << r["id"];
      continue;
    }
    EXPECT_FALSE(r["config"].contains("client_connections")) << r["id"];
    tpot_without_512.add(r["predicted_tpot_ms"].get<double>(), r["measured_tpot_ms"].get<double>());
    ttft_without_512.add(r["predicted_ttft_ms"].get<double>(), r["measured_ttft_ms"].get<double>());
  }
  EXPECT_EQ(pooled_512, 9);
  EXPECT_EQ(tpot_without_512.count, 247);
  EXPECT_NEAR(tpot_without_512.value(), 15.4, 0.051);
  EXPECT_NEAR(ttft_without_512.value(), 32.1, 0.051);

  // Routing. By default (auto) tokens follow the power law aiconfigurator's estimator assumes
  // (alpha 1.2 for Qwen3): the replay's TPOT grows by about a fifth between 8 and 16 clients
  // (TP 4, EP 4, 1,024/512 tokens), as the measured one does. Balanced routing touches every one
  // of Qwen3's 128 experts from 16 sequences on (16 x top-8) and jumps there instead.
  auto c16_over_c8 = [](const nlohmann::json& report, const char* figure) {
    double c8 = 0, c16 = 0;
    for (const auto& r : report["rows"]) {
      if (r["model"] != kQwen3 || r["layout"] != "TP 4, EP 4" || r["isl"] != 1024 || r["osl"] != 512 ||
          (r["concurrency"] != 8 && r["concurrency"] != 16)) {
        continue;
      }
      (r["concurrency"] == 8 ? c8 : c16) = r[figure].get<double>();
    }
    return c16 / c8;
  };
  const double measured = c16_over_c8(j, "measured_tpot_ms");
  EXPECT_LT(measured, 1.25);
  EXPECT_NEAR(c16_over_c8(j, "predicted_tpot_ms"), measured, 0.05);
  std::ostringstream routed_out;
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", file, "--gpu", "h100-sxm-fitted", "--moe-routing",
                      "balanced", "--out", (dir / "b.json").string()},
                     routed_out, err),
            0);
  std::ifstream routed_in(dir / "b.json");
  const auto b = nlohmann::json::parse(routed_in);
  EXPECT_EQ(b["moe_routing"], "balanced");
  EXPECT_GT(c16_over_c8(b, "predicted_tpot_ms"), 1.5);
  expect_figures(b["distinct"], {34.8, 1.06, 28.1, 1.11, 256}, "balanced, distinct");
  const std::map<std::string, Figures> balanced = {
      {"MiniMaxAI/MiniMax-M2.5 vllm agg", {50.8, 1.23, 18.4, 1.005, 30}},
      {"Qwen/Qwen3-235B-A22B-FP8 trtllm agg", {20.3, 1.16, 20.4, 1.16, 127}},
      {"deepseek-ai/DeepSeek-R1 sglang disagg", {51.5, 0.91, 39.7, 1.27, 30}},
      {"openai/gpt-oss-120b vllm agg", {38.9, 1.01, 41.3, 1.04, 54}},
  };
  for (const auto& m : b["by_model"]) {
    const std::string key =
        m["model"].get<std::string>() + " " + m["backend"].get<std::string>() + " " + m["mode"].get<std::string>();
    if (balanced.count(key)) expect_figures(m["distinct"], balanced.at(key), "balanced, " + key);
  }
}

TEST(ValidateServingMoe, BadMoeRoutingIsNamed) {
  const std::string why = testing::user_error_of([] {
    std::ostringstream o, e;
    cli_main({"validate-serving", "--measurements", "x.csv", "--gpu", "h100-sxm-fitted", "--moe-routing", "zipf"}, o,
             e);
  });
  EXPECT_THAT(why, HasSubstr("--moe-routing \"zipf\""));
}

}  // namespace
}  // namespace batchsim
