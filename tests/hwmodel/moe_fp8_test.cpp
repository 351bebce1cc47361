// Mixture-of-experts models and FP8 weights / KV cache: parameter counts, the config reader,
// expert routing in the cost model, and what one-byte dtypes change.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/moe_kernel.h"
#include "hwmodel/roofline.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::round_profile;
using testing::user_error_of;
using testing::write_text_file;

constexpr int kUp = static_cast<int>(LayerGemm::mlp_up);
constexpr int kDown = static_cast<int>(LayerGemm::mlp_down);

// ---- model specs ----

TEST(MoeModelSpec, MixtralParameterCountsMatchThePaper) {
  const ModelSpec m = resolve_model("mixtral-8x7b");
  EXPECT_TRUE(m.is_moe());
  // "Mixtral has 46.7B total parameters but only uses 12.9B parameters per token" (Jiang et
  // al. 2024, section 2.1).
  EXPECT_NEAR(static_cast<double>(m.total_params()), 46.7e9, 0.02 * 46.7e9);
  EXPECT_NEAR(static_cast<double>(m.active_params()), 12.9e9, 0.02 * 12.9e9);
  // By hand, per layer: attention 4096 * (4096 + 2*1024) + 4096^2 = 41,943,040; router
  // 4096 * 8; one expert 3 * 4096 * 14336 = 176,160,768. Embedding + LM head 2 * 32000 * 4096.
  EXPECT_EQ(m.layer_gemm_params(), 41943040 + 32768 + 8 * int64_t{176160768});
  EXPECT_EQ(m.total_params(), 32 * (41943040 + 32768 + 8 * int64_t{176160768}) + 262144000);
  EXPECT_EQ(m.active_params(), 32 * (41943040 + 32768 + 2 * int64_t{176160768}) + 262144000);
  // The KV cache is the attention's alone: 2 * 32 layers * 8 KV heads * 128 * 2 bytes.
  EXPECT_EQ(m.kv_bytes_per_token(), 128 * 1024);
}

TEST(MoeModelSpec, OtherMoeBuiltinsMatchTheirPublishedSizes) {
  // Mixtral 8x22B: 141B total, 39B active (Mistral AI).
  const ModelSpec big = resolve_model("mixtral-8x22b");
  EXPECT_NEAR(static_cast<double>(big.total_params()), 141e9, 0.02 * 141e9);
  EXPECT_NEAR(static_cast<double>(big.active_params()), 39e9, 0.02 * 39e9);
  // Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B active (model card); the shared expert is active.
  const ModelSpec qwen = resolve_model("qwen1.5-moe");
  EXPECT_EQ(qwen.shared_expert_ffn_size, 5632);
  EXPECT_NEAR(static_cast<double>(qwen.total_params()), 14.3e9, 0.02 * 14.3e9);
  EXPECT_NEAR(static_cast<double>(qwen.active_params()), 2.7e9, 0.02 * 2.7e9);
  // Dense models: every parameter is active.
  const ModelSpec dense = resolve_model("llama-2-70b");
  EXPECT_FALSE(dense.is_moe());
  EXPECT_EQ(dense.active_params(), dense.total_params());
}

TEST(Fp8ModelSpec, Fp8WeightsHalveTheQuantisedWeightsOnly) {
  const ModelSpec bf16 = resolve_model("mixtral-8x7b");
  const ModelSpec fp8 = with_dtypes(bf16, WeightFormat::fp8, 0);
  EXPECT_EQ(fp8.name, bf16.name);
  EXPECT_EQ(fp8.kv_dtype_bytes, 2);  // 0 keeps the KV dtype
  EXPECT_EQ(bf16.weight_bytes(), 2 * bf16.total_params());
  // Embedding, LM head and the 32 routers (4096 x 8) stay 16-bit, as vLLM leaves them.
  const int64_t unquantised = 262144000 + 32 * 4096 * 8;
  EXPECT_EQ(fp8.weight_bytes(), (bf16.total_params() - unquantised) + 2 * unquantised);
  EXPECT_NEAR(static_cast<double>(fp8.weight_bytes()) / static_cast<double>(bf16.weight_bytes()), 0.5, 0.005);
  // FP8 weights do not touch the KV cache, and an FP8 KV cache does not touch the weights.
  EXPECT_EQ(fp8.kv_bytes_per_token(), bf16.kv_bytes_per_token());
  const ModelSpec kv8 = with_dtypes(bf16, std::nullopt, 1);
  EXPECT_EQ(kv8.weight_bytes(), bf16.weight_bytes());
  EXPECT_EQ(2 * kv8.kv_bytes_per_token(), bf16.kv_bytes_per_token());
}

TEST(Fp8ModelSpec, DtypeNamesParseAsVllmSpellsThem) {
  EXPECT_EQ(parse_dtype_bytes("fp8", "--kv-cache-dtype"), 1);
  EXPECT_EQ(parse_dtype_bytes("fp8_e5m2", "--kv-cache-dtype"), 1);
  EXPECT_EQ(parse_dtype_bytes("fp8_e4m3", "--kv-cache-dtype"), 1);
  EXPECT_EQ(parse_dtype_bytes("bf16", "--weight-dtype"), 2);
  EXPECT_EQ(parse_dtype_bytes("float16", "--weight-dtype"), 2);
  EXPECT_EQ(parse_dtype_bytes("auto", "--weight-dtype"), 0);
  EXPECT_THAT(user_error_of([] { parse_dtype_bytes("int4", "--weight-dtype"); }),
              AllOf(HasSubstr("--weight-dtype"), HasSubstr("int4"), HasSubstr("fp8")));
  // Weights take a format's name (or auto); the KV cache a byte count.
  EXPECT_EQ(parse_weight_dtype("auto", "--weight-dtype"), std::nullopt);
  EXPECT_EQ(parse_weight_dtype("fp8-block", "--weight-dtype"), WeightFormat::fp8_block);
  EXPECT_EQ(parse_weight_dtype("mxfp4", "--weight-dtype"), WeightFormat::mxfp4);
  EXPECT_THAT(user_error_of([] { parse_weight_dtype("int4", "--weight-dtype"); }),
              AllOf(HasSubstr("--weight-dtype"), HasSubstr("int4"), HasSubstr("auto"), HasSubstr("nvfp4")));
  EXPECT_THAT(user_error_of([] { with_dtypes(resolve_model("llama-2-7b"), WeightFormat::bf16, 3); }),
              AllOf(HasSubstr("KV cache"), HasSubstr("3")));
  // 0 keeps what the model has (an FP8 checkpoint stays FP8 under "auto").
  const ModelSpec fp8 = with_dtypes(resolve_model("llama-2-7b"), WeightFormat::fp8, 1);
  EXPECT_EQ(with_dtypes(fp8, std::nullopt, 0).weight_format, WeightFormat::fp8);
  EXPECT_EQ(with_dtypes(fp8, std::nullopt, 0).kv_dtype_bytes, 1);
}

// ---- config.json ----

// The keys of mistralai/Mixtral-8x7B-v0.1's config.json.
constexpr const char* kMixtralConfig = R"({
  "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000)";

std::string mixtral_config(const std::string& extra = "") { return std::string(kMixtralConfig) + extra + "}"; }

TEST(MoeHfConfig, ReadsMixtralExperts) {
  const auto dir = testing::scratch_dir("hf_mixtral");
  const ModelSpec m = load_hf_config(write_text_file(dir / "mixtral", "config.json", mixtral_config()));
  const ModelSpec builtin = resolve_model("mixtral-8x7b");
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.experts_per_token, 2);
  EXPECT_EQ(m.ffn_size, 14336);
  EXPECT_EQ(m.shared_expert_ffn_size, 0);
  EXPECT_TRUE(m.gated_mlp);
  EXPECT_EQ(m.weight_format, WeightFormat::bf16);
  EXPECT_EQ(m.total_params(), builtin.total_params());
  EXPECT_EQ(m.active_params(), builtin.active_params());
  EXPECT_EQ(m.kv_bytes_per_token(), builtin.kv_bytes_per_token());
}

TEST(MoeHfConfig, ReadsQwen2MoeExpertsAndSharedExpert) {
  const auto dir = testing::scratch_dir("hf_qwen_moe");
  // The keys of Qwen/Qwen1.5-MoE-A2.7B's config.json: intermediate_size is the size dense
  // layers would have; the experts use moe_intermediate_size.
  const auto path = write_text_file(dir, "config.json", R"({
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
    "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
    "vocab_size": 151936, "mlp_only_layers": [] })");
  const ModelSpec m = load_hf_config(path);
  const ModelSpec builtin = resolve_model("qwen1.5-moe");
  EXPECT_EQ(m.num_experts, 60);
  EXPECT_EQ(m.experts_per_token, 4);
  EXPECT_EQ(m.ffn_size, 1408);
  EXPECT_EQ(m.shared_expert_ffn_size, 5632);
  EXPECT_TRUE(m.gated_mlp);
  EXPECT_EQ(m.total_params(), builtin.total_params());
  EXPECT_EQ(m.active_params(), builtin.active_params());
}

TEST(MoeHfConfig, ReadsDbrxNestedConfig) {
  const auto dir = testing::scratch_dir("hf_dbrx");
  // The keys of databricks/dbrx-base's config.json.
  const auto path = write_text_file(dir, "config.json", R"({
    "architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "d_model": 6144,
    "n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352,
    "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
    "ffn_config": {"ffn_hidden_size": 10752, "moe_jitter_eps": 0, "moe_loss_weight": 0.05,
                   "moe_num_experts": 16, "moe_top_k": 4},
    "tie_word_embeddings": false, "torch_dtype": "bfloat16" })");
  const ModelSpec m = load_hf_config(path);
  EXPECT_EQ(m.num_layers, 40);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.ffn_size, 10752);
  EXPECT_EQ(m.num_experts, 16);
  EXPECT_EQ(m.experts_per_token, 4);
  EXPECT_TRUE(m.gated_mlp);
  EXPECT_EQ(m.max_context_tokens, 32768);
  // "132B total parameters of which 36B parameters are active on any input" (Databricks).
  EXPECT_NEAR(static_cast<double>(m.total_params()), 132e9, 0.02 * 132e9);
  EXPECT_NEAR(static_cast<double>(m.active_params()), 36e9, 0.02 * 36e9);
  // Nested keys are named with their object in errors.
  const auto bad = write_text_file(dir, "bad.json", R"({"model_type": "dbrx", "d_model": 6144,
    "n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352,
    "attn_config": {"kv_n_heads": 8},
    "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": "4"}})");
  EXPECT_THAT(user_error_of([&] { load_hf_config(bad); }),
              AllOf(HasSubstr("bad.json"), HasSubstr("ffn_config.moe_top_k")));
}

TEST(Fp8HfConfig, Fp8QuantizationConfigMeansOneByteWeights) {
  const auto dir = testing::scratch_dir("hf_fp8");
  // As in FP8 checkpoints made with AutoFP8 / llm-compressor (e.g. neuralmagic's
  // Mixtral-8x7B-Instruct-v0.1-FP8).
  const ModelSpec m = load_hf_config(
      write_text_file(dir, "config.json", mixtral_config(R"(, "quantization_config": {"activation_scheme": "static",
                          "ignored_layers": ["lm_head"], "quant_method": "fp8"})")));
  EXPECT_EQ(m.weight_format, WeightFormat::fp8);
  EXPECT_EQ(m.kv_dtype_bytes, 2);  // the checkpoint says nothing about the KV cache
  EXPECT_EQ(m.weight_bytes(), with_dtypes(resolve_model("mixtral-8x7b"), WeightFormat::fp8, 0).weight_bytes());
}

TEST(MoeHfConfig, UnsupportedLayoutsAndQuantisationsNameTheFileAndKey) {
  const auto dir = testing::scratch_dir("hf_moe_errors");
  const auto awq = write_text_file(dir, "awq.json", mixtral_config(R"(, "quantization_config": {"quant_method": "awq",
                                             "bits": 4})"));
  EXPECT_THAT(user_error_of([&] { load_hf_config(awq); }),
              AllOf(HasSubstr("awq.json"), HasSubstr("quantization_config.quant_method"), HasSubstr("'awq'"),
                    HasSubstr("fp8")));
  const auto no_method =
      write_text_file(dir, "nomethod.json", mixtral_config(R"(, "quantization_config": {"bits": 8})"));
  EXPECT_THAT(user_error_of([&] { load_hf_config(no_method); }),
              AllOf(HasSubstr("nomethod.json"), HasSubstr("quantization_config.quant_method")));
  // top-k above the expert count.
  std::string too_many = mixtral_config();
  too_many.replace(too_many.find("\"num_experts_per_tok\": 2"), 24, "\"num_experts_per_tok\": 9");
  EXPECT_THAT(user_error_of([&] { load_hf_config(write_text_file(dir, "topk.json", too_many)); }),
              AllOf(HasSubstr("topk.json"), HasSubstr("num_experts_per_tok")));
  // Experts without top-k.
  std::string no_topk = mixtral_config();
  no_topk.replace(no_topk.find("\"num_experts_per_tok\": 2,"), 25, "");
  EXPECT_THAT(user_error_of([&] { load_hf_config(write_text_file(dir, "notopk.json", no_topk)); }),
              AllOf(HasSubstr("notopk.json"), HasSubstr("num_experts_per_tok")));
  // Dense layers of a mixture of experts are read, not refused: Qwen2-MoE's decoder_sparse_step
  // (layers 1, 3, ... of 32 MoE), mlp_only_layers (listed layers dense), DeepSeek's
  // first_k_dense_replace; a layout with every layer dense is an error naming the file.
  const ModelSpec stepped =
      load_hf_config(write_text_file(dir, "step.json", mixtral_config(R"(, "decoder_sparse_step": 2)")));
  EXPECT_EQ(stepped.dense_layers, 16);
  EXPECT_EQ(stepped.moe_layers(), 16);
  EXPECT_EQ(stepped.dense_ffn_size, 14336);
  const ModelSpec listed =
      load_hf_config(write_text_file(dir, "mlponly.json", mixtral_config(R"(, "mlp_only_layers": [0, 1])")));
  EXPECT_EQ(listed.dense_layers, 2);
  const ModelSpec first = load_hf_config(
      write_text_file(dir, "first.json", mixtral_config(R"(, "first_k_dense_replace": 3, "moe_layer_freq": 1)")));
  EXPECT_EQ(first.dense_layers, 3);
  EXPECT_THAT(
      user_error_of([&] {
        load_hf_config(write_text_file(dir, "alldense.json", mixtral_config(R"(, "first_k_dense_replace": 32)")));
      }),
      AllOf(HasSubstr("alldense.json"), HasSubstr("every layer is dense")));
  EXPECT_THAT(user_error_of([&] {
                load_hf_config(write_text_file(dir, "badlist.json", mixtral_config(R"(, "mlp_only_layers": [40])")));
              }),
              AllOf(HasSubstr("badlist.json"), HasSubstr("mlp_only_layers"), HasSubstr("40")));
}

// ---- routing and the cost model ----

TEST(MoeRouting, ExpectedDistinctExpertsUnderUniformRouting) {
  const ModelSpec mixtral = resolve_model("mixtral-8x7b");
  // One token: its k experts, one row each.
  EXPECT_DOUBLE_EQ(expected_expert_load(mixtral, 1).experts, 2);
  EXPECT_DOUBLE_EQ(expected_expert_load(mixtral, 1).tokens_per_expert, 1);
  // 8 tokens: 8 (1 - 0.75^8) = 7.199 experts, the 16 rows spread over them.
  const ExpertLoad eight = expected_expert_load(mixtral, 8);
  EXPECT_NEAR(eight.experts, 8 * (1 - std::pow(0.75, 8)), 1e-12);
  EXPECT_NEAR(eight.tokens_per_expert, 16 / eight.experts, 1e-12);
  // 256 tokens touch every expert, T k / E = 64 rows each.
  EXPECT_NEAR(expected_expert_load(mixtral, 256).experts, 8, 1e-9);
  EXPECT_NEAR(expected_expert_load(mixtral, 256).tokens_per_expert, 64, 1e-9);
  // Qwen's 60 experts, top 4: 16 tokens touch 60 (1 - (56/60)^16) = 39.4 of them.
  EXPECT_NEAR(expected_expert_load(resolve_model("qwen1.5-moe"), 16).experts, 60 * (1 - std::pow(56.0 / 60, 16)), 1e-9);
  // A Monte Carlo check of the expectation: 8 tokens, top-2 of 8 without replacement.
  std::mt19937_64 rng(3);
  double touched_sum = 0;
  const int trials = 20000;
  for (int t = 0; t < trials; ++t) {
    unsigned mask = 0;
    for (int token = 0; token < 8; ++token) {
      const int a = static_cast<int>(rng() % 8);
      int b = static_cast<int>(rng() % 7);
      if (b >= a) ++b;
      mask |= (1u << a) | (1u << b);
    }
    touched_sum += std::popcount(mask);
  }
  EXPECT_NEAR(touched_sum / trials, eight.experts, 0.03);
  // Dense: one "expert" of all tokens.
  EXPECT_DOUBLE_EQ(expected_expert_load(resolve_model("llama-2-7b"), 100).experts, 1);
  EXPECT_DOUBLE_EQ(expected_expert_load(resolve_model("llama-2-7b"), 100).tokens_per_expert, 100);
}

TEST(MoeCostModel, ShapesSplitEachExpertOverTensorParallelGpus) {
  const ModelSpec mixtral = resolve_model("mixtral-8x7b");
  const auto tp2 = layer_gemm_shapes(mixtral, 2);
  EXPECT_EQ(tp2[kUp].k, 4096);
  EXPECT_EQ(tp2[kUp].n, 14336);  // gate + up of 7168 each
  EXPECT_EQ(tp2[kDown].k, 7168);
  const MoeGemmShapes m2 = moe_gemm_shapes(mixtral, 2);
  EXPECT_EQ(m2.router.k, 4096);  // replicated, not split
  EXPECT_EQ(m2.router.n, 8);
  EXPECT_EQ(m2.shared_up.n, 0);
  const MoeGemmShapes q2 = moe_gemm_shapes(resolve_model("qwen1.5-moe"), 2);
  EXPECT_EQ(q2.shared_up.n, 5632);  // 2 x 2816
  EXPECT_EQ(q2.shared_down.k, 2816);
  EXPECT_EQ(moe_gemm_shapes(resolve_model("llama-2-7b"), 1).router.n, 0);
  // Every expert's FFN and the shared expert's must divide by tp.
  ModelSpec odd = resolve_model("qwen1.5-moe");
  odd.shared_expert_ffn_size = 5630;
  EXPECT_THAT(user_error_of([&] { CostModel(odd, round_profile(), 4); }),
              AllOf(HasSubstr("shared expert FFN 5630"), HasSubstr("--tp 4")));
}

// A profile where only HBM bytes matter (FLOPs are free), and one where only FLOPs matter.
HardwareProfile bytes_only() {
  HardwareProfile p = round_profile();
  p.peak_flops = 1e21;
  return p;
}
HardwareProfile flops_only(double m_half) {
  HardwareProfile p = round_profile();
  p.hbm_bytes_per_s = 1e21;
  p.gemm_m_half = m_half;
  return p;
}

// An MoE layer's routed experts are one fused-MoE call (moe_kernel.h) with the layer's shapes;
// the router and the attention GEMMs are dense GEMMs beside it. A single decode reads its k
// experts' weights, a batch of 256 all 8 of them: 4x the weight bytes.
TEST(MoeCostModel, RoutedExpertsAreOneFusedMoeCallPerLayer) {
  const ModelSpec mixtral = resolve_model("mixtral-8x7b");
  const HardwareProfile gpu = bytes_only();
  const CostModel cm(mixtral, gpu);
  auto call = [](int64_t tokens) {
    FusedMoeCall c;
    c.tokens = tokens;
    c.hidden = 4096;
    c.intermediate = 14336;
    c.top_k = 2;
    c.experts = 8;
    c.ep = 1;
    c.format = WeightFormat::bf16;
    c.gated = true;
    return c;
  };
  for (const int64_t n : {int64_t{1}, int64_t{256}}) {
    SCOPED_TRACE(n);
    BatchShape batch;
    for (int64_t i = 0; i < n; ++i) batch.add_decode(100);
    const IterationCost c = cm.iteration(batch);
    const double router = gemm_time_s(gpu, GemmShape{4096, 8}, n, WeightFormat::bf16);
    EXPECT_NEAR(c.layer_gemm_s[kUp] + c.layer_gemm_s[kDown], 32 * (fused_moe_time_s(gpu, call(n)) + router), 1e-12);
  }
  const FusedMoeTime one = fused_moe_time(gpu, call(1));
  const FusedMoeTime many = fused_moe_time(gpu, call(256));
  EXPECT_NEAR(many.weights_s / one.weights_s, 4.0, 1e-9);
  // Attention GEMMs are dense: 256 rows of the same weights cost little more than one.
  BatchShape one_decode, batch;
  one_decode.add_decode(100);
  for (int i = 0; i < 256; ++i) batch.add_decode(100);
  EXPECT_LT(cm.iteration(batch).layer_gemm_s[static_cast<int>(LayerGemm::qkv)],
            1.2 * cm.iteration(one_decode).layer_gemm_s[static_cast<int>(LayerGemm::qkv)]);
  EXPECT_FALSE(cm.iteration(batch).gemm_compute_bound);
  // The grouped GEMM of the roofline (what the kernel falls back to without a fit) at a
  // fractional load: 8 tokens touch 7.2 experts on average.
  const HardwareProfile flops = flops_only(64);
  auto at = [&](double f, double m) { return f / (100e12 * 0.5 * m / (m + 64)); };
  const ExpertLoad eight = expected_expert_load(mixtral, 8);
  const GemmShape up = layer_gemm_shapes(mixtral, 1)[kUp];
  EXPECT_NEAR(grouped_gemm_time_s(flops, up, eight.tokens_per_expert, eight.experts, WeightFormat::bf16),
              at(2.0 * 16 * 4096 * 28672, eight.tokens_per_expert), 1e-15);
}

TEST(MoeCostModel, SharedExpertRunsOnEveryToken) {
  const ModelSpec qwen = resolve_model("qwen1.5-moe");
  ModelSpec no_shared = qwen;
  no_shared.shared_expert_ffn_size = 0;
  const HardwareProfile gpu = flops_only(0);
  BatchShape shape;
  shape.add_prefill(1000, 0);
  const IterationCost with = CostModel(qwen, gpu).iteration(shape);
  const IterationCost without = CostModel(no_shared, gpu).iteration(shape);
  // A dense gated MLP of 5632 on 1000 tokens at 50 TFLOP/s: up 2 * 1000 * 2048 * 11264, down
  // 2 * 1000 * 5632 * 2048, 24 layers.
  EXPECT_NEAR(with.layer_gemm_s[kUp] - without.layer_gemm_s[kUp], 24 * 2.0 * 1000 * 2048 * 11264 / 50e12, 1e-12);
  EXPECT_NEAR(with.layer_gemm_s[kDown] - without.layer_gemm_s[kDown], 24 * 2.0 * 1000 * 5632 * 2048 / 50e12, 1e-12);
  // Its activation runs on every token too; the routed one on tokens x top-4 rows, and the
  // top-k combine reads k outputs and writes one (Mixtral, 10 tokens, 2 bytes):
  EXPECT_DOUBLE_EQ(elementwise_bytes(resolve_model("mixtral-8x7b"), 1, ElementwiseOp::activation, 10),
                   20.0 * (2 * 14336 * 3 + 3 * 4096));
  EXPECT_DOUBLE_EQ(elementwise_bytes(qwen, 2, ElementwiseOp::activation, 10),
                   20.0 * (4 * 704 * 3 + 2816 * 3 + 5 * 2048));
}

TEST(MoeCostModel, OneExpertIsADenseModel) {
  const ModelSpec dense = resolve_model("llama-3-8b");
  ModelSpec one = dense;
  one.num_experts = 1;
  one.experts_per_token = 1;
  EXPECT_FALSE(one.is_moe());
  EXPECT_EQ(one.total_params(), dense.total_params());
  for (const HardwareProfile& gpu : {round_profile(), resolve_gpu("a100-80gb-fitted")}) {
    BatchShape shape;
    shape.add_prefill(300, 200);
    shape.add_decode(1000);
    shape.num_sampled = 2;
    EXPECT_EQ(CostModel(one, gpu, 2).iteration(shape).total_s, CostModel(dense, gpu, 2).iteration(shape).total_s);
  }
}

TEST(MoeCostModel, KvCapacityHoldsEveryExpertsWeights) {
  const CostModel cm(resolve_model("mixtral-8x7b"), resolve_gpu("h100-sxm"), 2);
  // Reserve: 1 GiB + 8192 tokens * 2 bytes * per-token elements at TP 2: 4 * 4096 + QKV 3072
  // + two experts' gate/up 14336 and activated 7168 each + their two outputs of 4096 + the 8
  // router logits = 70,664; + 256 * 16000 fp32 logits.
  EXPECT_DOUBLE_EQ(cm.activation_reserve_bytes(8192), 1073741824.0 + 8192.0 * 2 * 70664 + 256.0 * 16000 * 4);
  // fused_moe holds its experts' intermediates for one chunk of 16,384 tokens at most: beyond
  // it a token adds only its own 4 * 4096 + 3072 + 8 elements, not the experts' 2 * (21504 +
  // 4096).
  const double experts_per_token = 2.0 * (14336 + 7168 + 4096);
  EXPECT_DOUBLE_EQ(cm.activation_reserve_bytes(32768) - cm.activation_reserve_bytes(16384),
                   16384.0 * 2 * (70664 - experts_per_token));
  EXPECT_DOUBLE_EQ(cm.activation_reserve_bytes(16384) - cm.activation_reserve_bytes(8192), 8192.0 * 2 * 70664);
  // Fewer sampled rows, less reserve: 255 rows of 16,000 fp32 logits.
  EXPECT_DOUBLE_EQ(cm.activation_reserve_bytes(8192) - cm.activation_reserve_bytes(8192, 1), 255.0 * 16000 * 4);
  // 81,559 MiB * 0.9 - all 46.7B parameters' bytes / 2 GPUs - reserve, over 2 * 32 layers *
  // 4 KV heads * 128 * 2 bytes per token per GPU.
  const double free_bytes = 81559.0 * 1048576 * 0.9 - 46702526464.0 - 2247884800.0;
  EXPECT_EQ(cm.kv_capacity_tokens(0.9), static_cast<int64_t>(std::floor(free_bytes / 65536)));
  // On one 80 GB GPU the 93 GB of bf16 weights do not fit; in FP8 (47 GB) they do.
  const ModelSpec bf16 = resolve_model("mixtral-8x7b");
  EXPECT_LE(CostModel(bf16, resolve_gpu("h100-sxm")).kv_capacity_tokens(0.9), 0);
  EXPECT_GT(CostModel(with_dtypes(bf16, WeightFormat::fp8, 0), resolve_gpu("h100-sxm")).kv_capacity_tokens(0.9),
            100000);
}

TEST(MoeCostModel, MoreWorkIsNeverFaster) {
  HardwareProfile fitted = round_profile();
  fitted.gemm_m_half = 48;
  fitted.kernel_launch_s = 4e-6;
  fitted.gemm_roofline_exponent = 1.5;
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> len(1, 3000);
  for (const char* model : {"mixtral-8x7b", "qwen1.5-moe"}) {
    for (const HardwareProfile& gpu : {round_profile(), fitted, resolve_gpu("h100-sxm")}) {
      const CostModel cm(resolve_model(model), gpu);
      BatchShape shape;
      double previous_s = 0;
      for (int step = 0; step < 200; ++step) {
        if (step % 2 == 0) {
          shape.add_decode(len(rng));
        } else {
          shape.add_prefill(len(rng) % 64 + 1, len(rng));
        }
        const double t = cm.iteration(shape).total_s;
        EXPECT_GE(t, previous_s) << model << " " << gpu.name << " step " << step;
        previous_s = t;
      }
    }
  }
}

// ---- FP8 ----

TEST(Fp8CostModel, Fp8KvDoublesCapacityAndHalvesKvReads) {
  const ModelSpec bf16 = resolve_model("llama-2-7b");
  const ModelSpec kv8 = with_dtypes(bf16, std::nullopt, 1);
  const CostModel a(bf16, resolve_gpu("a100-80gb"));
  const CostModel b(kv8, resolve_gpu("a100-80gb"));
  // Same weights and reserve, half the bytes per token: 117,713.9 -> 235,427.8 tokens.
  EXPECT_EQ(a.kv_capacity_tokens(0.9), 117713);
  EXPECT_EQ(b.kv_capacity_tokens(0.9), 235427);
  // Decode attention reads K and V at one byte; Q and O stay 16-bit: 10 sequences, 10,000
  // tokens of context, 32 heads of 128.
  const OperatorWork d2 = decode_attention_work(bf16, 1, 10, 10000);
  const OperatorWork d1 = decode_attention_work(kv8, 1, 10, 10000);
  const double qo_bytes = 2.0 * 2 * 10 * 32 * 128;
  EXPECT_DOUBLE_EQ(d2.bytes, 2.0 * 2 * 10000 * 32 * 128 + qo_bytes);
  EXPECT_DOUBLE_EQ(d1.bytes, 1.0 * 2 * 10000 * 32 * 128 + qo_bytes);
  EXPECT_DOUBLE_EQ(d1.unit_bytes_max, d2.unit_bytes_max / 2);
  EXPECT_DOUBLE_EQ(d1.flops, d2.flops);
  // Prefill: the per-block K/V reads halve too.
  EXPECT_DOUBLE_EQ(prefill_attention_work(kv8, 1, 128, 1024).cta_kv_bytes,
                   prefill_attention_work(bf16, 1, 128, 1024).cta_kv_bytes / 2);
  // A memory-bound decode iteration's attention time halves (KV dominates Q and O).
  BatchShape shape;
  for (int i = 0; i < 64; ++i) shape.add_decode(4000);
  const double ratio = CostModel(kv8, round_profile()).iteration(shape).decode_attention_s /
                       CostModel(bf16, round_profile()).iteration(shape).decode_attention_s;
  EXPECT_NEAR(ratio, 0.5, 0.001);
}

TEST(Fp8CostModel, Fp8WeightsHalveWeightBytesAndDoubleFlopsOnlyWithFp8TensorCores) {
  const ModelSpec bf16 = resolve_model("llama-3-8b");
  const ModelSpec w8 = with_dtypes(bf16, WeightFormat::fp8, 0);
  const GemmShape up = layer_gemm_shapes(bf16, 1)[kUp];
  // One row: activations 2 * (4096 + 28672) bytes, weights 4096 * 28672 at 2 or 1 bytes.
  EXPECT_DOUBLE_EQ(gemm_work(up, 1, WeightFormat::bf16).bytes, 2.0 * (4096 + 28672) + 2.0 * 4096 * 28672);
  EXPECT_DOUBLE_EQ(gemm_work(up, 1, WeightFormat::fp8).bytes, 2.0 * (4096 + 28672) + 1.0 * 4096 * 28672);

  const HardwareProfile a100 = resolve_gpu("a100-80gb");
  const HardwareProfile h100 = resolve_gpu("h100-sxm");
  EXPECT_DOUBLE_EQ(gemm_peak_flops(a100, WeightFormat::fp8), 312e12);  // no FP8 tensor cores: 16-bit rate
  EXPECT_DOUBLE_EQ(gemm_peak_flops(h100, WeightFormat::fp8), 1979e12);
  EXPECT_DOUBLE_EQ(gemm_peak_flops(h100, WeightFormat::bf16), 989e12);
  // Compute-bound (8192 rows): the same time on an A100, about half on an H100.
  EXPECT_DOUBLE_EQ(gemm_time_s(a100, up, 8192, WeightFormat::fp8), gemm_time_s(a100, up, 8192, WeightFormat::bf16));
  EXPECT_NEAR(gemm_time_s(h100, up, 8192, WeightFormat::fp8) / gemm_time_s(h100, up, 8192, WeightFormat::bf16),
              989.0 / 1979, 1e-9);
  // Memory-bound (one row): about half everywhere, the weight bytes.
  EXPECT_NEAR(gemm_time_s(a100, up, 1, WeightFormat::fp8) / gemm_time_s(a100, up, 1, WeightFormat::bf16), 0.5, 0.005);

  // Whole iterations: a decode batch's GEMMs about halve on either GPU; a long prefill's
  // halves on the H100 only. The LM head stays 16-bit.
  BatchShape decode;
  for (int i = 0; i < 8; ++i) decode.add_decode(500);
  decode.num_sampled = 8;
  BatchShape prefill;
  prefill.add_prefill(8192, 0);
  for (const HardwareProfile& gpu : {a100, h100}) {
    const IterationCost d2 = CostModel(bf16, gpu).iteration(decode);
    const IterationCost d1 = CostModel(w8, gpu).iteration(decode);
    EXPECT_NEAR(d1.gemm_s / d2.gemm_s, 0.5, 0.01) << gpu.name;
    EXPECT_DOUBLE_EQ(d1.lm_head_s, d2.lm_head_s);
  }
  EXPECT_NEAR(CostModel(w8, a100).iteration(prefill).gemm_s / CostModel(bf16, a100).iteration(prefill).gemm_s, 1.0,
              1e-9);
  EXPECT_NEAR(CostModel(w8, h100).iteration(prefill).gemm_s / CostModel(bf16, h100).iteration(prefill).gemm_s,
              989.0 / 1979, 0.01);
}

}  // namespace
}  // namespace batchsim
