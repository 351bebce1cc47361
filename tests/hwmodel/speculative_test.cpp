// Speculative decoding's spec strings, presets and cost (hwmodel/speculative.h, CostModel).
#include "hwmodel/speculative.h"

#include <cmath>
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "hwmodel/base/parse.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/mla.h"
#include "hwmodel/model_spec.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string error_of(const std::string& spec) {
  return testing::user_error_of([&] { parse_speculative_decoding(spec, "--spec-decode"); });
}

TEST(SpeculativeSpec, ParsesRatesOneRateAndPresets) {
  const SpeculativeDecoding e = parse_speculative_decoding("eagle:k=3:accept=0.8,0.6,0.4", "--spec-decode");
  EXPECT_EQ(e.method, DraftMethod::eagle);
  EXPECT_EQ(e.k, 3);
  EXPECT_THAT(e.accept, ElementsAre(0.8, 0.6, 0.4));
  EXPECT_DOUBLE_EQ(e.expected_accepted(), 1.8);
  EXPECT_EQ(e.lookahead_slots(), 3);
  EXPECT_EQ(e.budget_slots_per_sequence(), 0);
  // One rate: Leviathan et al.'s alpha, position i accepted with alpha^i.
  const SpeculativeDecoding n = parse_speculative_decoding("ngram:k=3:accept=0.5", "--spec-decode");
  EXPECT_THAT(n.accept, ElementsAre(0.5, 0.25, 0.125));
  EXPECT_EQ(n.lookahead_slots(), 0);
  EXPECT_FALSE(n.drafts_on_gpu());
  const SpeculativeDecoding d = parse_speculative_decoding("draft:llama-3.1-8b:k=2:accept=0.7,0.5", "--spec-decode");
  EXPECT_EQ(d.method, DraftMethod::draft_model);
  EXPECT_EQ(d.draft_model, "llama-3.1-8b");
  EXPECT_EQ(d.budget_slots_per_sequence(), 1);
  const SpeculativeDecoding m = parse_speculative_decoding("mtp:k=1:accept=deepseek-v3-mtp", "--spec-decode");
  EXPECT_THAT(m.accept, ElementsAre(::testing::DoubleNear(0.875, 1e-9)));
  EXPECT_THAT(m.accept_source, HasSubstr("arXiv 2412.19437"));
}

// The spec parsers' fields (hwmodel/base/parse.h): empty ones are kept, so a parser refuses them.
TEST(SpecFields, SplitKeepsEveryField) {
  EXPECT_THAT(split_fields("a,,b", ','), ElementsAre("a", "", "b"));
  EXPECT_THAT(split_fields("cpu=10,", ','), ElementsAre("cpu=10", ""));
  EXPECT_THAT(split_fields("", ':'), ElementsAre(""));
  EXPECT_THAT(split_fields("eagle:k=3", ':'), ElementsAre("eagle", "k=3"));
}

TEST(SpeculativeSpec, BadSpecsAreNamed) {
  EXPECT_THAT(error_of("medusa:k=3:accept=0.5"), HasSubstr("unknown method 'medusa'"));
  EXPECT_THAT(error_of("eagle:accept=0.5"), HasSubstr("k=K"));
  EXPECT_THAT(error_of("eagle:k=3"), HasSubstr("accept=RATES is required"));
  EXPECT_THAT(error_of("eagle:k=0:accept=0.5"), HasSubstr("--spec-decode k"));
  EXPECT_THAT(error_of("eagle:k=3:accept=0.5,0.6,0.1"), HasSubstr("must not increase"));
  EXPECT_THAT(error_of("eagle:k=3:accept=0.8,0.6"), HasSubstr("2 acceptance rates for k=3"));
  EXPECT_THAT(error_of("eagle:k=2:accept=1.5"), HasSubstr("--spec-decode accept"));
  EXPECT_THAT(error_of("eagle:k=2:accept=0.5:depth=4"), HasSubstr("unknown key 'depth'"));
  EXPECT_THAT(error_of("eagle:k=2:accept=deepseek-v3-mtp"), HasSubstr("measured with mtp, not eagle"));
  EXPECT_THAT(error_of("draft:k=2:accept=0.5"), HasSubstr("draft:MODEL"));
}

// A preset's geometric rates give its measured mean acceptance length at its k, and decrease.
TEST(SpeculativeSpec, PresetRatesReproduceTheirMeasuredMean) {
  ASSERT_FALSE(speculative_presets().empty());
  for (const SpeculativePreset& p : speculative_presets()) {
    const std::vector<double> r = p.rates(p.measured_k);
    EXPECT_NEAR(1 + std::accumulate(r.begin(), r.end(), 0.0), p.mean_accepted_length, 1e-9) << p.name;
    for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(r[i], r[i - 1]) << p.name;
    EXPECT_FALSE(p.source.empty()) << p.name;
    // A smaller k takes the first rates.
    const std::vector<double> two = p.rates(std::min(2, p.measured_k));
    EXPECT_DOUBLE_EQ(two[0], r[0]) << p.name;
  }
}

BatchShape decodes(int64_t n, int64_t context, int64_t drafts_each) {
  BatchShape s;
  for (int64_t i = 0; i < n; ++i) s.add_decode(context);
  s.decode_draft_tokens = n * drafts_each;
  s.num_sampled = n * (1 + drafts_each);
  return s;
}

// Verification: 1 + k query tokens per decode in the GEMMs and the LM head, the KV read once.
TEST(SpeculativeCost, VerificationCountsTheDraftsAsQueryTokens) {
  const CostModel plain(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"));
  const BatchShape one = decodes(32, 2000, 0), four = decodes(32, 2000, 3);
  EXPECT_EQ(four.total_tokens(), 128);
  const IterationCost a = plain.iteration(one), b = plain.iteration(four);
  EXPECT_GT(b.gemm_s, a.gemm_s);
  EXPECT_GT(b.lm_head_s, a.lm_head_s);
  // Memory-bound decode attention: four queries per sequence cost well under four times one.
  EXPECT_GE(b.decode_attention_s, a.decode_attention_s);
  EXPECT_LT(b.decode_attention_s, 2 * a.decode_attention_s);
  EXPECT_EQ(b.draft_s, 0);  // no drafter set
}

// FlashMLA packs queries x heads into 64-row tiles: 16 heads per GPU verify 4 tokens for the
// FLOPs of one; 8 tokens take two tiles.
TEST(SpeculativeCost, MlaVerificationFillsTheHeadTile) {
  const MlaDecodeWork w = mla_decode_work_coefficients(resolve_model("deepseek-v3"), 8);
  ASSERT_EQ(w.heads, 16);
  EXPECT_DOUBLE_EQ(w(10, 40000, 4).flops, w(10, 40000, 1).flops);
  EXPECT_DOUBLE_EQ(w(10, 40000, 8).flops, 2 * w(10, 40000, 1).flops);
  EXPECT_GT(w(10, 40000, 4).bytes, w(10, 40000, 1).bytes);  // the absorbed Q in and O out
}

TEST(SpeculativeCost, DraftersCostTheirPasses) {
  const ModelSpec target = resolve_model("llama-3.1-70b");
  const HardwareProfile gpu = resolve_gpu("h100-sxm");
  const BatchShape shape = decodes(16, 1500, 3);
  auto with = [&](const std::string& spec, std::shared_ptr<const CostModel> draft = nullptr) {
    CostModel c(target, gpu, 4);
    c.set_speculative(parse_speculative_decoding(spec, "--spec-decode"), std::move(draft));
    return c.iteration(shape);
  };
  const IterationCost ngram = with("ngram:k=3:accept=0.5");
  EXPECT_EQ(ngram.draft_s, 0);
  const IterationCost eagle = with("eagle:k=3:accept=0.5");
  EXPECT_GT(eagle.draft_s, 0);
  EXPECT_NEAR(eagle.total_s - ngram.total_s, eagle.draft_s, 1e-12);
  // A head of one layer: well under a tenth of the 80-layer target's step.
  EXPECT_LT(eagle.draft_s, 0.1 * ngram.total_s);
  // k passes: a longer draft costs more.
  EXPECT_GT(with("eagle:k=5:accept=0.5").draft_s, with("eagle:k=2:accept=0.5").draft_s);
  // A draft model runs its whole forward k times: an 8B draft costs more than one 70B layer.
  auto small = std::make_shared<const CostModel>(resolve_model("llama-3.1-8b"), gpu, 4);
  const IterationCost draft = with("draft:llama-3.1-8b:k=3:accept=0.5", small);
  EXPECT_GT(draft.draft_s, eagle.draft_s);
  EXPECT_THROW(with("draft:llama-3.1-8b:k=3:accept=0.5"), std::logic_error);  // no draft cost model
}

// The drafter's weights and KV share the GPU with the target's: EAGLE's one layer takes about
// 1/L of both, a draft model its whole weights and KV per token.
TEST(SpeculativeCost, DraftersTakeKvMemory) {
  const ModelSpec target = resolve_model("llama-3.1-70b");
  const HardwareProfile gpu = resolve_gpu("h100-sxm");
  const CostModel plain(target, gpu, 4);
  CostModel eagle(target, gpu, 4);
  eagle.set_speculative(parse_speculative_decoding("eagle:k=3:accept=0.5", "--spec-decode"));
  EXPECT_DOUBLE_EQ(eagle.weight_bytes_per_gpu(), plain.weight_bytes_per_gpu() * (1 + 1.0 / target.num_layers));
  EXPECT_DOUBLE_EQ(eagle.kv_bytes_per_token_per_gpu_with_drafter(),
                   plain.kv_bytes_per_token_per_gpu_with_drafter() * (1 + 1.0 / target.num_layers));
  const int64_t base = plain.kv_capacity_tokens(0.9), with_eagle = eagle.kv_capacity_tokens(0.9);
  EXPECT_LT(with_eagle, base);
  EXPECT_GT(with_eagle, base * 0.97);
  CostModel draft(target, gpu, 4);
  auto small = std::make_shared<const CostModel>(resolve_model("llama-3.1-8b"), gpu, 4);
  draft.set_speculative(parse_speculative_decoding("draft:llama-3.1-8b:k=3:accept=0.5", "--spec-decode"), small);
  EXPECT_DOUBLE_EQ(draft.weight_bytes_per_gpu(), plain.weight_bytes_per_gpu() + small->weight_bytes_per_gpu());
  EXPECT_LT(draft.kv_capacity_tokens(0.9), with_eagle);
  // n-gram lookup holds nothing on the GPU.
  CostModel ngram(target, gpu, 4);
  ngram.set_speculative(parse_speculative_decoding("ngram:k=3:accept=0.5", "--spec-decode"));
  EXPECT_EQ(ngram.kv_capacity_tokens(0.9), base);
}

}  // namespace
}  // namespace batchsim
