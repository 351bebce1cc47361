// Expert parallelism and attention data parallelism in the cost model (issue 43, item 4): weights
// per GPU under each layout, the MoE exchanges' bytes, the lockstep step of DP ranks, MLA's
// replicated latent, and the layouts that are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/moe_kernel.h"
#include "hwmodel/parallel_layout.h"
#include "hwmodel/roofline.h"
#include "hwmodel/speculative.h"
#include "hwmodel/engine_profile.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::user_error_of;

BatchShape decodes(int64_t n, int64_t context) {
  BatchShape s;
  for (int64_t i = 0; i < n; ++i) s.add_decode(context);
  s.num_sampled = n;
  return s;
}

TEST(ParallelLayout, WeightsPerGpuSplitExpertsOverEveryGpuAndTheRestOverTheRank) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const HardwareProfile h200 = resolve_gpu("h200");
  const double all = static_cast<double>(v3.weight_bytes());
  const double routed = v3.routed_expert_weight_bytes();
  // The routed experts are most of DeepSeek-V3: 58 MoE layers x 256 experts x 3 x 7168 x 2048.
  EXPECT_NEAR(routed, 58.0 * 256 * 3 * 7168 * 2048 * (1 + 4.0 / 16384), 1);
  // TP 8: everything over 8 GPUs.
  EXPECT_DOUBLE_EQ(CostModel(v3, h200, ParallelLayout{8}).weight_bytes_per_gpu(), all / 8);
  // TP 8 with EP 8 (TensorRT-LLM's TEP): still 8 GPUs of one rank, the same bytes each.
  EXPECT_DOUBLE_EQ(CostModel(v3, h200, ParallelLayout{8, 1, 8}).weight_bytes_per_gpu(), all / 8);
  // DP 8 x EP 8: the attention, dense layers, shared experts and embeddings whole on each GPU,
  // the routed experts over all 8.
  EXPECT_DOUBLE_EQ(CostModel(v3, h200, ParallelLayout{1, 8, 8}).weight_bytes_per_gpu(), (all - routed) + routed / 8);
  // DP 4 x TP 2, EP 8.
  EXPECT_DOUBLE_EQ(CostModel(v3, h200, ParallelLayout{2, 4, 8}).weight_bytes_per_gpu(),
                   (all - routed) / 2 + routed / 8);
}

TEST(ParallelLayout, MlaLatentIsWholeOnEveryGpuOfARank) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  // 61 layers x 576 x 2 bytes, whatever the tp: TP cannot split the latent by heads.
  for (int tp : {1, 2, 8}) EXPECT_EQ(kv_bytes_per_token_per_gpu(v3, tp), 61 * 576 * 2) << tp;
  // GQA splits its KV heads: Qwen3-235B's 4 KV heads over TP 4.
  const ModelSpec qwen = resolve_model("qwen3-235b-a22b");
  EXPECT_EQ(kv_bytes_per_token_per_gpu(qwen, 4), 94 * 2 * 1 * 128 * 2);
}

TEST(ParallelLayout, BadLayoutsAreRefusedByName) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const HardwareProfile h200 = resolve_gpu("h200");
  // EP not dividing the experts (256).
  EXPECT_THAT(user_error_of([&] {
                CostModel(v3, h200, ParallelLayout{1, 6, 6});
              }),
              AllOf(HasSubstr("--ep 6"), HasSubstr("256 experts")));
  // EP x MoE-TP not covering TP x DP.
  EXPECT_THAT(user_error_of([&] {
                CostModel(v3, h200, ParallelLayout{2, 4, 4, 4});
              }),
              AllOf(HasSubstr("--ep 4 x --moe-tp 4"), HasSubstr("= 8 GPUs")));
  EXPECT_THAT(user_error_of([&] { CostModel(v3, h200, ParallelLayout{1, 8, 16}); }), HasSubstr("--ep 16"));
  // DP of a dense model: independent replicas, --replicas.
  EXPECT_THAT(user_error_of([&] {
                CostModel(resolve_model("llama-3-8b"), h200, ParallelLayout{1, 2});
              }),
              AllOf(HasSubstr("--dp 2"), HasSubstr("--replicas 2")));
  EXPECT_THAT(user_error_of([&] {
                CostModel(resolve_model("llama-3-8b"), h200, ParallelLayout{2, 1, 2});
              }),
              HasSubstr("no experts"));
  // An expert FFN that the experts' TP cannot split: gpt-oss's 2880 over MoE-TP 128.
  EXPECT_THAT(user_error_of([&] {
                CostModel(resolve_model("gpt-oss-120b"), h200, ParallelLayout{1, 128, 1});
              }),
              AllOf(HasSubstr("--moe-tp 128"), HasSubstr("2880")));
  // Beyond one node without an inter-node link.
  HardwareProfile one_node = h200;
  one_node.internode_bytes_per_s = 0;
  EXPECT_THAT(user_error_of([&] {
                CostModel(v3, one_node, ParallelLayout{1, 16, 16});
              }),
              AllOf(HasSubstr("16 GPUs"), HasSubstr("internode_bytes_per_s")));
}

// EP 1 and DP 1 is today's plain tensor parallelism, to the bit.
TEST(ParallelLayout, PlainLayoutIsTheTensorParallelCostModel) {
  const ModelSpec mixtral = resolve_model("mixtral-8x7b");
  const HardwareProfile h100 = resolve_gpu("h100-sxm-fitted");
  const CostModel by_tp(mixtral, h100, 2);
  const CostModel by_layout(mixtral, h100, ParallelLayout{2, 1, 1, 0});
  BatchShape mixed = decodes(40, 900);
  mixed.add_prefill(512, 0);
  for (const BatchShape& s : {decodes(1, 10), decodes(64, 2000), mixed}) {
    EXPECT_EQ(by_tp.iteration(s).total_s, by_layout.iteration(s).total_s);
    const std::vector<BatchShape> one{s};
    EXPECT_EQ(by_tp.step(one).total_s, by_tp.iteration(s).total_s);
  }
}

// Fast-forward's repeated decode steps recompute only the decodes' attention (advance_decodes,
// advance_step): every figure must be what a fresh iteration() or step() gives, to the bit, for
// each attention kind (MLA, sliding window, chunked, GQA), an engine that concatenates its KV
// cache, and speculative verification with a drafter on the GPU.
void expect_same_cost(const IterationCost& a, const IterationCost& b, const std::string& what) {
  EXPECT_EQ(a.gemm_s, b.gemm_s) << what;
  EXPECT_EQ(a.prefill_attention_s, b.prefill_attention_s) << what;
  EXPECT_EQ(a.decode_attention_s, b.decode_attention_s) << what;
  EXPECT_EQ(a.lm_head_s, b.lm_head_s) << what;
  EXPECT_EQ(a.draft_s, b.draft_s) << what;
  EXPECT_EQ(a.elementwise_s, b.elementwise_s) << what;
  EXPECT_EQ(a.communication_s, b.communication_s) << what;
  EXPECT_EQ(a.overhead_s, b.overhead_s) << what;
  EXPECT_EQ(a.launch_s, b.launch_s) << what;
  EXPECT_EQ(a.cpu_s, b.cpu_s) << what;
  EXPECT_EQ(a.residual_s, b.residual_s) << what;
  EXPECT_EQ(a.total_s, b.total_s) << what;
  EXPECT_EQ(a.gemm_compute_bound, b.gemm_compute_bound) << what;
  EXPECT_EQ(a.layer_gemm_s, b.layer_gemm_s) << what;
}

BatchShape decodes_from(const std::vector<int64_t>& contexts, int64_t drafts_each = 0) {
  BatchShape s;
  for (int64_t c : contexts) s.add_decode(c);
  s.num_sampled = static_cast<int64_t>(contexts.size());
  s.decode_draft_tokens = drafts_each * static_cast<int64_t>(contexts.size());
  return s;
}

TEST(ParallelLayout, AdvancedDecodeStepsCostWhatFreshOnesCost) {
  struct Case {
    std::string model, gpu, engine, spec;
    int tp;
    int64_t drafts_each;
  };
  const std::vector<Case> cases{
      {"deepseek-r1", "h200", "vllm", "", 8, 0},
      {"gpt-oss-120b", "h100-sxm-fitted", "vllm", "", 2, 0},
      {"llama-4-scout", "h100-sxm-fitted", "vllm", "", 4, 0},
      {"llama-3.1-8b", "a100-80gb", "hf-transformers", "", 1, 0},
      {"llama-3.1-8b", "h100-sxm-fitted", "vllm", "eagle:k=3:accept=0.8,0.6,0.4", 1, 3},
  };
  for (const Case& c : cases) {
    CostModel cm(resolve_model(c.model), resolve_gpu(c.gpu), c.tp, resolve_engine(c.engine));
    if (!c.spec.empty()) cm.set_speculative(parse_speculative_decoding(c.spec, "--spec-decode"));
    // Contexts on both sides of gpt-oss's 128-token window and Llama 4's 8,192-token chunk.
    BatchShape shape = decodes_from({5, 120, 700, 8190, 9000}, c.drafts_each);
    NonAttentionCache memo;
    IterationCost advanced = cm.iteration(shape, &memo);
    for (int step = 1; step <= 12; ++step) {
      shape.advance_decodes(1);
      advanced = cm.advance_decodes(advanced, shape, step % 2 == 0 ? &memo : nullptr);
      expect_same_cost(advanced, cm.iteration(shape), c.model + " step " + std::to_string(step));
    }
    // A prefill is no repeated decode step.
    BatchShape mixed = shape;
    mixed.add_prefill(64, 0);
    EXPECT_THROW(cm.advance_decodes(advanced, mixed), std::logic_error);
  }

  // DP attention: each rank advanced in place, an idle rank staying idle.
  const CostModel dp(resolve_model("deepseek-v3"), resolve_gpu("h200"), ParallelLayout{1, 4, 4});
  std::vector<BatchShape> ranks{decodes_from({100, 4000}), BatchShape{}, decodes_from({3000, 3000, 3000}),
                                decodes_from({9000})};
  std::vector<IterationCost> rank_costs;
  IterationCost step = dp.step(ranks, nullptr, &rank_costs);
  ASSERT_EQ(rank_costs.size(), ranks.size());
  expect_same_cost(rank_costs[2], dp.iteration(ranks[2]), "rank 2 as stepped");
  for (int k = 1; k <= 8; ++k) {
    for (BatchShape& rank : ranks) rank.advance_decodes(1);
    step = dp.advance_step(ranks, rank_costs);
    expect_same_cost(step, dp.step(ranks), "DP step " + std::to_string(k));
  }
  EXPECT_EQ(rank_costs[1].total_s, 0);
  EXPECT_THROW(dp.advance_step(ranks, std::span<IterationCost>(rank_costs).first(3)), std::logic_error);

  // A step in which some ranks repeat their decodes (flagged) and others change: the flagged
  // ones advance their costs, the rest are computed afresh; the same step as all afresh.
  ranks[0].add_prefill(512, 0);  // rank 0 admits a prompt; ranks 1-3 repeat
  for (size_t r = 1; r < ranks.size(); ++r) ranks[r].advance_decodes(1);
  const std::vector<uint8_t> repeated{0, 1, 1, 1};
  step = dp.step(ranks, nullptr, &rank_costs, repeated);
  expect_same_cost(step, dp.step(ranks), "DP step with repeated ranks");
  for (size_t r = 0; r < ranks.size(); ++r) {
    expect_same_cost(rank_costs[r], dp.iteration(ranks[r]), "rank " + std::to_string(r) + " with repeated ranks");
  }
  // Flags need the step before's costs, one per rank.
  std::vector<IterationCost> none;
  EXPECT_THROW(dp.step(ranks, nullptr, &none, repeated), std::logic_error);
  EXPECT_THROW(dp.step(ranks, nullptr, &rank_costs, std::vector<uint8_t>{1, 1}), std::logic_error);
}

// A DP step lasts as long as its slowest rank, plus the MoE layers over every rank's tokens.
TEST(ParallelLayout, DpStepWaitsForTheSlowestRank) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const CostModel cm(v3, resolve_gpu("h200"), ParallelLayout{1, 4, 4});
  const BatchShape light = decodes(2, 100);
  BatchShape heavy = decodes(2, 100);
  heavy.add_prefill(4096, 0);
  const std::vector<BatchShape> ranks{light, heavy, light, BatchShape{}};
  const IterationCost step = cm.step(ranks);
  // The slowest rank's own part is the heavy one's; the rest is the MoE over all tokens.
  const IterationCost heavy_rank = cm.iteration(heavy);
  const IterationCost light_rank = cm.iteration(light);
  EXPECT_GT(heavy_rank.total_s, light_rank.total_s);
  const int64_t tokens = light.total_tokens() * 2 + heavy.total_tokens() + 1;  // + the idle rank's dummy token
  const CostModel::MoeStepCost moe = cm.moe_step(tokens);
  EXPECT_NEAR(step.total_s, heavy_rank.total_s + moe.experts_up_s + moe.experts_down_s + moe.exchange_s, 1e-12);
  // Every rank idle: nothing to time.
  EXPECT_EQ(cm.step(std::vector<BatchShape>(4)).total_s, 0);
  // A rank's load elsewhere makes a light rank's step longer than it would be alone.
  const std::vector<BatchShape> all_light{light, light, light, light};
  EXPECT_GT(step.total_s, cm.step(all_light).total_s);
}

// The all-gather of vLLM's default backend moves every other rank's tokens to each GPU and back;
// an all-to-all sends each token to the ranks of its experts. Bytes by hand.
TEST(ParallelLayout, MoeExchangeBytesPerStep) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  HardwareProfile gpu = resolve_gpu("h200");
  gpu.interconnect_latency_s = 0;
  gpu.internode_latency_s = 0;
  const double nvlink = gpu.interconnect_bytes_per_s;
  EngineProfile gather;  // all-gather + reduce-scatter
  const CostModel ag(v3, gpu, ParallelLayout{1, 8, 8}, gather);
  const int64_t tokens = 800;  // 100 per rank
  // Each GPU receives the 700 tokens of the other ranks (16-bit, hidden 7168) before the
  // experts and sends as much back after: 58 MoE layers.
  EXPECT_NEAR(ag.moe_step(tokens).exchange_s, 58 * 2 * (700.0 * 7168 * 2) / nvlink, 1e-12);
  EngineProfile a2a;
  a2a.moe_all_to_all = true;
  const CostModel deepep(v3, gpu, ParallelLayout{1, 8, 8}, a2a);
  // Each of a rank's 100 tokens reaches the other 7 ranks with probability 1 - (7/8)^8 each:
  // FP8 out, 16-bit back.
  const double remote = 7 * (1 - std::pow(7.0 / 8, 8));
  EXPECT_NEAR(deepep.moe_step(tokens).exchange_s, 58 * (100 * remote * 7168 * (1 + 2)) / nvlink, 1e-12);
  // Over two nodes (EP 16), the traffic bound to the other node crosses the NICs: 8 of the 15
  // other GPUs are remote, and the slower link sets the time.
  const CostModel wide(v3, gpu, ParallelLayout{1, 16, 16}, a2a);
  const double remote16 = 15 * (1 - std::pow(15.0 / 16, 8));
  const double bytes = 100 * remote16 * 7168 * 1.0;  // dispatch, 1600 tokens over 16 ranks
  const double dispatch = std::max(bytes * 7 / 15 / nvlink, bytes * 8 / 15 / gpu.internode_bytes_per_s);
  const double combine = 2 * dispatch;
  EXPECT_NEAR(wide.moe_step(1600).exchange_s, 58 * (dispatch + combine), 1e-12);
}

// An expert rank runs its own whole experts (256 / EP of them) as one fused-MoE call fed every
// token of the step (moe_kernel.h): expert parallelism 8, each expert's whole 2048.
TEST(ParallelLayout, ExpertParallelismSplitsTheExpertsNotTheirTokens) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const HardwareProfile h200 = resolve_gpu("h200");
  const CostModel ep(v3, h200, ParallelLayout{8, 1, 8});
  const int64_t tokens = 512;
  FusedMoeCall call;
  call.tokens = tokens;
  call.hidden = 7168;
  call.intermediate = 2048;
  call.top_k = 8;
  call.experts = 256;
  call.ep = 8;
  call.format = WeightFormat::fp8_block;
  const CostModel::MoeStepCost moe = ep.moe_step(tokens);
  EXPECT_NEAR(moe.experts_up_s + moe.experts_down_s, 58 * fused_moe_time_s(h200, call), 1e-12);
  // Under plain TP 8 each GPU holds a slice of 2048 / 8 of every expert instead.
  call.ep = 1;
  call.intermediate = 256;
  const CostModel tp(v3, h200, ParallelLayout{8});
  EXPECT_NEAR(tp.moe_step(tokens).experts_up_s + tp.moe_step(tokens).experts_down_s, 58 * fused_moe_time_s(h200, call),
              1e-12);
  // With EP 8 x MoE-TP 1 on one attention rank of TP 8 (TEP) the experts' outputs are summed by
  // the layer's all-reduce: no exchange of their own.
  EXPECT_EQ(moe.exchange_s, 0);
  // More tokens never make the experts faster.
  EXPECT_GE(ep.moe_step(8192).experts_up_s, ep.moe_step(4096).experts_up_s);
  EXPECT_GE(ep.moe_step(64).experts_up_s, ep.moe_step(1).experts_up_s);
}

// Skewed routing makes the busiest expert rank slower once the experts are well fed (NVIDIA's
// tables: at T k / E >= 64 rows per expert; below that, fewer experts are touched and skew is
// cheaper); an expert-load balancer brings it back to balanced.
TEST(ParallelLayout, SkewRaisesTheStepOfWellFedExperts) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const HardwareProfile h100 = resolve_gpu("h100-sxm-fitted");
  CostModel balanced(v3, h100, ParallelLayout{1, 16, 16});
  CostModel skewed(v3, h100, ParallelLayout{1, 16, 16});
  skewed.set_moe_routing(MoeRouting{MoeRoutingKind::power_law, 1.2});
  const int64_t tokens = 16 * 512;  // 8192 tokens x 8 / 256 experts = 256 rows each
  const double b = balanced.moe_step(tokens).experts_up_s + balanced.moe_step(tokens).experts_down_s;
  const double s = skewed.moe_step(tokens).experts_up_s + skewed.moe_step(tokens).experts_down_s;
  EXPECT_GT(s, 1.05 * b);
  std::vector<BatchShape> ranks(16, decodes(512, 1000));
  EXPECT_GT(skewed.step(ranks).total_s, balanced.step(ranks).total_s);
}

}  // namespace
}  // namespace batchsim
