// transfer_profile: a fitted profile on another GPU's datasheet ceilings. The ceilings are the
// target's, the efficiencies the fit's, every absolute quantity moves by the ratio of the ceiling
// it depends on (checked field by field and through CostModel on H100 -> H200), the provenance
// says so, bad targets are refused, and held out (A100 -> A40 and back on Vidur's measurements)
// the transferred GEMMs beat the target's datasheet profile; the figures of hwmodel/README.md.
#include "hwmodel/fit/transfer_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "hwmodel/cost_model.h"
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/predict.h"
#include "hwmodel/fit/validation.h"
#include "hwmodel/roofline.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::user_error_of;

const HardwareProfile& h100_fitted() {
  static const HardwareProfile p = resolve_gpu("h100-sxm-fitted");
  return p;
}
const HardwareProfile& h200_from_h100() {
  static const HardwareProfile p = transfer_profile(h100_fitted(), resolve_gpu("h200"));
  return p;
}

TEST(TransferProfile, CeilingsAreTheTargetsAndEfficienciesTheFits) {
  const HardwareProfile& from = h100_fitted();
  const HardwareProfile h200 = resolve_gpu("h200");
  const HardwareProfile& p = h200_from_h100();
  EXPECT_EQ(p.name, "h200-from-h100-sxm-fitted");
  // The H100's validation is the H100's: the transfer names its source instead.
  EXPECT_FALSE(from.validation.empty());
  EXPECT_TRUE(p.validation.empty());
  EXPECT_EQ(p.transferred_from, "h100-sxm-fitted");
  EXPECT_DOUBLE_EQ(p.peak_flops, h200.peak_flops);
  EXPECT_DOUBLE_EQ(p.peak_fp8_flops, h200.peak_fp8_flops);
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_s, h200.hbm_bytes_per_s);
  EXPECT_EQ(p.memory_bytes, h200.memory_bytes);
  EXPECT_DOUBLE_EQ(p.pcie_bytes_per_s, h200.pcie_bytes_per_s);
  EXPECT_DOUBLE_EQ(p.sm_count, h200.sm_count);
  // Dimensionless: as fitted, not the target's datasheet defaults.
  EXPECT_DOUBLE_EQ(p.gemm_eta_max, from.gemm_eta_max);
  EXPECT_NE(p.gemm_eta_max, h200.gemm_eta_max);
  EXPECT_DOUBLE_EQ(p.gemm_m_half, from.gemm_m_half);
  EXPECT_DOUBLE_EQ(p.gemm_roofline_exponent, from.gemm_roofline_exponent);
  EXPECT_DOUBLE_EQ(p.hbm_efficiency, from.hbm_efficiency);
  EXPECT_DOUBLE_EQ(p.prefill_attention_efficiency, from.prefill_attention_efficiency);
  EXPECT_DOUBLE_EQ(p.prefill_attention_causal_efficiency, from.prefill_attention_causal_efficiency);
  EXPECT_DOUBLE_EQ(p.decode_attention_efficiency, from.decode_attention_efficiency);
  EXPECT_DOUBLE_EQ(p.decode_attention_roofline_exponent, from.decode_attention_roofline_exponent);
  EXPECT_DOUBLE_EQ(p.prefill_attention_roofline_exponent, from.prefill_attention_roofline_exponent);
  for (int i = 0; i < kNumElementwiseOps; ++i) {
    EXPECT_DOUBLE_EQ(p.elementwise[i].efficiency, from.elementwise[i].efficiency);
    EXPECT_DOUBLE_EQ(p.elementwise[i].launch_s, from.elementwise[i].launch_s);
  }
  // Latency: kept.
  EXPECT_DOUBLE_EQ(p.kernel_launch_s, from.kernel_launch_s);
  EXPECT_DOUBLE_EQ(p.attention_launch_s, from.attention_launch_s);
  EXPECT_DOUBLE_EQ(p.prefill_attention_per_seq_s, from.prefill_attention_per_seq_s);
  EXPECT_DOUBLE_EQ(p.prefill_attention_per_tile_s, from.prefill_attention_per_tile_s);
  EXPECT_DOUBLE_EQ(p.attention_kv_write_per_token_s, from.attention_kv_write_per_token_s);
  // The kernel's tiling and the KV-cache write's share of HBM: as fitted.
  EXPECT_EQ(p.prefill_attention_kernel, PrefillAttentionKernel::flash_attention_3);
  EXPECT_DOUBLE_EQ(p.attention_kv_write_efficiency, from.attention_kv_write_efficiency);
  // Equal FLOP/s: per-unit compute times unchanged. Equal SMs, 4.8 / 3.35 TB/s: per-SM rates
  // x 1.433 (the H100 fit's prefill has none: FlashAttention-3's tiles). Equal NVLink:
  // all-reduce fits unchanged.
  EXPECT_DOUBLE_EQ(p.prefill_attention_per_head_token_s, from.prefill_attention_per_head_token_s);
  EXPECT_DOUBLE_EQ(p.decode_attention_per_seq_kv_head_s, from.decode_attention_per_seq_kv_head_s);
  EXPECT_NEAR(p.decode_attention_sm_bytes_per_s / from.decode_attention_sm_bytes_per_s, 4.8 / 3.35, 1e-12);
  EXPECT_EQ(from.prefill_attention_sm_bytes_per_s, 0);
  EXPECT_EQ(p.prefill_attention_sm_bytes_per_s, 0);
  ASSERT_EQ(p.allreduce.size(), from.allreduce.size());
  ASSERT_EQ(p.custom_allreduce.size(), from.custom_allreduce.size());
  for (size_t i = 0; i < p.allreduce.size(); ++i) {
    EXPECT_DOUBLE_EQ(p.allreduce[i].latency_s, from.allreduce[i].latency_s);
    EXPECT_DOUBLE_EQ(p.allreduce[i].bytes_per_s, from.allreduce[i].bytes_per_s);
  }
  ASSERT_NE(p.gemm_table(WeightFormat::bf16), nullptr);
  ASSERT_NE(p.gemm_table(WeightFormat::fp8), nullptr);
}

// A100 -> A40 changes every ceiling, so each absolute field shows its own ratio.
TEST(TransferProfile, EachAbsoluteFieldMovesByItsCeilingsRatio) {
  const HardwareProfile from = resolve_gpu("a100-80gb-fitted");
  const HardwareProfile a40 = resolve_gpu("a40");
  const HardwareProfile p = transfer_profile(from, a40);
  const double flops = 312.0 / 149.7;                   // time per unit of SM work
  const double per_sm = (696.0 / 84) / (2039.0 / 108);  // HBM bytes/s per SM
  const double link = 112.5 / 300.0;                    // datasheet NVLink, a40 / a100-80gb
  EXPECT_NEAR(p.prefill_attention_per_head_token_s, from.prefill_attention_per_head_token_s * flops,
              1e-12 * from.prefill_attention_per_head_token_s);
  EXPECT_NEAR(p.decode_attention_per_seq_kv_head_s, from.decode_attention_per_seq_kv_head_s * flops,
              1e-12 * from.decode_attention_per_seq_kv_head_s);
  EXPECT_NEAR(p.decode_attention_sm_bytes_per_s, from.decode_attention_sm_bytes_per_s * per_sm,
              1e-9 * from.decode_attention_sm_bytes_per_s);
  EXPECT_NEAR(p.prefill_attention_sm_bytes_per_s, from.prefill_attention_sm_bytes_per_s * per_sm,
              1e-9 * from.prefill_attention_sm_bytes_per_s);
  // The fit's pooled all-reduce (154 GB/s of the A100's 300) moves with the link; latencies stay.
  EXPECT_NEAR(p.interconnect_bytes_per_s, from.interconnect_bytes_per_s * link, 1e-3);
  EXPECT_DOUBLE_EQ(p.interconnect_latency_s, from.interconnect_latency_s);
  ASSERT_EQ(p.allreduce.size(), 3u);
  for (size_t i = 0; i < p.allreduce.size(); ++i) {
    EXPECT_EQ(p.allreduce[i].tp, from.allreduce[i].tp);
    EXPECT_DOUBLE_EQ(p.allreduce[i].latency_s, from.allreduce[i].latency_s);
    EXPECT_NEAR(p.allreduce[i].bytes_per_s, from.allreduce[i].bytes_per_s * link, 1e-3);
  }
  EXPECT_DOUBLE_EQ(p.kernel_launch_s, from.kernel_launch_s);
  EXPECT_DOUBLE_EQ(p.attention_launch_s, from.attention_launch_s);
  // What the simulator sees: an A40 all-reduce of 1 MB at TP 2 costs the A100 latency plus the
  // wire bytes at 0.375 of the fitted A100 bandwidth.
  const double wire = ring_allreduce_wire_bytes(1e6, 2);
  EXPECT_NEAR(allreduce_time_s(p, 1e6, 2), from.allreduce[0].latency_s + wire / (from.allreduce[0].bytes_per_s * link),
              1e-15);
}

// Through the cost model: on H200 (H100 compute, 4.8 / 3.35 the bandwidth) a compute-bound
// prefill's GEMMs take what they took on H100, and a memory-bound decode's GEMMs and attention
// shrink by about the bandwidth ratio.
TEST(TransferProfile, H200KeepsComputeBoundGemmsAndShortensMemoryBoundDecode) {
  const ModelSpec model = resolve_model("llama-3-8b");
  const CostModel h100(model, h100_fitted());
  const CostModel h200(model, h200_from_h100());
  BatchShape prefill;
  prefill.add_prefill(8192, 0);
  prefill.num_sampled = 1;
  const IterationCost p100 = h100.iteration(prefill), p200 = h200.iteration(prefill);
  ASSERT_TRUE(p100.gemm_compute_bound);
  EXPECT_NEAR(p200.gemm_s / p100.gemm_s, 1.0, 0.005);
  // FLOP-bound too, but its per-SM K/V term (combined at p = 0.67) moves with the bandwidth.
  EXPECT_LT(p200.prefill_attention_s / p100.prefill_attention_s, 1.0);
  EXPECT_GT(p200.prefill_attention_s / p100.prefill_attention_s, 0.93);

  BatchShape decode;
  for (int i = 0; i < 64; ++i) decode.add_decode(4096);
  decode.num_sampled = 64;
  const IterationCost d100 = h100.iteration(decode), d200 = h200.iteration(decode);
  ASSERT_FALSE(d100.gemm_compute_bound);
  const double hbm_ratio = 3.35 / 4.8;  // 0.698
  // Weight and KV streaming at batch 64 is nearly all memory time; the launch floors (kept) and
  // the GEMMs' compute part keep it a little above the pure ratio.
  EXPECT_GT(d200.gemm_s / d100.gemm_s, hbm_ratio - 0.005);
  EXPECT_LT(d200.gemm_s / d100.gemm_s, hbm_ratio + 0.05);
  EXPECT_GT(d200.decode_attention_s / d100.decode_attention_s, hbm_ratio - 0.005);
  EXPECT_LT(d200.decode_attention_s / d100.decode_attention_s, hbm_ratio + 0.03);
  EXPECT_LT(d200.total_s, d100.total_s * 0.8);
  // The rescaled table itself: a compute-bound point kept, a weight-streaming one x ~0.70.
  const GemmTable& t100 = *h100_fitted().gemm_table(WeightFormat::bf16);
  const GemmTable& t200 = *h200_from_h100().gemm_table(WeightFormat::bf16);
  EXPECT_NEAR(*t200.seconds(8192, 4096, 4096) / *t100.seconds(8192, 4096, 4096), 1.0, 0.005);
  EXPECT_NEAR(*t200.seconds(1, 16384, 4096) / *t100.seconds(1, 16384, 4096), hbm_ratio, 0.03);
  EXPECT_THAT(t200.source(), HasSubstr("rescaled from h100-sxm-fitted to h200 ceilings"));
}

TEST(TransferProfile, ProvenanceKeepsTheFitsAndListsEveryRescaling) {
  const HardwareProfile& p = h200_from_h100();
  EXPECT_EQ(p.source, "transferred from h100-sxm-fitted to h200 ceilings");
  EXPECT_THAT(p.provenance, StartsWith(h100_fitted().provenance));
  for (const char* line :
       {"transferred by hwmodel/fit/transfer_profile.cpp from 'h100-sxm-fitted' (fitted on vllm kernel tables",
        "x 1 (peak FLOP/s 989 -> 989 TFLOP/s): prefill_attention_per_head_token_s",
        "x 1.433 (HBM bandwidth per SM 25.38 -> 36.36 GB/s): decode_attention_sm_bytes_per_s",
        "x 1 (datasheet link 450 -> 450 GB/s per direction, h100-sxm -> h200)",
        "kept (latency, not throughput): kernel_launch_s", "GEMM table bf16: each of its 35742 times",
        "GEMM table fp8: each of its 35742 times", "caveat:"}) {
    EXPECT_THAT(p.provenance, HasSubstr(line));
  }
  // Saved and read back: the same profile, tables included (rescaled, not the H100's).
  const auto dir = testing::scratch_dir("transfer-save");
  save_hardware_profile(p, dir / "h200.yaml");
  const HardwareProfile back = load_hardware_profile(dir / "h200.yaml");
  testing::expect_profiles_near(back, p, 1e-12);
  // (Table files keep 5 significant digits.)
  EXPECT_NEAR(*back.gemm_table(WeightFormat::bf16)->seconds(1, 16384, 4096) /
                  *p.gemm_table(WeightFormat::bf16)->seconds(1, 16384, 4096),
              1, 1e-4);
  EXPECT_NE(*back.gemm_table(WeightFormat::bf16)->seconds(1, 16384, 4096),
            *h100_fitted().gemm_table(WeightFormat::bf16)->seconds(1, 16384, 4096));
}

// Onto other SMs (H100 -> A100) the GEMM tables time other kernel choices: dropped, and the
// provenance says so; a profile whose ceilings match no datasheet GPU has all-reduce fits of an
// unknown link: dropped for the target's datasheet link.
TEST(TransferProfile, WhatCannotBeTransferredIsDroppedAndNamed) {
  const HardwareProfile a100 = transfer_profile(h100_fitted(), resolve_gpu("a100-80gb"));
  EXPECT_EQ(a100.gemm_table(WeightFormat::bf16), nullptr);
  EXPECT_EQ(a100.gemm_table(WeightFormat::fp8), nullptr);
  EXPECT_THAT(a100.provenance, HasSubstr("not transferred: the bf16 GEMM table (h100-sxm-fitted has 132 SMs at 989 "
                                         "TFLOP/s, a100-80gb 108 at 312"));
  EXPECT_THAT(a100.provenance, HasSubstr("not transferred: the fp8 GEMM table"));
  // GEMMs then take the fitted roofline on the A100's ceilings.
  EXPECT_DOUBLE_EQ(gemm_time_s(a100, GemmShape{4096, 4096}, 512, WeightFormat::bf16),
                   gemm_roofline_time_s(a100, GemmShape{4096, 4096}, 512, WeightFormat::bf16));

  HardwareProfile custom = resolve_gpu("a100-80gb-fitted");
  custom.hbm_bytes_per_s = 1.9e12;  // a user's own measured ceiling
  const HardwareProfile a40 = resolve_gpu("a40");
  const HardwareProfile p = transfer_profile(custom, a40);
  EXPECT_TRUE(p.allreduce.empty());
  EXPECT_DOUBLE_EQ(p.interconnect_bytes_per_s, a40.interconnect_bytes_per_s);
  EXPECT_DOUBLE_EQ(p.interconnect_latency_s, a40.interconnect_latency_s);
  EXPECT_THAT(p.provenance, HasSubstr("not transferred: the all-reduce fits"));
  // Per-SM rates need SM counts on both sides.
  HardwareProfile no_sms = a40;
  no_sms.sm_count = 0;
  const HardwareProfile q = transfer_profile(resolve_gpu("a100-80gb-fitted"), no_sms);
  EXPECT_EQ(q.decode_attention_sm_bytes_per_s, 0.0);
  EXPECT_THAT(q.provenance, HasSubstr("not transferred: the per-SM K/V rates"));
}

TEST(TransferProfile, RefusesWhatIsNotATransfer) {
  EXPECT_THAT(user_error_of([] { transfer_profile(h100_fitted(), resolve_gpu("a100-80gb-fitted")); }),
              HasSubstr("the target must be a datasheet GPU (source 'datasheet'), and 'a100-80gb-fitted' is "
                        "'fitted on llama-2-7b"));
  EXPECT_THAT(user_error_of([] { transfer_profile(h200_from_h100(), resolve_gpu("h100-sxm-fitted")); }),
              HasSubstr("the target must be a datasheet GPU"));
  EXPECT_THAT(user_error_of([] { transfer_profile(h100_fitted(), resolve_gpu("h100-sxm")); }),
              HasSubstr("cannot transfer 'h100-sxm-fitted' onto 'h100-sxm': it already has the ceilings of "
                        "'h100-sxm' (the same GPU)"));
  EXPECT_THAT(user_error_of([] { transfer_profile(resolve_gpu("h100-sxm"), resolve_gpu("h200")); }),
              HasSubstr("cannot transfer 'h100-sxm': it is a datasheet profile, with no fitted efficiencies"));
}

// A transferred profile transferred again carries the same numbers as one transfer: every
// ratio composes (A100 -> A40 -> H100 equals A100 -> H100), the link's too, since the second
// transfer finds the A40's datasheet link under the first one's ceilings.
TEST(TransferProfile, TransfersCompose) {
  const HardwareProfile a100 = resolve_gpu("a100-80gb-fitted");
  const HardwareProfile h100 = resolve_gpu("h100-sxm");
  const HardwareProfile direct = transfer_profile(a100, h100);
  const HardwareProfile twice = transfer_profile(transfer_profile(a100, resolve_gpu("a40")), h100);
  testing::expect_profiles_near(twice, direct, 1e-9, false);
}

// ---- held out: A100 <-> A40 on Vidur's measurements (hwmodel/README.md has the figures) ----

std::filesystem::path vidur_dir() { return testing::measured_dir() / "vidur"; }

// A GEMM table of every measured GEMM of a Vidur device (all models, TP degrees and token
// counts): what a kernel-table profile carries, for GPUs Vidur measured. The other GPU's rows
// are of the same shapes, so each is looked up in a measured column.
GemmTable vidur_gemm_table(const Measurements& m) {
  std::vector<GemmPoint> points;
  for (const TokenOpRow& row : m.token_ops) {
    const auto shapes = layer_gemm_shapes(row.shape.as_model_spec(), row.tp);
    for (TokenOp op : {TokenOp::attn_pre_proj, TokenOp::attn_post_proj, TokenOp::mlp_up_proj, TokenOp::mlp_down_proj}) {
      const double t = row.median_s[static_cast<int>(op)];
      if (!(t > 0)) continue;
      const GemmShape s = shapes[static_cast<int>(token_op_gemm(op))];
      points.push_back({row.num_tokens, s.n, s.k, t});
    }
  }
  return GemmTable::from_points("bf16", "vidur " + m.device, points);
}

struct GemmScores {
  double mape = 0;  // over the four GEMM operators' rows
  double iteration = 0;
};
// A profile scored on every row of `m`, as `batchsim validate --gpu` does.
GemmScores score(const Measurements& m, const HardwareProfile& p) {
  const ValidationReport r = validate_cost_model(m, "", p, resolve_engine("vllm").cpu);
  double sum = 0;
  int64_t count = 0;
  for (const char* op : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) {
    sum += r.held_out.at(op).mape_percent * static_cast<double>(r.held_out.at(op).count);
    count += r.held_out.at(op).count;
  }
  return {sum / static_cast<double>(count), r.iteration_held_out.mape_percent};
}

// Fitted on one GPU of Vidur's (Llama-2-7B rows, plus a GEMM table of every measured GEMM),
// transferred to the other's datasheet, scored on every row of the other: the GEMMs of the
// transfer (which drops the table across SMs: the fitted roofline on the target's ceilings)
// against the table rescaled by the roofline ratio (what the transfer does onto the same SMs),
// the target's datasheet profile and its own fit (held out there: the other five models).
TEST(TransferProfile, HeldOutA100AndA40) {
  const Measurements a100 = read_measurements(vidur_dir(), "a100");
  const Measurements a40 = read_measurements(vidur_dir(), "a40");
  struct Direction {
    const Measurements& from;
    const Measurements& to;
    const char* from_base;
    const char* to_base;
  };
  size_t direction = 0;
  for (const Direction& d : {Direction{a100, a40, "a100-80gb", "a40"}, Direction{a40, a100, "a40", "a100-80gb"}}) {
    HardwareProfile fitted = fit_profile(d.from, "llama-2-7b", resolve_gpu(d.from_base)).profile;
    fitted.gemm_table_source(WeightFormat::bf16) =
        std::make_shared<GemmTableSource>("vidur.txt", vidur_gemm_table(d.from));
    const HardwareProfile target = resolve_gpu(d.to_base);
    const HardwareProfile moved = transfer_profile(fitted, target);
    ASSERT_EQ(moved.gemm_table(WeightFormat::bf16), nullptr);
    EXPECT_THAT(moved.provenance, HasSubstr("not transferred: the bf16 GEMM table"));
    HardwareProfile rescaled = moved;
    HardwareProfile named_target = moved;
    named_target.name = target.name;
    rescaled.gemm_table_source(WeightFormat::bf16) = std::make_shared<GemmTableSource>(
        "rescaled.txt", rescale_gemm_table(fitted.gemm_table(WeightFormat::bf16)[0], fitted, named_target).table);
    const FitResult own = fit_profile(d.to, "llama-2-7b", target);
    const ValidationReport own_report =
        validate_cost_model(d.to, "llama-2-7b", own.profile, own.cpu.value_or(CpuOverhead{}));
    double own_gemm = 0;
    int64_t own_count = 0;
    for (const char* op : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) {
      own_gemm += own_report.held_out.at(op).mape_percent * static_cast<double>(own_report.held_out.at(op).count);
      own_count += own_report.held_out.at(op).count;
    }
    own_gemm /= static_cast<double>(own_count);
    const GemmScores transfer = score(d.to, moved), table = score(d.to, rescaled), datasheet = score(d.to, target);
    std::printf(
        "%s -> %s GEMM MAPE: transferred (roofline) %.1f%%, rescaled table %.1f%%, datasheet %.1f%%, "
        "own fit (held-out models) %.1f%%; iteration: %.1f%% / %.1f%% / %.1f%% / %.1f%%\n",
        d.from.device.c_str(), d.to.device.c_str(), transfer.mape, table.mape, datasheet.mape, own_gemm,
        transfer.iteration, table.iteration, datasheet.iteration, own_report.iteration_held_out.mape_percent);
    // Across SMs the transferred roofline beats the rescaled table and the datasheet; a fit on the
    // GPU itself is better still.
    EXPECT_LT(transfer.mape, table.mape - 1.0) << d.from.device;
    EXPECT_LT(transfer.mape, datasheet.mape - 1.0) << d.from.device;
    EXPECT_LT(transfer.mape, 10.0) << d.from.device;
    EXPECT_LT(own_gemm, transfer.mape) << d.from.device;
    // The figures a run on a transferred profile states (kMeasuredTransfers, its trust line) are
    // these, to their 0.1.
    const MeasuredTransfer& stated = kMeasuredTransfers[direction++];
    EXPECT_NEAR(transfer.mape, stated.gemm_mape_percent, 0.05) << stated.direction;
    EXPECT_NEAR(transfer.iteration, stated.iteration_mape_percent, 0.05) << stated.direction;
  }
  EXPECT_EQ(direction, std::size(kMeasuredTransfers));
}

}  // namespace
}  // namespace batchsim
