// The profile fit: it recovers known parameters from synthetic measurements, its parameters
// on the shared A100/A40 data are plausible, its accuracy on models it was not fitted on stays
// within bounds, the shipped profiles are what it produces, and the cost model uses exactly the
// validated predictions.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

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
using testing::user_error_of;

std::filesystem::path vidur_dir() { return testing::measured_dir() / "vidur"; }

// A profile with parameters unlike the datasheet defaults, to generate measurements from.
HardwareProfile truth_profile() {
  HardwareProfile p = resolve_gpu("a100-80gb");
  p.kernel_launch_s = 4e-6;
  p.gemm_eta_max = 0.72;
  p.gemm_m_half = 50;
  p.gemm_roofline_exponent = 1.8;
  p.hbm_efficiency = 0.85;
  p.attention_launch_s = 8e-6;
  p.prefill_attention_per_head_token_s = 3e-9;
  p.prefill_attention_efficiency = 0.4;
  p.prefill_attention_causal_efficiency = 0.25;
  p.decode_attention_per_seq_kv_head_s = 4e-8;
  p.decode_attention_efficiency = 0.9;
  p.decode_attention_roofline_exponent = 1.4;
  // x 108 SMs above 0.9 of the HBM rate, so that both roofs bind somewhere on the grid.
  p.decode_attention_sm_bytes_per_s = 2.0e10;
  p.prefill_attention_sm_bytes_per_s = 2.5e10;
  p.prefill_attention_roofline_exponent = 2.5;
  for (int i = 0; i < kNumElementwiseOps; ++i) p.elementwise[i] = {0.3 + 0.1 * i, 1e-6 * (i + 2)};
  p.allreduce = {{2, 1e-5, 1.6e11}, {4, 2e-5, 1.5e11}};
  return p;
}

// The engine CPU cost the synthetic CPU-overhead rows are generated with.
const CpuOverhead kTruthCpu{8e-4, 4e-5, 1e-3};

// Noise-free measurements of Llama-2-7B under `truth`, on Vidur's grid shapes.
Measurements synthetic_measurements(const HardwareProfile& truth) {
  Measurements m;
  m.root = "synthetic";
  const ModelSpec spec = resolve_model("llama-2-7b");
  for (int tp : {1, 2, 4}) {
    for (int64_t tokens = 1; tokens <= 8192; tokens = tokens < 8 ? tokens * 2 : tokens + tokens / 4) {
      TokenOpRow row;
      row.model = "meta-llama/Llama-2-7b-hf";
      row.shape = {spec.num_heads, spec.num_kv_heads, spec.hidden_size, spec.ffn_size, spec.vocab_size, spec.gated_mlp};
      row.num_tokens = tokens;
      row.tp = tp;
      for (int op = 0; op < kNumTokenOps; ++op) {
        row.median_s[op] = predict_token_op(truth, row, static_cast<TokenOp>(op));
      }
      m.token_ops.push_back(row);
    }
  }
  auto attention_row = [&](bool prefill, int64_t batch, int64_t chunk, int64_t context) {
    AttentionRow r;
    r.source = "meta-llama/Llama-2-7b-hf";
    r.hidden_size = spec.hidden_size;
    r.num_heads = spec.num_heads;
    r.num_kv_heads = spec.num_kv_heads;
    r.is_prefill = prefill;
    r.batch_size = batch;
    r.prefill_chunk_size = chunk;
    r.kv_cache_size = context;
    r.median_s = predict_attention(truth, r);
    m.attention.push_back(r);
  };
  for (int64_t chunk : {16, 64, 256, 1024, 4096}) {
    for (int64_t context : {0, 128, 1024, 3000}) attention_row(true, 1, chunk, context);
  }
  for (int64_t batch : {1, 2, 4, 8, 16, 32, 64, 128}) {
    for (int64_t context : {16, 32, 128, 512, 2048, 4096}) attention_row(false, batch, 0, context);
  }
  for (int workers : {2, 4}) {
    for (double size = 2048; size <= 64e6; size *= 2) {
      AllReduceRow r{workers, size, 0};
      r.median_s = predict_all_reduce(truth, r);
      m.all_reduce.push_back(r);
    }
  }
  for (int tp : {1, 2, 4}) {
    for (int64_t batch = 8; batch <= 128; batch += 8) {
      CpuOverheadRow r;
      r.model = "meta-llama/Llama-2-7b-hf";
      r.batch_size = batch;
      r.tp = tp;
      r.schedule_s = predict_cpu_overhead(kTruthCpu, r);  // the whole overhead in one part
      m.cpu_overheads.push_back(r);
    }
  }
  return m;
}

TEST(FitProfile, RecoversTheParametersThatGeneratedTheMeasurements) {
  const HardwareProfile truth = truth_profile();
  const Measurements m = synthetic_measurements(truth);
  const FitResult fit = fit_profile(m, "llama-2-7b", resolve_gpu("a100-80gb"));
  EXPECT_EQ(fit.fit_on, "llama-2-7b");
  EXPECT_EQ(fit.profile.name, "a100-80gb-fitted");
  EXPECT_THAT(fit.profile.source, HasSubstr("synthetic"));
  EXPECT_THAT(fit.profile.source, HasSubstr("ceilings of a100-80gb"));
  // The interconnect fallback is fitted over both degrees: not one of the truth's values.
  HardwareProfile expected = truth;
  expected.interconnect_latency_s = fit.profile.interconnect_latency_s;
  expected.interconnect_bytes_per_s = fit.profile.interconnect_bytes_per_s;
  testing::expect_profiles_near(fit.profile, expected, 2e-3, /*compare_text=*/false);
  // The CPU rows are the engine's: recovered into FitResult::cpu, not into the profile.
  ASSERT_TRUE(fit.cpu.has_value());
  EXPECT_NEAR(fit.cpu->per_iteration_s, kTruthCpu.per_iteration_s, 2e-3 * kTruthCpu.per_iteration_s);
  EXPECT_NEAR(fit.cpu->per_sequence_s, kTruthCpu.per_sequence_s, 2e-3 * kTruthCpu.per_sequence_s);
  EXPECT_NEAR(fit.cpu->per_extra_worker_s, kTruthCpu.per_extra_worker_s, 2e-3 * kTruthCpu.per_extra_worker_s);
  // And therefore every measurement is reproduced.
  const ValidationReport report = validate_cost_model(m, "llama-2-7b", fit.profile, *fit.cpu);
  for (const auto& [name, stats] : report.fitted) EXPECT_LT(stats.max_ape_percent, 0.5) << name;
}

// GEMM times with no rise of efficiency with M (m_half 0) fit to exactly 0, not to whichever
// vanishing value the solver stops at; a real half-saturation point is recovered.
TEST(FitProfile, GemmHalfSaturationWithoutMDependenceIsZero) {
  for (const double m_half : {0.0, 40.0}) {
    HardwareProfile truth = truth_profile();
    truth.gemm_m_half = m_half;
    std::vector<GemmFitPoint> points;
    for (const GemmShape shape : {GemmShape{4096, 4096}, GemmShape{4096, 11008}, GemmShape{11008, 4096}}) {
      for (int64_t m = 1; m <= 8192; m *= 2) {
        points.push_back({shape, m, WeightFormat::bf16, gemm_roofline_time_s(truth, shape, m, WeightFormat::bf16)});
      }
    }
    HardwareProfile fitted = resolve_gpu("a100-80gb");
    fit_gemm_roofline(points, fitted);
    if (m_half == 0)
      EXPECT_EQ(fitted.gemm_m_half, 0.0);
    else
      EXPECT_NEAR(fitted.gemm_m_half, m_half, 1e-3 * m_half);
    EXPECT_NEAR(fitted.gemm_eta_max, truth.gemm_eta_max, 1e-3 * truth.gemm_eta_max) << m_half;
  }
}

// Fits on the shared A100 measurements are reused by several tests below.
const FitResult& a100_fit() {
  static const FitResult fit =
      fit_profile(read_measurements(vidur_dir(), "a100"), "llama-2-7b", resolve_gpu("a100-80gb"));
  return fit;
}

TEST(FitProfile, FittedParametersArePlausible) {
  const Measurements a40 = read_measurements(vidur_dir(), "a40");
  const HardwareProfile fallback = a100_fit().profile;
  for (const HardwareProfile& p :
       {a100_fit().profile, fit_profile(a40, "llama-2-7b", resolve_gpu("a40"), &fallback).profile}) {
    SCOPED_TRACE(p.name);
    for (double efficiency : {p.gemm_eta_max, p.hbm_efficiency, p.prefill_attention_efficiency,
                              p.prefill_attention_causal_efficiency, p.decode_attention_efficiency}) {
      EXPECT_GT(efficiency, 0);
      EXPECT_LE(efficiency, 1);
    }
    for (const StreamingKernel& k : p.elementwise) {
      EXPECT_GT(k.efficiency, 0);
      EXPECT_LE(k.efficiency, 1);
      EXPECT_GE(k.launch_s, 0);
      EXPECT_LT(k.launch_s, 20e-6);  // a kernel launch, not a stall
    }
    for (double s : {p.kernel_launch_s, p.attention_launch_s, p.prefill_attention_per_head_token_s,
                     p.decode_attention_per_seq_kv_head_s, p.interconnect_latency_s}) {
      EXPECT_GE(s, 0);
    }
    EXPECT_GT(p.gemm_roofline_exponent, 0);
    EXPECT_GE(p.gemm_m_half, 0);
    EXPECT_GT(p.decode_attention_roofline_exponent, 0);
    EXPECT_GT(p.prefill_attention_roofline_exponent, 0);
    // All SMs together cannot stream decode K/V faster than the HBM datasheet rate; prefill
    // blocks also hit L2 (query tiles of one head share K/V), so only an order of magnitude.
    EXPECT_GT(p.decode_attention_sm_bytes_per_s, 0);
    EXPECT_LE(p.decode_attention_sm_bytes_per_s * p.sm_count, p.hbm_bytes_per_s);
    EXPECT_GT(p.prefill_attention_sm_bytes_per_s, 0);
    EXPECT_LT(p.prefill_attention_sm_bytes_per_s * p.sm_count, 5 * p.hbm_bytes_per_s);
    // GEMMs saturate at 60-85% of the tensor-core peak (README: 206-221 TFLOP/s of 312 on A100).
    EXPECT_GT(p.gemm_eta_max, 0.6);
    EXPECT_LT(p.gemm_eta_max, 0.85);
  }
  // NVLink all-reduce bus bandwidth on a DGX A100 is 100-300 GB/s (NCCL tests report ~230).
  for (const AllReduceFit& f : a100_fit().profile.allreduce) {
    EXPECT_GT(f.bytes_per_s, 100e9) << f.tp;
    EXPECT_LT(f.bytes_per_s, 300e9) << f.tp;
  }
}

// The accuracy bound of issue 4: fitted on Llama-2-7B only, the model must stay this close to
// the A100 measurements of the seven other models. Measured when written (hwmodel/README.md):
// GEMMs 5.4-7.4%, iteration 4.0%, prefill 14.1%, decode 14.7% (23.8% and 16.2% before the
// per-SM K/V terms), CPU 19.5%. A regression of a few points in any of them fails here.
TEST(FitProfile, HeldOutAccuracyOnA100) {
  const Measurements m = read_measurements(vidur_dir(), "a100");
  const ValidationReport r = validate_cost_model(m, "llama-2-7b", a100_fit().profile, *a100_fit().cpu);
  for (const char* gemm : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) {
    ASSERT_TRUE(r.held_out.count(gemm)) << gemm;
    EXPECT_LT(r.held_out.at(gemm).mape_percent, 9.0) << gemm;
    EXPECT_GT(r.held_out.at(gemm).count, 1000) << gemm;
  }
  EXPECT_LT(r.iteration_held_out.mape_percent, 5.0);
  EXPECT_GT(r.iteration_held_out.count, 7000);
  EXPECT_LT(r.iteration_fitted.mape_percent, 6.0);
  EXPECT_LT(r.held_out.at("attn_prefill").mape_percent, 17.0);
  EXPECT_LT(r.held_out.at("attn_decode").mape_percent, 17.0);
  EXPECT_LT(r.fitted.at("attn_prefill").mape_percent, 6.5);
  EXPECT_LT(r.fitted.at("attn_decode").mape_percent, 6.5);
  EXPECT_LT(r.fitted.at("all_reduce").mape_percent, 15.0);
  // Leave-one-degree-out (2, 4, 8 GPUs each predicted from the other two): measured 13.4%.
  EXPECT_EQ(r.held_out.at("all_reduce").count, r.fitted.at("all_reduce").count);
  EXPECT_LT(r.held_out.at("all_reduce").mape_percent, 16.0);
  EXPECT_LT(r.held_out.at("cpu_overhead").mape_percent, 24.0);
  // Every token-level operator, norms and activations included, stays under 20% on average.
  for (int op = 0; op < kNumTokenOps; ++op) {
    const char* name = token_op_name(static_cast<TokenOp>(op));
    EXPECT_LT(r.held_out.at(name).mape_percent, 20.0) << name;
  }
  // The fit is worth having: the datasheet profile is at least twice as far off per iteration.
  const ValidationReport datasheet = validate_cost_model(m, "", resolve_gpu("a100-80gb"), resolve_engine("vllm").cpu);
  EXPECT_GT(datasheet.iteration_held_out.mape_percent, 2 * r.iteration_held_out.mape_percent);
}

// The held-out attention file (64 query / 8 KV heads at TP 2) against the Llama-2-7B fit (32/32
// heads), split where FlashAttention's decode kernel changes: below 0.8 x 108 (sequence, KV
// head) blocks it splits the KV sequence, and that file does so from its cache capacity rather
// than the context (its batch 21 -> 22 at 32 tokens goes 17 -> 9 us), which Llama-2-7B's rows
// do not show; at 88 blocks and more the two files agree at equal blocks and context.
TEST(FitProfile, HeldOutAttentionByKernelRegime) {
  const Measurements m = read_measurements(vidur_dir(), "a100");
  ErrorStats decode_unsplit, decode_split, prefill;
  for (const AttentionRow& row : m.attention) {
    if (row.source != "attention-70b-shape-tp2") continue;
    const double predicted_s = predict_attention(a100_fit().profile, row);
    const std::string what = std::to_string(row.batch_size) + "/" + std::to_string(row.kv_cache_size);
    if (row.is_prefill) {
      prefill.add(predicted_s, row.median_s, what);
    } else {
      const int64_t blocks = row.batch_size * kv_heads_per_gpu(row.as_model_spec(), row.tp);
      (blocks >= 88 ? decode_unsplit : decode_split).add(predicted_s, row.median_s, what);
    }
  }
  std::printf(
      "held-out 70b-shape: decode >= 88 blocks %.1f%% (max %.1f%%, %ld rows), "
      "< 88 blocks %.1f%% (max %.1f%%, %ld rows), prefill %.1f%% (max %.1f%%)\n",
      decode_unsplit.mape_percent, decode_unsplit.max_ape_percent, static_cast<long>(decode_unsplit.count),
      decode_split.mape_percent, decode_split.max_ape_percent, static_cast<long>(decode_split.count),
      prefill.mape_percent, prefill.max_ape_percent);
  EXPECT_GT(decode_unsplit.count, 8000);
  EXPECT_LT(decode_unsplit.mape_percent, 13.0);
  EXPECT_GT(decode_split.mape_percent, decode_unsplit.mape_percent);
  EXPECT_LT(prefill.mape_percent, 17.0);
}

TEST(FitProfile, HeldOutAccuracyOnA40) {
  const Measurements m = read_measurements(vidur_dir(), "a40");
  const FitResult fit = fit_profile(m, "llama-2-7b", resolve_gpu("a40"));
  const ValidationReport r = validate_cost_model(m, "llama-2-7b", fit.profile, fit.cpu.value_or(CpuOverhead{}));
  for (const char* gemm : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) {
    EXPECT_LT(r.held_out.at(gemm).mape_percent, 10.0) << gemm;
  }
  EXPECT_LT(r.iteration_held_out.mape_percent, 6.0);
  EXPECT_THAT(fit.notes, ::testing::Contains(HasSubstr("no prefill attention rows")));
}

// The profiles in hwmodel/profiles/ are what the fit produces from the shipped measurements today, so
// they cannot silently drift from the code or the data they claim to come from.
TEST(FitProfile, ShippedProfilesAreFreshFits) {
  const HardwareProfile shipped_a100 = resolve_gpu("a100-80gb-fitted");
  EXPECT_THAT(shipped_a100.source, HasSubstr("llama-2-7b"));
  EXPECT_EQ(shipped_a100.source.find('\n'), std::string::npos);  // one line for `list gpus`
  EXPECT_THAT(shipped_a100.provenance, HasSubstr("compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"));
  // The data a shipped profile names is in the repository, not beside it.
  for (const char* name : {"a100-80gb-fitted", "a40-fitted"}) {
    const HardwareProfile p = resolve_gpu(name);
    EXPECT_THAT(p.source, HasSubstr("hwmodel/measured/vidur")) << name;
    EXPECT_THAT(p.source + p.provenance, ::testing::Not(HasSubstr("shared"))) << name;
  }
  testing::expect_profiles_near(a100_fit().profile, shipped_a100, 1e-6, false);

  const HardwareProfile shipped_a40 = resolve_gpu("a40-fitted");
  const Measurements a40_rows = read_measurements(vidur_dir(), "a40");
  const FitResult a40 = fit_profile(a40_rows, "llama-2-7b", resolve_gpu("a40"), &shipped_a100);
  testing::expect_profiles_near(a40.profile, shipped_a40, 1e-6, false);
  EXPECT_THAT(shipped_a40.provenance, HasSubstr("taken from profile 'a100-80gb-fitted'"));

  // Their validation blocks are the held-out scores of those fits (what `validate
  // --profile-out` writes), naming the data as the regeneration commands do, from the
  // repository root (the test reads it by another path).
  auto expect_validation = [](const HardwareProfile& shipped, ProfileValidation fresh, const char* device) {
    SCOPED_TRACE(shipped.name);
    EXPECT_EQ(shipped.validation.measured_on,
              fmt::format("operator timings (Vidur schema) of {} in hwmodel/measured/vidur", device));
    EXPECT_THAT(fresh.measured_on, HasSubstr(fmt::format("of {} in ", device)));
    fresh.measured_on = shipped.validation.measured_on;
    EXPECT_EQ(shipped.validation, fresh);
    EXPECT_TRUE(shipped.validation.held_out);
    EXPECT_EQ(shipped.validation.operators.at(0).op, "iteration");
  };
  expect_validation(shipped_a100,
                    profile_validation(validate_cost_model(read_measurements(vidur_dir(), "a100"), "llama-2-7b",
                                                           a100_fit().profile, *a100_fit().cpu)),
                    "a100");
  expect_validation(shipped_a40, profile_validation(validate_cost_model(a40_rows, "llama-2-7b", a40.profile, *a40.cpu)),
                    "a40");
}

TEST(FitModelRows, AConfigFileMatchesRowsOfTheSameShape) {
  const Measurements m = read_measurements(vidur_dir(), "a40");
  const auto dir = testing::scratch_dir("fit_config");
  // A model shaped like Llama-2-7B under another name: its rows are found by shape.
  const auto config = testing::write_text_file(dir, "config.json", R"({"_name_or_path": "my/llama",
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096})");
  const FitModelRows rows(m, config.string());
  EXPECT_EQ(rows.name(), "llama");
  int matched = 0;
  for (const TokenOpRow& row : m.token_ops) {
    EXPECT_EQ(rows.token_row(row), row.model == "meta-llama/Llama-2-7b-hf") << row.model;
    matched += rows.token_row(row) ? 1 : 0;
  }
  EXPECT_EQ(matched, 1044);
  // No fit model: every row is held out.
  const FitModelRows none(m, "");
  for (const TokenOpRow& row : m.token_ops) EXPECT_FALSE(none.token_row(row));
}

TEST(FitProfile, DeviceFoldersMapToDatasheetGpus) {
  EXPECT_EQ(datasheet_gpu_for_device("a100"), "a100-80gb");
  EXPECT_EQ(datasheet_gpu_for_device("a40"), "a40");
  EXPECT_EQ(datasheet_gpu_for_device("h200"), "h200");
  EXPECT_EQ(datasheet_gpu_for_device("a100-80gb-fitted"), "");  // not a datasheet
  EXPECT_EQ(datasheet_gpu_for_device("tpu"), "");
}

TEST(FitProfile, UnknownFitModelListsTheMeasuredModels) {
  const Measurements m = read_measurements(vidur_dir(), "a40");
  EXPECT_THAT(user_error_of([&] { fit_profile(m, "llama-3-8b", resolve_gpu("a40")); }),
              ::testing::AllOf(HasSubstr("llama-3-8b"), HasSubstr("llama-2-70b"), HasSubstr("phi-2")));
}

// CostModel::iteration sums exactly the per-operator predictions that validation checks: for a
// prefill chunk of M tokens, GEMMs + elementwise kernels = layers x (per-layer operators) +
// embedding; over Vidur's token grid it is within 6% of the measured Llama-2-7B operators on
// average and 25% at worst (M of 350-800 tokens, where cuBLAS switches kernels).
TEST(FitProfile, CostModelUsesTheValidatedPredictions) {
  const HardwareProfile& gpu = a100_fit().profile;
  const ModelSpec spec = resolve_model("llama-2-7b");
  const CostModel cm(spec, gpu);
  const Measurements m = read_measurements(vidur_dir(), "a100");
  ErrorStats error;
  for (const TokenOpRow& row : m.token_ops) {
    if (row.model != "meta-llama/Llama-2-7b-hf" || row.tp != 1) continue;
    BatchShape shape;
    shape.add_prefill(row.num_tokens, 0);
    const IterationCost c = cm.iteration(shape);
    double predicted_s = 0, measured_s = 0;
    for (int op = 0; op < kNumTokenOps; ++op) {
      const double times = static_cast<TokenOp>(op) == TokenOp::emb ? 1 : spec.num_layers;
      predicted_s += times * predict_token_op(gpu, row, static_cast<TokenOp>(op));
      measured_s += times * row.median_s[op];
    }
    EXPECT_NEAR(c.gemm_s + c.elementwise_s, predicted_s, 1e-12 * predicted_s) << row.num_tokens;
    EXPECT_NEAR(c.gemm_s + c.elementwise_s, measured_s, 0.25 * measured_s) << row.num_tokens;
    error.add(c.gemm_s + c.elementwise_s, measured_s, std::to_string(row.num_tokens));
  }
  EXPECT_GT(error.count, 200);
  EXPECT_LT(error.mape_percent, 6.0);
}

TEST(Validation, JsonHasTheDocumentedKeys) {
  const Measurements m = read_measurements(vidur_dir(), "a100");
  const ValidationReport r = validate_cost_model(m, "llama-2-7b", a100_fit().profile, *a100_fit().cpu);
  const nlohmann::json j = validation_json(r);
  EXPECT_EQ(j["fit_on"], "llama-2-7b");
  for (const char* op :
       {"attn_pre_proj", "mlp_down_proj", "attn_prefill", "attn_decode", "cpu_overhead", "input_layernorm"}) {
    EXPECT_DOUBLE_EQ(j["operators"][op]["mape"].get<double>(), r.held_out.at(op).mape_percent) << op;
    EXPECT_DOUBLE_EQ(j["operators"][op]["max_ape"].get<double>(), r.held_out.at(op).max_ape_percent) << op;
  }
  EXPECT_DOUBLE_EQ(j["iteration"]["mape"].get<double>(), r.iteration_held_out.mape_percent);
  EXPECT_TRUE(j["operators_fitted"].contains("all_reduce"));
  EXPECT_TRUE(j["by_model"].contains("meta-llama/Llama-2-70b-hf tp=4"));
  EXPECT_THAT(j["profile_yaml"].get<std::string>(), HasSubstr("gemm_eta_max"));
  std::ostringstream table;
  print_validation_table(r, table);
  EXPECT_THAT(table.str(), HasSubstr("iteration (layers x ops)"));
  EXPECT_THAT(table.str(), HasSubstr("attn_decode"));
}

TEST(Validation, ErrorStatsAreMeanAndWorstAbsolutePercentages) {
  ErrorStats s;
  s.add(1.1, 1.0, "a");  // +10%
  s.add(0.7, 1.0, "b");  // -30%
  s.add(2.0, 2.0, "c");  // 0%
  EXPECT_NEAR(s.mape_percent, 40.0 / 3, 1e-12);
  EXPECT_NEAR(s.max_ape_percent, 30, 1e-12);
  EXPECT_THAT(s.worst_case, HasSubstr("b"));
  EXPECT_EQ(s.count, 3);
}

}  // namespace
}  // namespace batchsim
