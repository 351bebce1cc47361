// Which GEMM and attention shapes calibration measures.
#include "calibration/shape_grid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "calibration/measure_options.h"
#include "hwmodel/model_spec.h"

namespace batchsim::calibration {
namespace {

void expect_strictly_increasing_within(const std::vector<int>& grid, int max_tokens) {
  ASSERT_FALSE(grid.empty());
  EXPECT_TRUE(std::adjacent_find(grid.begin(), grid.end(), std::greater_equal<>()) == grid.end());
  EXPECT_GE(grid.front(), 1);
  EXPECT_LE(grid.back(), max_tokens);
}

TEST(TokenCountGrid, DenseAtSmallMAndAtEveryTileMultiple) {
  const std::vector<int> grid = token_count_grid(16384);
  expect_strictly_increasing_within(grid, 16384);
  const std::set<int> in(grid.begin(), grid.end());
  for (int m : {1, 2, 4, 8, 16, 24, 1016, 1024, 16384}) EXPECT_TRUE(in.count(m)) << m;
  for (int m = 64; m <= 8192; m += 64) EXPECT_TRUE(in.count(m)) << "multiple of 64: " << m;
  for (int m = 128; m <= 16384; m += 128) EXPECT_TRUE(in.count(m)) << "multiple of 128: " << m;
  EXPECT_FALSE(in.count(3));
  // Vidur's spacing: step 8 below 1024, 16 to 2048, …, 128 to 16K.
  EXPECT_TRUE(in.count(1040) && !in.count(1032));
  EXPECT_TRUE(in.count(8320) && !in.count(8256));
  EXPECT_EQ(grid.size(), 3u + 128 + 64 + 64 + 64 + 64);
}

TEST(TokenCountGrid, RespectsASmallerMaximum) {
  const std::vector<int> grid = token_count_grid(1000);
  expect_strictly_increasing_within(grid, 1000);
  EXPECT_EQ(grid.back(), 1000);
}

TEST(TokenCountGrid, QuickGridKeepsTheSmallCountsAndTileMultiples) {
  const std::vector<int> grid = quick_token_count_grid(16384);
  expect_strictly_increasing_within(grid, 16384);
  const std::set<int> in(grid.begin(), grid.end());
  for (int m : {1, 2, 4, 8, 64, 128, 192, 16384}) EXPECT_TRUE(in.count(m)) << m;
  for (int m : grid) {
    if (m >= 64) {
      EXPECT_EQ(m % 64, 0) << m;
    }
  }
  EXPECT_LT(grid.size(), 40u);  // a quick run measures few points
}

TEST(LayerGemmShapes, Llama3With8KvHeadsAcrossTensorParallelDegrees) {
  const CalibrationModel& m = find_calibration_model("llama-3-8b");
  const std::vector<GemmShape> tp1 = layer_gemm_shapes(m, 1);
  ASSERT_EQ(tp1.size(), 5u);
  // (K, N): QKV 4096 → (32 + 2·8)·128; O 4096 → 4096; gate+up 4096 → 2·14336; down; LM head.
  EXPECT_EQ(tp1[0].op, GemmOp::kQkv);
  EXPECT_EQ(tp1[0].k, 4096);
  EXPECT_EQ(tp1[0].n, 6144);
  EXPECT_EQ(tp1[1].k, 4096);
  EXPECT_EQ(tp1[1].n, 4096);
  EXPECT_EQ(tp1[2].k, 4096);
  EXPECT_EQ(tp1[2].n, 28672);
  EXPECT_EQ(tp1[3].k, 14336);
  EXPECT_EQ(tp1[3].n, 4096);
  EXPECT_EQ(tp1[4].k, 4096);
  EXPECT_EQ(tp1[4].n, 128256);

  const std::vector<GemmShape> tp2 = layer_gemm_shapes(m, 2);
  EXPECT_EQ(tp2[0].n, (16 + 2 * 4) * 128);
  EXPECT_EQ(tp2[1].k, 16 * 128);  // row-parallel O: K is split
  EXPECT_EQ(tp2[2].n, 14336);
  EXPECT_EQ(tp2[3].k, 7168);
  EXPECT_EQ(tp2[4].n, 64128);
  // 16 GPUs > 8 KV heads: one replicated KV head per GPU.
  EXPECT_EQ(kv_heads_per_gpu(m, 16), 1);
  EXPECT_EQ(layer_gemm_shapes(m, 16)[0].n, (2 + 2 * 1) * 128);
  EXPECT_THROW(layer_gemm_shapes(m, 3), std::invalid_argument);
}

TEST(LayerGemmShapes, Llama2MatchesItsParameterCount) {
  // Llama-2-7B: 32 layers × (4·4096² attention + 3·4096·11008 MLP) + 2·32000·4096 embeddings
  // = 6.738e9 parameters (the published 6.74 B).
  const CalibrationModel& m = find_calibration_model("meta-llama/Llama-2-7b-hf");
  int64_t layer = 0, lm_head = 0;
  for (const GemmShape& g : layer_gemm_shapes(m, 1)) (g.op == GemmOp::kLmHead ? lm_head : layer) += g.k * g.n;
  EXPECT_EQ(32 * layer + 2 * lm_head, 6738149376);
  EXPECT_THROW(find_calibration_model("gpt-5"), std::invalid_argument);
}

TEST(AttentionGrid, DecodePointsRespectTheCapsAndMixTheirLengths) {
  const AttentionGridOptions o = AttentionGridOptions::quick(16384);
  const std::vector<DecodeAttentionPoint> points = decode_attention_grid(o);
  int uniform = 0, mixed = 0;
  for (const DecodeAttentionPoint& p : points) {
    ASSERT_EQ(static_cast<int>(p.context_lens_tokens.size()), p.batch_size);
    EXPECT_LE(p.total_context_tokens(), o.max_total_kv_tokens);
    EXPECT_LE(p.max_context_tokens(), 16384);
    (p.mixed ? mixed : uniform)++;
  }
  EXPECT_GT(uniform, 30);
  EXPECT_GT(mixed, 20);
  // The extremes that matter: one sequence at the longest context, the biggest batch.
  EXPECT_TRUE(std::any_of(points.begin(), points.end(),
                          [](const auto& p) { return p.batch_size == 1 && p.max_context_tokens() == 16384; }));
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const auto& p) { return p.batch_size == 256; }));
}

TEST(AttentionGrid, MixedLengthsKeepTheMeanAndSpreadAboutIt) {
  const std::vector<int> lens = mixed_context_lengths(8, 1024);
  ASSERT_EQ(lens.size(), 8u);
  EXPECT_EQ(lens.front(), 128);  // mean/8
  EXPECT_EQ(lens.back(), 1920);  // 15·mean/8
  int64_t sum = 0;
  for (int len : lens) sum += len;
  EXPECT_NEAR(static_cast<double>(sum), 8 * 1024, 8);
  EXPECT_EQ(mixed_context_lengths(1, 77), std::vector<int>{77});
}

TEST(AttentionGrid, PrefillPointsFitTheModelLength) {
  const std::vector<PrefillAttentionPoint> points = prefill_attention_grid(AttentionGridOptions::quick(8192));
  ASSERT_FALSE(points.empty());
  for (const PrefillAttentionPoint& p : points) EXPECT_LE(p.chunk_tokens + p.prior_tokens, 8192);
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const auto& p) { return p.prior_tokens == 0; }));
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const auto& p) { return p.prior_tokens >= 4096; }));
}

}  // namespace
}  // namespace batchsim::calibration

namespace batchsim::calibration {
namespace {

// calibration keeps its own small shape table so that batchsim-calibrate builds with nvcc
// alone (no hwmodel, whose dependencies GPU images may lack); it must agree with hwmodel's.
TEST(CalibrationModels, AgreeWithHwmodelsBuiltinSpecs) {
  for (const CalibrationModel& m : calibration_models()) {
    const ModelSpec spec = resolve_model(m.name);
    EXPECT_EQ(m.hidden_size, spec.hidden_size) << m.name;
    EXPECT_EQ(m.num_heads, spec.num_heads) << m.name;
    EXPECT_EQ(m.num_kv_heads, spec.num_kv_heads) << m.name;
    EXPECT_EQ(m.head_dim, spec.head_dim) << m.name;
    EXPECT_EQ(m.ffn_size, spec.ffn_size) << m.name;
    EXPECT_EQ(m.gated_mlp, spec.gated_mlp) << m.name;
    EXPECT_EQ(m.vocab_size, spec.vocab_size) << m.name;
    EXPECT_EQ(m.max_context_tokens, spec.max_context_tokens) << m.name;
  }
}

}  // namespace
}  // namespace batchsim::calibration

namespace batchsim::calibration {
namespace {

TEST(MeasureOptions, QuickDefaultsToLlama2At4TpDegreesBf16Only) {
  MeasureOptions quick;
  quick.quick = true;
  const MeasureOptions q = resolve_defaults(quick);
  EXPECT_EQ(q.models, std::vector<std::string>{"llama-2-7b"});
  EXPECT_EQ(q.tensor_parallel_degrees, (std::vector<int>{1, 2, 4, 8}));
  EXPECT_FALSE(q.fp16);

  const MeasureOptions full = resolve_defaults(MeasureOptions{});
  EXPECT_EQ(full.models.size(), calibration_models().size());
  EXPECT_TRUE(full.fp16);

  MeasureOptions chosen;
  chosen.models = {"llama-3-8b"};
  chosen.tensor_parallel_degrees = {2};
  const MeasureOptions c = resolve_defaults(chosen);
  EXPECT_EQ(c.models, std::vector<std::string>{"llama-3-8b"});
  EXPECT_EQ(c.tensor_parallel_degrees, std::vector<int>{2});

  MeasureOptions unknown;
  unknown.models = {"gpt-5"};
  EXPECT_THROW(resolve_defaults(unknown), std::invalid_argument);
}

TEST(MeasureOptions, AShapeFileAddsNoModelAndAnUnknownModelSaysHowToMeasureIt) {
  MeasureOptions shapes;
  shapes.quick = true;
  shapes.shapes_file = "deepseek-v3.csv";
  EXPECT_TRUE(resolve_defaults(shapes).models.empty());
  shapes.models = {"llama-2-7b"};
  EXPECT_EQ(resolve_defaults(shapes).models, std::vector<std::string>{"llama-2-7b"});

  MeasureOptions unknown;
  unknown.models = {"deepseek-v3"};
  try {
    resolve_defaults(unknown);
    ADD_FAILURE() << "deepseek-v3 is not built in";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("unknown model 'deepseek-v3'"), std::string::npos) << message;
    EXPECT_NE(message.find("batchsim calibrate shapes --model deepseek-v3"), std::string::npos) << message;
    EXPECT_NE(message.find("--shapes shapes.csv"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace batchsim::calibration
