// The power-law loads on a grid (hwmodel/moe_kernel.h, kExactLoadTokens): where the grid's points
// lie, the interpolation between two of them, how far the interpolated call time is from the
// exact one, and a cost model giving the same numbers with its memo as without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hwmodel/cost_model.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/moe_kernel.h"
#include "hwmodel/parallel_layout.h"

namespace batchsim {
namespace {

FusedMoeCall deepseek_ep8(int64_t tokens) {
  // DeepSeek-R1's routed experts (config.json: hidden 7168, moe_intermediate_size 2048, 256
  // experts, top 8) on EP 8, with the architecture's power law (alpha 1.01).
  FusedMoeCall c;
  c.tokens = tokens;
  c.hidden = 7168;
  c.intermediate = 2048;
  c.top_k = 8;
  c.experts = 256;
  c.ep = 8;
  c.format = WeightFormat::fp8_block;
  c.routing = MoeRouting{MoeRoutingKind::power_law, 1.01};
  return c;
}

TEST(MoeLoadGrid, PointsBracketEveryCountAboveTheExactRange) {
  const double step = std::exp2(1.0 / kLoadGridPerOctave);
  int64_t last_lo = 0;
  for (int64_t t = kExactLoadTokens + 1; t <= 300'000; t += t < 5000 ? 1 : 97) {
    const auto [lo, hi] = moe_load_grid_bracket(t);
    ASSERT_LE(lo, t) << t;
    ASSERT_LT(t, hi) << t;
    ASSERT_GE(lo, kExactLoadTokens);
    // Consecutive points: the next count past hi brackets from hi.
    EXPECT_EQ(moe_load_grid_bracket(hi).first, hi);
    // 2^(1/32) apart, up to rounding to whole tokens.
    EXPECT_NEAR(static_cast<double>(hi) / static_cast<double>(lo), step, 1.0 / static_cast<double>(lo));
    EXPECT_GE(lo, last_lo);
    last_lo = lo;
  }
  EXPECT_EQ(moe_load_grid_bracket(kExactLoadTokens + 1).first, kExactLoadTokens);
  EXPECT_THROW(moe_load_grid_bracket(kExactLoadTokens), std::invalid_argument);
}

TEST(MoeLoadGrid, LinearBetweenTwoPoints) {
  const auto [lo, hi] = moe_load_grid_bracket(5000);
  const MoeRankLoad a = expected_moe_load(deepseek_ep8(lo));
  const MoeRankLoad b = expected_moe_load(deepseek_ep8(hi));
  const MoeRankLoad at_lo = interpolate_moe_load(a, lo, b, hi, lo, 8);
  EXPECT_EQ(at_lo.local_rows, a.local_rows);
  EXPECT_EQ(at_lo.local_padded_rows, a.local_padded_rows);
  const int64_t mid = (lo + hi) / 2;
  const double w = static_cast<double>(mid - lo) / static_cast<double>(hi - lo);
  const MoeRankLoad m = interpolate_moe_load(a, lo, b, hi, mid, 8);
  EXPECT_DOUBLE_EQ(m.routed_rows, 8.0 * static_cast<double>(mid));
  EXPECT_NEAR(m.local_rows, a.local_rows + w * (b.local_rows - a.local_rows), 1e-9);
  EXPECT_NEAR(m.touched_experts, a.touched_experts + w * (b.touched_experts - a.touched_experts), 1e-12);
  for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
    EXPECT_GE(m.all_padded_rows[i], std::min(a.all_padded_rows[i], b.all_padded_rows[i]));
    EXPECT_LE(m.all_padded_rows[i], std::max(a.all_padded_rows[i], b.all_padded_rows[i]));
  }
}

// Measured 2026-12-07 on DeepSeek-R1 EP 8 over this sample of T = 1,025 to 65,536: mean 0.22%,
// worst 2.78% (at T = 1,286, where the exact loads jump); the bounds leave a little room.
TEST(MoeLoadGrid, InterpolatedCallTimeStaysNearTheExactOne) {
  const HardwareProfile gpu = resolve_gpu("h100-sxm-fitted");
  double sum = 0, worst = 0;
  int n = 0;
  for (int64_t t = kExactLoadTokens + 1; t <= 65'536; t += t < 4096 ? 3 : 61) {
    const FusedMoeCall call = deepseek_ep8(t);
    const auto [lo, hi] = moe_load_grid_bracket(t);
    const MoeRankLoad grid = interpolate_moe_load(expected_moe_load(deepseek_ep8(lo)), lo,
                                                  expected_moe_load(deepseek_ep8(hi)), hi, t, call.top_k);
    const double rel = std::abs(fused_moe_time(gpu, call, grid).total_s / fused_moe_time(gpu, call).total_s - 1);
    sum += rel;
    worst = std::max(worst, rel);
    ++n;
  }
  EXPECT_LT(sum / n, 0.003);
  EXPECT_LT(worst, 0.03);
  EXPECT_GT(worst, 0.0);  // it is an approximation: the exact loads are not linear
}

// A cost model gives the same MoE step with its memo as without, to the bit, and the exact call
// time up to kExactLoadTokens.
TEST(MoeLoadGrid, CostModelTheSameWithAndWithoutItsMemo) {
  CostModel cm(resolve_model("deepseek-r1"), resolve_gpu("h200"), ParallelLayout{1, 8, 8});
  cm.set_moe_routing(MoeRouting{MoeRoutingKind::power_law, 1.01});
  NonAttentionCache memo;
  for (int64_t t : {1, 8, 512, 1024, 1025, 1500, 4096, 4097, 20'000, 1500, 1025}) {
    const CostModel::MoeStepCost with = cm.moe_step(t, &memo);
    const CostModel::MoeStepCost without = cm.moe_step(t);
    EXPECT_EQ(with.experts_up_s, without.experts_up_s) << t;
    EXPECT_EQ(with.experts_down_s, without.experts_down_s) << t;
    EXPECT_EQ(with.exchange_s, without.exchange_s) << t;
  }
  const CostModel::MoeStepCost at_1024 = cm.moe_step(1024);
  FusedMoeCall call = deepseek_ep8(1024);
  call.format = resolve_model("deepseek-r1").expert_weight_format;
  const FusedMoeTime exact = fused_moe_time(resolve_gpu("h200"), call);
  const double layers = resolve_model("deepseek-r1").moe_layers();
  EXPECT_NEAR(at_1024.experts_up_s + at_1024.experts_down_s, layers * exact.total_s, 1e-12 * layers * exact.total_s);
}

}  // namespace
}  // namespace batchsim
