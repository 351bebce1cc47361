// The roofline: per-operator FLOPs and bytes against hand calculations, the iteration sum,
// tensor parallelism, KV capacity, and monotonicity.
#include "hwmodel/cost_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"
#include "hwmodel/roofline.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using testing::round_profile;
using testing::user_error_of;

GemmShape shape_of(const ModelSpec& m, int tp, LayerGemm g) { return layer_gemm_shapes(m, tp)[static_cast<int>(g)]; }

TEST(Roofline, Opt13bGemmShapesFlopsAndBytes) {
  const ModelSpec m = resolve_model("opt-13b");
  // hidden 5120, 40 heads of 128, ffn 20480, ReLU (not gated).
  EXPECT_EQ(shape_of(m, 1, LayerGemm::qkv).k, 5120);
  EXPECT_EQ(shape_of(m, 1, LayerGemm::qkv).n, 3 * 5120);
  EXPECT_EQ(shape_of(m, 1, LayerGemm::o).k, 5120);
  EXPECT_EQ(shape_of(m, 1, LayerGemm::o).n, 5120);
  EXPECT_EQ(shape_of(m, 1, LayerGemm::mlp_up).n, 20480);
  EXPECT_EQ(shape_of(m, 1, LayerGemm::mlp_down).k, 20480);
  EXPECT_EQ(lm_head_shape(m, 1).n, 50272);

  // QKV at M = 512: 2 * 512 * 5120 * 15360 FLOPs;
  // bytes 2 * (512*5120 + 5120*15360 + 512*15360) = 2 * 89,128,960.
  const OperatorWork qkv = gemm_work(shape_of(m, 1, LayerGemm::qkv), 512, m.weight_format);
  EXPECT_DOUBLE_EQ(qkv.flops, 80530636800.0);
  EXPECT_DOUBLE_EQ(qkv.bytes, 178257920.0);

  // LM head for 3 sampled rows: 2 * 3 * 5120 * 50272; bytes 2 * (3*5120 + 5120*50272 + 3*50272).
  const OperatorWork head = gemm_work(lm_head_shape(m, 1), 3, m.weight_format);
  EXPECT_DOUBLE_EQ(head.flops, 1544355840.0);
  EXPECT_DOUBLE_EQ(head.bytes, 515117632.0);
}

TEST(Roofline, Opt13bAttentionFlopsAndBytes) {
  const ModelSpec m = resolve_model("opt-13b");
  // Chunk of 512 after 1024 tokens of context: pairs = 512*1024 + 512*513/2 = 655,616;
  // FLOPs = 4 * 40 heads * 128 * 655,616. Bytes: Q and O 2 * 512 * 40 * 128, K and V of
  // 1536 keys 2 * 1536 * 40 * 128, times 2 bytes.
  const OperatorWork p = prefill_attention_work(m, 1, 512, 1024);
  EXPECT_DOUBLE_EQ(p.flops, 13427015680.0);
  EXPECT_DOUBLE_EQ(p.bytes, 41943040.0);
  // A chunk with no prior context is plain causal prefill: 4 * 5120 * 4*5/2 for 4 tokens.
  EXPECT_DOUBLE_EQ(prefill_attention_work(m, 1, 4, 0).flops, 4.0 * 5120 * 10);

  // Decode, 10 sequences with 10,000 context tokens in total: K and V 2 * 10000 * 5120 plus
  // Q and O 2 * 10 * 5120, times 2 bytes; FLOPs 4 * 5120 * 10000.
  const OperatorWork d = decode_attention_work(m, 1, 10, 10000);
  EXPECT_DOUBLE_EQ(d.bytes, 205004800.0);
  EXPECT_DOUBLE_EQ(d.flops, 204800000.0);
}

// The cost model leaves FlashAttention-3's tiles uncounted on a profile that costs
// FlashAttention-2's: everything else of the work is the same, and so is every prefill's time
// on either kernel's profile.
TEST(Roofline, PrefillWorkWithoutFa3TilesDiffersOnlyInThem) {
  const ModelSpec m = resolve_model("llama-3.1-8b");
  for (const auto& [c, p] : {std::pair<int64_t, int64_t>{1, 0}, {37, 4000}, {512, 1024}, {8192, 0}}) {
    const OperatorWork all = prefill_attention_work(m, 2, c, p);
    const OperatorWork fa2 = prefill_attention_work(m, 2, c, p, /*fa3_tiles=*/false);
    EXPECT_GT(all.fa3.tiles, 0);
    EXPECT_GT(all.fa3.iterations, 0);
    EXPECT_EQ(fa2.fa3.tiles, 0);
    EXPECT_EQ(fa2.fa3.iterations, 0);
    EXPECT_EQ(fa2.fa3.iteration_flops, 0);
    OperatorWork fa2_with_tiles = fa2;
    fa2_with_tiles.fa3 = all.fa3;
    EXPECT_EQ(std::memcmp(&fa2_with_tiles, &all, sizeof all), 0) << c << " after " << p;
  }
  for (const char* gpu : {"a100-80gb", "h100-sxm-fitted"}) {
    const HardwareProfile g = resolve_gpu(gpu);
    EXPECT_EQ(costs_fa3_prefill_tiles(g), std::string_view(gpu) == "h100-sxm-fitted");
    const CostModel cm(m, g, 2);
    BatchShape shape;
    shape.prefills = {{300, 0}, {2000, 1500}};
    shape.num_decodes = 4;
    shape.decode_context_sum = 4000;
    shape.num_sampled = 5;
    OperatorWork full = prefill_attention_work(m, 2, 300, 0);
    full += prefill_attention_work(m, 2, 2000, 1500);
    EXPECT_EQ(cm.iteration(shape).prefill_attention_s, m.num_layers * prefill_attention_time_s(g, full)) << gpu;
  }
}

TEST(Roofline, GqaShapesSplitHeadsAndReplicateKvHeads) {
  const ModelSpec l3 = resolve_model("llama-3-8b");
  // QKV: 32 query heads + 2 * 8 KV heads of 128 = 6144 columns; gate+up 2 * 14336.
  EXPECT_EQ(shape_of(l3, 1, LayerGemm::qkv).n, 6144);
  EXPECT_EQ(shape_of(l3, 1, LayerGemm::mlp_up).n, 28672);
  EXPECT_EQ(shape_of(l3, 1, LayerGemm::mlp_down).k, 14336);
  // Decode of 10 sequences with 10,000 context tokens: K and V of 8 heads only:
  // 2 * (2*10000*8*128 + 2*10*32*128) bytes; FLOPs use all 32 query heads: 4*32*128*10000.
  const OperatorWork d = decode_attention_work(l3, 1, 10, 10000);
  EXPECT_DOUBLE_EQ(d.bytes, 41123840.0);
  EXPECT_DOUBLE_EQ(d.flops, 163840000.0);

  const ModelSpec l70 = resolve_model("llama-2-70b");
  // TP 4: 16 query heads and 2 KV heads per GPU: QKV 8192 x (16 + 4) * 128 = 2560;
  // O 2048 x 8192; gate+up 8192 x 2 * 7168; down 7168 x 8192; LM head 8192 x 8000.
  EXPECT_EQ(shape_of(l70, 4, LayerGemm::qkv).n, 2560);
  EXPECT_EQ(shape_of(l70, 4, LayerGemm::o).k, 2048);
  EXPECT_EQ(shape_of(l70, 4, LayerGemm::mlp_up).n, 14336);
  EXPECT_EQ(shape_of(l70, 4, LayerGemm::mlp_down).k, 7168);
  EXPECT_EQ(lm_head_shape(l70, 4).n, 8000);
  EXPECT_EQ(kv_bytes_per_token_per_gpu(l70, 4), 2 * 80 * 2 * 128 * 2);
  // TP 16 > 8 KV heads: each GPU keeps one whole KV head (replicated), 4 query heads.
  EXPECT_EQ(kv_heads_per_gpu(l70, 16), 1);
  EXPECT_EQ(shape_of(l70, 16, LayerGemm::qkv).n, (4 + 2) * 128);
  // Prefill of 100 new tokens on TP 8: 8 query heads, 1 KV head per GPU;
  // pairs 100*101/2 = 5050; FLOPs 4 * 8 * 128 * 5050; bytes 2 * (2*100*8*128 + 2*100*1*128).
  const OperatorWork p = prefill_attention_work(l70, 8, 100, 0);
  EXPECT_DOUBLE_EQ(p.flops, 20684800.0);
  EXPECT_DOUBLE_EQ(p.bytes, 460800.0);
}

TEST(Roofline, GemmTimeTakesTheBindingRoof) {
  const ModelSpec m = resolve_model("opt-13b");
  const HardwareProfile gpu = round_profile();
  const GemmShape qkv = shape_of(m, 1, LayerGemm::qkv);
  // M = 512: 80.53 GFLOP at 50 TFLOP/s = 1.6106 ms > 178 MB at 1 TB/s: compute-bound.
  EXPECT_NEAR(gemm_time_s(gpu, qkv, 512, WeightFormat::bf16), 80530636800.0 / 50e12, 1e-12);
  EXPECT_TRUE(gemm_compute_bound(gpu, qkv, 512, WeightFormat::bf16));
  // M = 1: the 5120 x 15360 weights (157 MB) dominate: memory-bound.
  EXPECT_NEAR(gemm_time_s(gpu, qkv, 1, WeightFormat::bf16), 2.0 * (5120 + 5120 * 15360 + 15360) / 1e12, 1e-12);
  EXPECT_FALSE(gemm_compute_bound(gpu, qkv, 1, WeightFormat::bf16));
  // Small-M efficiency: eta(M) = eta_max * M / (M + m_half).
  HardwareProfile fitted = gpu;
  fitted.gemm_m_half = 64;
  EXPECT_DOUBLE_EQ(gemm_compute_efficiency(fitted, 64), 0.25);
  EXPECT_DOUBLE_EQ(gemm_compute_efficiency(fitted, 192), 0.375);
}

TEST(Roofline, CombineIsMaxOrPNorm) {
  EXPECT_DOUBLE_EQ(roofline_combine(3, 4, 0), 4);
  EXPECT_DOUBLE_EQ(roofline_combine(3, 4, 1), 7);
  EXPECT_NEAR(roofline_combine(3, 4, 2), 5, 1e-12);
  EXPECT_NEAR(roofline_combine(3, 4, 200), 4, 1e-9);  // large p tends to the hard roof
  EXPECT_DOUBLE_EQ(roofline_combine(0, 0, 1.5), 0);
}

TEST(Roofline, ElementwiseBytesByHand) {
  const ModelSpec l3 = resolve_model("llama-3-8b");
  // 10 tokens, 2 bytes: norm 2 * 10 * 4096 * 2; rotary on TP 2: 16 query + 4 KV heads of 128,
  // read and written; SiLU-and-mul reads 2 * 7168 and writes 7168 per token on TP 2.
  EXPECT_DOUBLE_EQ(elementwise_bytes(l3, 1, ElementwiseOp::norm, 10), 163840.0);
  EXPECT_DOUBLE_EQ(elementwise_bytes(l3, 2, ElementwiseOp::rope, 10), 2.0 * 20 * 20 * 128);
  EXPECT_DOUBLE_EQ(elementwise_bytes(l3, 2, ElementwiseOp::activation, 10), 20.0 * 3 * 7168);
  EXPECT_DOUBLE_EQ(elementwise_bytes(l3, 1, ElementwiseOp::residual_add, 10), 20.0 * 3 * 4096);
  // OPT's ReLU reads and writes ffn only.
  EXPECT_DOUBLE_EQ(elementwise_bytes(resolve_model("opt-13b"), 1, ElementwiseOp::activation, 1), 2.0 * 2 * 20480);
}

TEST(Roofline, AllReduceUsesThePerDegreeFitWhenPresent) {
  HardwareProfile gpu = round_profile();
  // Fallback: 10 us + 1 MB * 2 * 3/4 / 100 GB/s.
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 4), 10e-6 + 1.5e6 / 100e9, 1e-15);
  gpu.allreduce = {{4, 30e-6, 200e9}};
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 4), 30e-6 + 1.5e6 / 200e9, 1e-15);
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 2), 10e-6 + 1e6 / 100e9, 1e-15);  // no tp-2 entry
  EXPECT_EQ(allreduce_time_s(gpu, 1e6, 1), 0);
}

TEST(Roofline, AnAllReduceOverSeveralNodesPaysTheNics) {
  HardwareProfile gpu = round_profile();
  gpu.gpus_per_node = 8;
  gpu.internode_bytes_per_s = 50e9;
  gpu.internode_latency_s = 20e-6;
  // TP 16 over two nodes: one node's latency (no tp-8 entry: the interconnect's 10 us) + a hop
  // of 20 us + 1 MB * 2 * 15/16 through each GPU's NIC at 50 GB/s, where NVLink's price was
  // 10 us + 1.875 MB / 100 GB/s.
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 16), 10e-6 + 20e-6 + 1.875e6 / 50e9, 1e-15);
  gpu.allreduce = {{8, 17e-6, 300e9}};
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 16), 17e-6 + 20e-6 + 1.875e6 / 50e9, 1e-15);
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 32), 17e-6 + 20e-6 + 1e6 * 2 * 31 / 32 / 50e9, 1e-15);
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 8), 17e-6 + 1.75e6 / 300e9, 1e-15);  // inside a node: NVLink
  // A measured fit for the degree wins.
  gpu.allreduce.push_back({16, 60e-6, 20e9});
  EXPECT_NEAR(allreduce_time_s(gpu, 1e6, 16), 60e-6 + 1.875e6 / 20e9, 1e-15);
}

// Vidur's all-reduces over two DGX A100 nodes of 8 GPUs (hwmodel/measured/vidur/network/a100_dgx,
// num_workers 16, devices_per_node 8), scored, never fitted: the roofline over the NICs stays a
// lower bound on what NCCL took (its protocols reach the NICs' rate only for large messages) and
// is nearer than NVLink's price was.
TEST(Roofline, AllReduceOverTwoA100NodesAgainstVidursMeasurements) {
  const HardwareProfile gpu = resolve_gpu("a100-80gb-fitted");
  ASSERT_EQ(gpu.gpus_per_node, 8);
  HardwareProfile one_node = gpu;
  one_node.gpus_per_node = 16;  // NVLink's price over 16 GPUs, as before
  CsvTable csv(testing::data_file(testing::measured_dir() / "vidur/network/a100_dgx", "all_reduce.csv"));
  int rows = 0;
  double error = 0, nvlink_error = 0;
  while (csv.next()) {
    if (csv.integer("num_workers") != 16 || csv.integer("devices_per_node") != 8) continue;
    const double bytes = csv.number("size");
    const double measured = csv.number("time_stats.all_reduce.median") * 1e-3;
    const double predicted = allreduce_time_s(gpu, bytes, 16);
    EXPECT_LE(predicted, 1.1 * measured) << bytes << " bytes";
    error += std::abs(predicted / measured - 1);
    nvlink_error += std::abs(allreduce_time_s(one_node, bytes, 16) / measured - 1);
    ++rows;
  }
  ASSERT_GT(rows, 900);
  EXPECT_LT(error / rows, 0.6);
  EXPECT_LT(error, 0.7 * nvlink_error);
}

TEST(Roofline, AttentionUnitCostsByHand) {
  HardwareProfile gpu = round_profile();
  gpu.attention_launch_s = 5e-6;
  gpu.prefill_attention_per_head_token_s = 1e-9;
  gpu.decode_attention_per_seq_kv_head_s = 1e-7;
  gpu.decode_attention_roofline_exponent = 1;  // p = 1: unit time and KV time add up
  const ModelSpec l70 = resolve_model("llama-2-70b");
  // TP 2: 32 query heads, 4 KV heads per GPU. Prefill of 100 tokens: 3,200 head-tokens.
  const OperatorWork p = prefill_attention_work(l70, 2, 100, 0);
  EXPECT_DOUBLE_EQ(p.units, 3200);
  // All of it is the causal triangle (no prior context): 12.5 TFLOP/s.
  EXPECT_DOUBLE_EQ(p.causal_flops, p.flops);
  EXPECT_NEAR(prefill_attention_time_s(gpu, p), 5e-6 + 3200e-9 + p.flops / 12.5e12, 1e-15);
  // Decode of 10 sequences: 40 (sequence, KV head) units.
  const OperatorWork d = decode_attention_work(l70, 2, 10, 10 * 500);
  EXPECT_DOUBLE_EQ(d.units, 40);
  EXPECT_NEAR(decode_attention_time_s(gpu, d, 10), 5e-6 + 40e-7 + d.bytes / 0.5e12, 1e-15);
}

// FlashAttention-2's num_splits_heuristic (flash_api.cpp), worked by hand for 108 SMs.
TEST(Roofline, FlashDecodeSplitsFollowFlashAttentionsHeuristic) {
  // 88 blocks >= 0.8 x 108: enough to fill the SMs, no split.
  EXPECT_EQ(flash_decode_num_splits(88, 4033, 108), 1);
  // 32 blocks over 32 KV blocks of 128 tokens: eligible splits 1, 2, 3, 4, 5, 6, 7, 8, 11, 16,
  // 32 have wave efficiencies .30 .59 .89 .59 .74 .89 .69 .79 .81 .95 .95; the first within
  // 85% of the best (.95) is 3.
  EXPECT_EQ(flash_decode_num_splits(32, 4033, 108), 3);
  // One KV block cannot be split; no SM count, no split.
  EXPECT_EQ(flash_decode_num_splits(32, 33, 108), 1);
  EXPECT_EQ(flash_decode_num_splits(32, 4033, 0), 1);
}

// Decode waves: the busiest of sm_count SMs streams ceil(units / SMs) units' K/V at the per-SM
// rate, and the longest sequence's unit bounds the call (mixed contexts).
TEST(Roofline, DecodeWavesAndTheLongestSequenceByHand) {
  HardwareProfile gpu = round_profile();
  gpu.sm_count = 108;
  gpu.decode_attention_sm_bytes_per_s = 1e9;        // slow enough to bind over 0.5 TB/s of HBM
  const ModelSpec m = resolve_model("llama-2-7b");  // 32 KV heads, head_dim 128
  // 192 units: at most 2 per SM; 224 units put a third on some SMs.
  const OperatorWork two = decode_attention_work(m, 1, 6, 6 * 1000);
  const OperatorWork full = decode_attention_work(m, 1, 7, 7 * 1000);
  const double unit_bytes = 1000.0 * 128 * 2 * 2;  // K and V of one head, 1000 tokens
  EXPECT_DOUBLE_EQ(two.unit_bytes_max, unit_bytes);
  // Per unit, Q and O add 2 x 128 x 2 bytes x (query heads / KV heads = 1) to the mean.
  const double mean_unit = unit_bytes + 2 * 128 * 2;
  EXPECT_GT(2 * mean_unit / 1e9, two.bytes / 0.5e12);
  EXPECT_NEAR(decode_attention_time_s(gpu, two, 6), 2 * mean_unit / 1e9, 1e-12);
  EXPECT_NEAR(decode_attention_time_s(gpu, full, 7), 3 * mean_unit / 1e9, 1e-12);
  // Same total context, one long sequence: its unit alone outlasts the waves of the mean.
  const OperatorWork mixed = decode_attention_work(m, 1, 6, 6 * 1000, 5000);
  EXPECT_NEAR(decode_attention_time_s(gpu, mixed, 6), 5000.0 * 128 * 4 / 1e9, 1e-12);
  // Without a per-SM rate (datasheet profiles) the wave term is off.
  gpu.decode_attention_sm_bytes_per_s = 0;
  EXPECT_NEAR(decode_attention_time_s(gpu, full, 7), full.bytes / 0.5e12, 1e-15);
}

// Prefill query tiles of 64 tokens x query heads; with grouped-query attention the blocks of a
// KV group share their K/V reads.
TEST(Roofline, PrefillTilesAndGroupedKvReadsByHand) {
  const ModelSpec l7 = resolve_model("llama-2-7b");    // 32 query heads, 32 KV heads
  const ModelSpec l70 = resolve_model("llama-2-70b");  // at TP 2: 32 query, 4 KV heads per GPU
  const OperatorWork mha = prefill_attention_work(l7, 1, 128, 1024);
  EXPECT_DOUBLE_EQ(mha.ctas, 2 * 32);
  // Each block reads on average 1024 + 64 keys of K and V, 128 dims, 2 bytes.
  EXPECT_DOUBLE_EQ(mha.cta_kv_bytes, 64 * 1088.0 * 2 * 128 * 2);
  const OperatorWork gqa = prefill_attention_work(l70, 2, 128, 1024);
  EXPECT_DOUBLE_EQ(gqa.ctas, mha.ctas);
  EXPECT_DOUBLE_EQ(gqa.cta_kv_bytes, mha.cta_kv_bytes / 8);
  EXPECT_DOUBLE_EQ(gqa.flops, mha.flops);  // same query heads and head_dim: same FLOPs
  HardwareProfile gpu = round_profile();
  gpu.sm_count = 108;
  gpu.prefill_attention_sm_bytes_per_s = 1e9;
  // 64 blocks fit in one wave: the per-SM bound is one mean block's bytes, 557 us, over the
  // FLOP time (97 us at 25 and 12.5 TFLOP/s) and the HBM time.
  const double compute_s = (mha.flops - mha.causal_flops) / 25e12 + mha.causal_flops / 12.5e12;
  const double per_sm_s = mha.cta_kv_bytes / 64 / 1e9;
  EXPECT_GT(per_sm_s, std::max(compute_s, mha.bytes / 1e12));
  EXPECT_NEAR(prefill_attention_time_s(gpu, mha), per_sm_s, 1e-12);
  // 8 x fewer HBM bytes per block: the FLOPs bind again.
  EXPECT_NEAR(prefill_attention_time_s(gpu, gqa), std::max(compute_s, per_sm_s / 8), 1e-12);
  EXPECT_LT(prefill_attention_time_s(gpu, gqa), prefill_attention_time_s(gpu, mha));
}

// FlashAttention-3's tiles of one (sequence, KV head), one by one as hopper/block.h bounds
// them (get_n_block_min_max with PackGQA: the tile's last row is a token of index
// floor(((i + 1) m - 1) / group), and its keys end at that token's causal limit or the sequence).
Fa3PrefillTiles fa3_tiles_one_by_one(int64_t c, int64_t p, int64_t group, Fa3Tile t) {
  Fa3PrefillTiles r;
  for (int64_t i = 0; i * t.m < c * group; ++i) {
    const int64_t m_idx_max = ((i + 1) * t.m - 1) / group + 1;
    const int64_t n_token_max = m_idx_max + (p + c) - c;
    const int64_t n_block_max = std::min((p + c + t.n - 1) / t.n, (n_token_max + t.n - 1) / t.n);
    r.tiles += 1;
    r.iterations += static_cast<double>(n_block_max);
    r.iterations_max = std::max(r.iterations_max, static_cast<double>(n_block_max));
  }
  return r;
}

TEST(Roofline, FloorSumAndFa3TilesMatchTheLoops) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = static_cast<int64_t>(rng() % 300), m = 1 + static_cast<int64_t>(rng() % 5000);
    const int64_t a = static_cast<int64_t>(rng() % 400), b = static_cast<int64_t>(rng() % 100000);
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (a * i + b) / m;
    ASSERT_EQ(floor_sum(n, m, a, b), sum) << n << " " << m << " " << a << " " << b;
  }
  const Fa3Tile tiles[] = {{128, 128}, {64, 128}, {192, 128}, {128, 80}, {128, 160}};
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t c = 1 + static_cast<int64_t>(rng() % 3000), p = static_cast<int64_t>(rng() % 2000);
    const int64_t group = 1 + static_cast<int64_t>(rng() % 96);
    const Fa3Tile t = tiles[rng() % 5];
    const Fa3PrefillTiles want = fa3_tiles_one_by_one(c, p, group, t);
    const Fa3PrefillTiles got = fa3_prefill_tiles(c, p, group, t);
    ASSERT_EQ(got.tiles, want.tiles) << c << " " << p << " " << group;
    ASSERT_EQ(got.iterations, want.iterations) << c << " " << p << " " << group << " " << t.m << "x" << t.n;
    ASSERT_EQ(got.iterations_max, want.iterations_max);
    ASSERT_EQ(got.packed_rows_max, static_cast<double>(c * group));
  }
}

// FlashAttention-3 as vLLM builds it packs the query heads of a KV head into one tile's rows, so
// its tiles are counted per (sequence, KV head): worked by hand for Llama-2-70B's 64/8 heads.
TEST(Roofline, Fa3PrefillTilesPackTheGqaGroupByHand) {
  // vllm-flash-attn hopper/tile_size.h: 16-bit head_dim 128 is 128 x 128 (64 x 128 on one MMA
  // warp group), 64 is 192 x 128, 256 is 128 x 80; FP8 head_dim 128 is 128 x 160.
  using MN = std::pair<int64_t, int64_t>;
  auto tile = [](int d, int bytes, bool one = false) {
    const Fa3Tile t = fa3_prefill_tile(d, bytes, one);
    return MN(t.m, t.n);
  };
  EXPECT_EQ(tile(128, 2), MN(128, 128));
  EXPECT_EQ(tile(128, 2, true), MN(64, 128));
  EXPECT_EQ(tile(64, 2), MN(192, 128));
  EXPECT_EQ(tile(256, 2), MN(128, 80));
  EXPECT_EQ(tile(128, 1), MN(128, 160));
  EXPECT_EQ(tile(128, 1, true), MN(128, 160));  // no one-warp-group FP8 tile

  const ModelSpec gqa = resolve_model("llama-2-70b");  // 64 query heads, 8 KV heads, head_dim 128
  ModelSpec mha = gqa;
  mha.num_kv_heads = 64;
  // 1,000 tokens, group 8: 8,000 packed rows, ceil(8000 / 128) = 63 tiles per KV head, tile i
  // holding tokens 16 i .. 16 i + 15. Its K/V blocks: ceil(16 (i + 1) / 128) = floor(i / 8) + 1
  // for i < 62 (8 x (1 + ... + 7) + 6 x 8 = 272), and the last, tokens 992..999, ceil(1000 / 128)
  // = 8: 280 iterations per KV head.
  const OperatorWork g = prefill_attention_work(gqa, 1, 1000, 0);
  EXPECT_DOUBLE_EQ(g.fa3.tiles, 8 * 63);
  EXPECT_DOUBLE_EQ(g.fa3.iterations, 8 * 280);
  EXPECT_DOUBLE_EQ(g.fa3.iterations_max, 8);
  EXPECT_DOUBLE_EQ(g.fa3.iteration_flops, 4.0 * 128 * 128 * 128);
  // MHA: 8 tiles of 128 tokens per head, 1 + 2 + ... + 8 = 36 blocks each, for 64 heads.
  const OperatorWork h = prefill_attention_work(mha, 1, 1000, 0);
  EXPECT_DOUBLE_EQ(h.fa3.tiles, 64 * 8);
  EXPECT_DOUBLE_EQ(h.fa3.iterations, 64 * 36);
  EXPECT_DOUBLE_EQ(h.flops, g.flops);  // same query heads: same FLOPs, FlashAttention-2's CTAs
  EXPECT_DOUBLE_EQ(h.ctas, g.ctas);
  // The KV-cache write: 1,000 tokens x KV heads x 128 x (K, V) x (2 bytes read + 2 written).
  EXPECT_DOUBLE_EQ(g.kv_write_tokens, 1000);
  EXPECT_DOUBLE_EQ(g.kv_write_bytes, 1000.0 * 8 * 128 * 2 * 4);
  EXPECT_DOUBLE_EQ(h.kv_write_bytes, 8 * g.kv_write_bytes);

  HardwareProfile gpu = round_profile();  // 100 TFLOP/s, prefill at 25%
  gpu.prefill_attention_kernel = PrefillAttentionKernel::flash_attention_3;
  gpu.sm_count = 100;
  gpu.prefill_attention_per_tile_s = 1e-6;
  const double iteration_s = 4.0 * 128 * 128 * 128 / (100e12 / 100 * 0.25);  // 33.6 us on one SM
  // Four such prompts: 2,016 tiles spread over 100 SMs, far above the HBM time (max corner).
  OperatorWork four;
  for (int i = 0; i < 4; ++i) four += g;
  EXPECT_NEAR(prefill_attention_time_s(gpu, four), (2016 * 1e-6 + 8960 * iteration_s) / 100, 1e-12);
  // One MHA prompt of 8 heads: 64 tiles, fewer than the SMs; the longest (8 blocks) binds.
  ModelSpec small = mha;
  small.num_heads = small.num_kv_heads = 8;
  const OperatorWork one = prefill_attention_work(small, 1, 1000, 0);
  EXPECT_GT(1e-6 + 8 * iteration_s, (64 * 1e-6 + 8 * 36 * iteration_s) / 100);
  EXPECT_NEAR(prefill_attention_time_s(gpu, one), 1e-6 + 8 * iteration_s, 1e-12);
  // 64 one-token prompts: one tile of 8 packed rows per (sequence, KV head), on the 64-row tile:
  // 512 tiles with 64/8 heads, 4,096 with 64/64 (FlashAttention-2's count is 4,096 for both).
  OperatorWork gqa_ones, mha_ones;
  for (int i = 0; i < 64; ++i) {
    gqa_ones += prefill_attention_work(gqa, 1, 1, 0);
    mha_ones += prefill_attention_work(mha, 1, 1, 0);
  }
  EXPECT_DOUBLE_EQ(gqa_ones.fa3.tiles, 512);
  EXPECT_DOUBLE_EQ(mha_ones.fa3.tiles, 4096);
  EXPECT_DOUBLE_EQ(gqa_ones.ctas, mha_ones.ctas);
  const double small_iteration_s = iteration_s / 2;  // 64 x 128
  EXPECT_NEAR(prefill_attention_time_s(gpu, gqa_ones), 512 * (1e-6 + small_iteration_s) / 100, 1e-12);
  EXPECT_NEAR(prefill_attention_time_s(gpu, mha_ones), 4096 * (1e-6 + small_iteration_s) / 100, 1e-12);
  // The KV-cache write adds per token and per byte, under either kernel.
  gpu.attention_kv_write_per_token_s = 1e-9;
  gpu.attention_kv_write_efficiency = 0.5;
  const double write_s = 4000 * 1e-9 + four.kv_write_bytes / 0.5e12;
  EXPECT_NEAR(prefill_attention_time_s(gpu, four), (2016 * 1e-6 + 8960 * iteration_s) / 100 + write_s, 1e-12);
}

// NonAttentionCache gives the costs computed without it, to the bit, whatever the order of the
// shapes and however often two keys share a slot: random shapes over few keys (hits) and many
// (slots overwritten), each costed with and without the cache.
TEST(CostModel, NonAttentionCacheChangesNoFigure) {
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"), 2, resolve_engine("vllm"));
  NonAttentionCache cache;
  std::mt19937 rng(7);
  const auto uniform = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int i = 0; i < 20000; ++i) {
    BatchShape shape;
    const int64_t range = i < 10000 ? 8 : 4000;  // few keys, then many more than the slots
    const int64_t decodes = uniform(0, range);
    for (int64_t d = 0; d < decodes; ++d) shape.add_decode(uniform(1, 3000));
    shape.num_sampled = decodes;
    if (decodes == 0 || uniform(0, 2) == 0) {
      shape.add_prefill(uniform(1, range * 4), uniform(0, 2000));
      shape.num_sampled += uniform(0, 1);
    }
    const IterationCost plain = cm.iteration(shape);
    const IterationCost cached = cm.iteration(shape, &cache);
    ASSERT_EQ(cached.total_s, plain.total_s) << i;
    ASSERT_EQ(cached.gemm_s, plain.gemm_s) << i;
    ASSERT_EQ(cached.lm_head_s, plain.lm_head_s) << i;
    ASSERT_EQ(cached.elementwise_s, plain.elementwise_s) << i;
    ASSERT_EQ(cached.communication_s, plain.communication_s) << i;
    ASSERT_EQ(cached.overhead_s, plain.overhead_s) << i;
    ASSERT_EQ(cached.layer_gemm_s, plain.layer_gemm_s) << i;
    ASSERT_EQ(cached.gemm_compute_bound, plain.gemm_compute_bound) << i;
  }
}

TEST(CostModel, Opt13bDecodeIterationByHand) {
  const ModelSpec m = resolve_model("opt-13b");
  EngineProfile engine;  // 1 ms of CPU per iteration, in series with the GPU
  engine.cpu.per_iteration_s = 1e-3;
  const CostModel cm(m, round_profile(), 1, engine);
  BatchShape shape;
  shape.add_decode(99);  // context 100 including the new token
  shape.num_sampled = 1;
  const IterationCost c = cm.iteration(shape);
  // GEMMs at M = 1 are memory-bound: per layer 2 bytes * (314,572,800 weights + activations
  // (5120+15360) + (5120+5120) + (5120+20480) + (20480+5120)) = 629,309,440 bytes; 40 layers
  // at 1 TB/s.
  EXPECT_NEAR(c.gemm_s, 40 * 629309440.0 / 1e12, 1e-12);
  EXPECT_FALSE(c.gemm_compute_bound);
  // Decode attention: 2 * (2*100*5120 + 2*5120) bytes per layer at 0.5 TB/s.
  EXPECT_NEAR(c.decode_attention_s, 40 * 2068480.0 / 0.5e12, 1e-12);
  EXPECT_EQ(c.prefill_attention_s, 0);
  // LM head, one row: 2 * (5120 + 5120*50272 + 50272) bytes at 1 TB/s.
  EXPECT_NEAR(c.lm_head_s, 514896064.0 / 1e12, 1e-12);
  EXPECT_EQ(c.communication_s, 0);
  EXPECT_DOUBLE_EQ(c.overhead_s, 1e-3);
  // Elementwise kernels of one token, per layer: two norms 2 * (2 * 5120 * 2 bytes), rotary
  // 2 * 80 heads * 128 * 2, ReLU 2 * 20480 * 2, residual add 3 * 5120 * 2: 194,560 bytes;
  // 40 layers, plus the embedding row 2 * 5120 * 2; at 1 TB/s.
  EXPECT_NEAR(c.elementwise_s, (40 * 194560.0 + 20480.0) / 1e12, 1e-15);
  EXPECT_NEAR(c.total_s, c.gemm_s + c.decode_attention_s + c.lm_head_s + c.elementwise_s + c.overhead_s, 1e-15);
  double per_op = 0;
  for (double s : c.layer_gemm_s) per_op += s;
  EXPECT_NEAR(per_op, c.gemm_s, 1e-15);
}

TEST(CostModel, PrefillIsComputeBoundAndLmHeadOnlyForSampledRows) {
  const ModelSpec m = resolve_model("opt-13b");
  const CostModel cm(m, round_profile());
  BatchShape shape;
  shape.add_prefill(512, 1024);  // a middle chunk: samples nothing
  const IterationCost mid = cm.iteration(shape);
  EXPECT_TRUE(mid.gemm_compute_bound);
  EXPECT_EQ(mid.lm_head_s, 0);
  // Attention of the chunk: 4 * 5120 * 512 * 1024 FLOPs against the prior context at
  // 25 TFLOP/s, and 4 * 5120 * 512 * 513 / 2 in the chunk's own triangle at 12.5 TFLOP/s
  // (41.9 MB at 1 TB/s is less).
  EXPECT_NEAR(mid.prefill_attention_s, 40 * (10737418240.0 / 25e12 + 2689597440.0 / 12.5e12), 1e-12);
  // Two chunks in one iteration cost their summed work (one varlen kernel).
  BatchShape two;
  two.add_prefill(512, 1024);
  two.add_prefill(100, 0);
  EXPECT_NEAR(cm.iteration(two).prefill_attention_s, mid.prefill_attention_s + 40 * (4.0 * 5120 * 5050) / 12.5e12,
              1e-12);
  shape.num_sampled = 1;  // the last chunk samples the first output token
  const IterationCost last = cm.iteration(shape);
  EXPECT_GT(last.lm_head_s, 0);
  EXPECT_NEAR(last.total_s - mid.total_s, last.lm_head_s, 1e-15);
}

TEST(CostModel, TensorParallelAddsTwoAllReducesPerLayer) {
  const ModelSpec m = resolve_model("llama-2-70b");
  const CostModel tp1(m, round_profile(), 1);
  const CostModel tp4(m, round_profile(), 4);
  BatchShape shape;
  shape.add_prefill(1000, 0);
  const IterationCost c1 = tp1.iteration(shape);
  const IterationCost c4 = tp4.iteration(shape);
  EXPECT_EQ(c1.communication_s, 0);
  // Per all-reduce: 10 us + 1000 tokens * 8192 * 2 bytes * 2 * 3/4 / 100 GB/s; 160 of them.
  EXPECT_NEAR(c4.communication_s, 160 * (10e-6 + 1000.0 * 8192 * 2 * 1.5 / 100e9), 1e-12);
  // Compute-bound GEMMs split four ways.
  EXPECT_NEAR(c4.gemm_s, c1.gemm_s / 4, c1.gemm_s * 1e-3);
}

TEST(CostModel, AQkNormOverAllHeadsAddsAnAllReducePerLayerUnderTp) {
  // MiniMax-M2.5 on TP 4: besides the two all-reduces of each of its 62 layers, its q and k norms
  // sum each token's two fp32 variances over the ranks: 10 us + 1000 * 8 bytes * 2 * 3/4 / 100 GB/s.
  const ModelSpec m = resolve_model("minimax-m2.5");
  ASSERT_TRUE(m.qk_norm_across_heads);
  ModelSpec per_head = m;
  per_head.qk_norm_across_heads = false;
  BatchShape shape;
  shape.add_prefill(1000, 0);
  const ParallelLayout tep{.tp = 4, .dp = 1, .ep = 4, .moe_tp = 1};
  const IterationCost with = CostModel(m, round_profile(), tep).iteration(shape);
  const IterationCost without = CostModel(per_head, round_profile(), tep).iteration(shape);
  EXPECT_NEAR(with.communication_s - without.communication_s, 62 * (10e-6 + 1000.0 * 8 * 1.5 / 100e9), 1e-12);
  EXPECT_EQ(with.gemm_s, without.gemm_s);
  // On one GPU there is nothing to sum.
  EXPECT_EQ(CostModel(m, round_profile(), 1).iteration(shape).communication_s, 0);
}

TEST(CostModel, BadTensorParallelIsAUserError) {
  EXPECT_THAT(user_error_of([] { CostModel(resolve_model("opt-13b"), round_profile(), 3); }), HasSubstr("--tp 3"));
  EXPECT_THAT(user_error_of([] { CostModel(resolve_model("opt-13b"), round_profile(), 0); }), HasSubstr(">= 1"));
}

TEST(CostModel, KvCapacityByHand) {
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"));
  // 81,920 MiB * 0.9 = 77,309,411,328 bytes; weights 13,476,298,752 bytes.
  // Reserve: 1 GiB + 8192 tokens * (4*4096 + 12288 + 22016 + 11008) * 2 bytes
  //   + 256 * 32000 * 4 bytes = 1,073,741,824 + 1,010,827,264 + 32,768,000.
  EXPECT_DOUBLE_EQ(cm.activation_reserve_bytes(8192), 2117337088.0);
  // (77,309,411,328 - 13,476,298,752 - 2,117,337,088) / 524,288 bytes per token = 117,713.9.
  EXPECT_EQ(cm.kv_capacity_tokens(0.9), 117713);
  // vLLM reports ~7,300 16-token blocks (~117k tokens) for this pair at 0.9 (its startup log,
  // "# GPU blocks"); the order of magnitude is what matters here.

  // TP 2 halves the weights and the KV bytes per token of each GPU.
  const CostModel tp2(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"), 2);
  EXPECT_GT(tp2.kv_capacity_tokens(0.9), 2 * cm.kv_capacity_tokens(0.9));
  // 70B weights (138 GB) do not fit one 80 GB GPU.
  const CostModel big(resolve_model("llama-2-70b"), resolve_gpu("a100-80gb"));
  EXPECT_LE(big.kv_capacity_tokens(0.9), 0);
  EXPECT_THAT(user_error_of([&] { cm.kv_capacity_tokens(1.5); }), HasSubstr("1.5"));
}

// gpt-oss's sliding-window layers (18 of 36, window 128) in each engine's KV pool: as full
// layers, vLLM's hybrid pool (a token costs the 18 full layers; each request holds its window's
// pages beside), SGLang's SWA pool (full + 0.8 x window layers per token).
TEST(CostModel, SlidingWindowLayersInEachEnginesKvPool) {
  const CostModel cm(resolve_model("gpt-oss-120b"), resolve_gpu("h100-sxm"), 2);
  using W = CostModel::WindowKv;
  const int64_t full = cm.kv_capacity_tokens(0.9);
  const int64_t hybrid =
      cm.kv_capacity_tokens(0.9, CostModel::kDefaultActivationTokens, CostModel::kSamplerRows, W::hybrid);
  const int64_t swa =
      cm.kv_capacity_tokens(0.9, CostModel::kDefaultActivationTokens, CostModel::kSamplerRows, W::sglang_swa);
  ASSERT_GT(full, 0);
  // 36 x per-layer bytes against 18 and 18 + 0.8 x 18 (floors apart).
  EXPECT_NEAR(static_cast<double>(hybrid) / static_cast<double>(full), 2.0, 1e-4);
  EXPECT_NEAR(static_cast<double>(swa) / static_cast<double>(full), 36.0 / 32.4, 1e-4);
  // The window's pages: ceil(127 / 16) + 1 = 9 blocks of 16 per window layer, one page holding
  // as many layers (18) as a full-layer page.
  EXPECT_EQ(cm.sliding_window_side_blocks(16), 9);
  EXPECT_EQ(cm.sliding_window_side_blocks(64), 3);  // ceil(127 / 64) + 1
  // A model without window layers: every rule is as_full, no side blocks.
  const CostModel dense(resolve_model("llama-3-8b"), resolve_gpu("h100-sxm"));
  EXPECT_EQ(dense.kv_capacity_tokens(0.9, CostModel::kDefaultActivationTokens, CostModel::kSamplerRows, W::hybrid),
            dense.kv_capacity_tokens(0.9));
  EXPECT_EQ(dense.kv_capacity_tokens_static(0.8, W::sglang_swa), dense.kv_capacity_tokens_static(0.8));
  EXPECT_EQ(dense.sliding_window_side_blocks(16), 0);
}

// Adding tokens to an iteration never makes it faster, for any profile shape.
TEST(CostModel, MoreWorkIsNeverFaster) {
  HardwareProfile fitted = round_profile();
  fitted.gemm_m_half = 48;
  fitted.kernel_launch_s = 4e-6;
  fitted.decode_attention_per_seq_s = 2e-7;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> len(1, 3000);
  for (const char* model : {"opt-13b", "llama-3-8b"}) {
    for (const HardwareProfile& gpu : {round_profile(), fitted, resolve_gpu("h100-sxm")}) {
      const CostModel cm(resolve_model(model), gpu);
      BatchShape shape;
      double previous_s = 0;
      for (int step = 0; step < 60; ++step) {
        switch (step % 3) {
          case 0:
            shape.add_prefill(len(rng), len(rng));
            break;
          case 1:
            shape.add_decode(len(rng));
            break;
          default:
            ++shape.num_sampled;
            break;
        }
        const double t = cm.iteration(shape).total_s;
        EXPECT_GE(t, previous_s) << model << " " << gpu.name << " step " << step;
        previous_s = t;
      }
      // A longer chunk, or a longer prior context, costs at least as much.
      for (int64_t c = 1; c < 4096; c *= 2) {
        BatchShape a, b, ctx;
        a.add_prefill(c, 100);
        b.add_prefill(c + 1, 100);
        ctx.add_prefill(c, 101);
        EXPECT_LE(cm.iteration(a).total_s, cm.iteration(b).total_s) << c;
        EXPECT_LE(cm.iteration(a).total_s, cm.iteration(ctx).total_s) << c;
      }
    }
  }
}

}  // namespace
}  // namespace batchsim
