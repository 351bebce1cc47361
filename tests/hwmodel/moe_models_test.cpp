// The models of the MoE era (issue 43): the built-ins read from the published config.json files
// shipped in hwmodel/models/, by name, by Hugging Face id and by folder; their architectural
// numbers against the configs; the KV bytes of each attention kind and the weight bytes of each
// weight format, computed here by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "hwmodel/base/error.h"
#include "hwmodel/model_spec.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::user_error_of;
using testing::write_text_file;

TEST(MoeModels, EveryNewModelResolvesByNameAndByHuggingFaceId) {
  const std::pair<const char*, const char*> models[] = {
      {"deepseek-v3", "deepseek-ai/DeepSeek-V3"},
      {"deepseek-r1", "deepseek-ai/DeepSeek-R1"},
      {"kimi-k2", "moonshotai/Kimi-K2-Instruct"},
      {"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"},
      {"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"},
      {"qwen3-235b-a22b-fp8", "Qwen/Qwen3-235B-A22B-FP8"},
      {"gpt-oss-20b", "openai/gpt-oss-20b"},
      {"gpt-oss-120b", "openai/gpt-oss-120b"},
      {"glm-4.5", "zai-org/GLM-4.5"},
      {"glm-4.5-air", "zai-org/GLM-4.5-Air"},
      {"llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct"},
      {"llama-4-maverick", "meta-llama/Llama-4-Maverick-17B-128E-Instruct"},
      {"minimax-m2", "MiniMaxAI/MiniMax-M2"},
      {"minimax-m2.5", "MiniMaxAI/MiniMax-M2.5"},
      {"llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct"},
  };
  for (const auto& [name, id] : models) {
    SCOPED_TRACE(name);
    const ModelSpec by_name = resolve_model(name);
    const ModelSpec by_id = resolve_model(id);
    EXPECT_EQ(by_name.name, name);
    EXPECT_EQ(by_id.name, name);
    EXPECT_EQ(by_name.hf_id, id);
    EXPECT_EQ(by_id.total_params(), by_name.total_params());
  }
}

// The numbers each family's config.json gives (hwmodel/models/*.json).
TEST(MoeModels, ArchitecturesFollowTheirConfigs) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  EXPECT_TRUE(v3.is_mla());
  EXPECT_EQ(v3.num_layers, 61);
  EXPECT_EQ(v3.kv_lora_rank, 512);
  EXPECT_EQ(v3.q_lora_rank, 1536);
  EXPECT_EQ(v3.qk_rope_head_dim, 64);
  EXPECT_EQ(v3.head_dim, 192);  // qk_nope_head_dim 128 + qk_rope_head_dim 64
  EXPECT_EQ(v3.v_head_dim, 128);
  EXPECT_EQ(v3.num_experts, 256);
  EXPECT_EQ(v3.experts_per_token, 8);
  EXPECT_EQ(v3.ffn_size, 2048);
  EXPECT_EQ(v3.shared_expert_ffn_size, 2048);  // n_shared_experts 1 x moe_intermediate_size
  EXPECT_EQ(v3.dense_layers, 3);               // first_k_dense_replace
  EXPECT_EQ(v3.dense_ffn_size, 18432);
  EXPECT_EQ(v3.weight_format, WeightFormat::fp8_block);
  EXPECT_EQ(v3.expert_weight_format, WeightFormat::fp8_block);
  // "671B total parameters with 37B activated for each token" (DeepSeek-V3 report, abstract;
  // the 14B of the MTP module are not in num_hidden_layers).
  EXPECT_NEAR(static_cast<double>(v3.total_params()) / 1e9, 671, 3);
  EXPECT_NEAR(static_cast<double>(v3.active_params()) / 1e9, 37, 1);

  const ModelSpec kimi = resolve_model("kimi-k2");
  EXPECT_EQ(kimi.num_heads, 64);
  EXPECT_EQ(kimi.num_experts, 384);
  EXPECT_EQ(kimi.dense_layers, 1);
  // "1 trillion total parameters, 32 billion activated" (Kimi K2 model card).
  EXPECT_NEAR(static_cast<double>(kimi.total_params()) / 1e12, 1.03, 0.02);

  const ModelSpec oss = resolve_model("gpt-oss-120b");
  EXPECT_EQ(oss.head_dim, 64);
  EXPECT_EQ(oss.sliding_window_layers, 18);
  EXPECT_EQ(oss.sliding_window, 128);
  EXPECT_TRUE(oss.attention_sinks);
  EXPECT_FALSE(oss.qk_norm_across_heads);
  EXPECT_TRUE(resolve_model("minimax-m2.5").qk_norm_across_heads);
  EXPECT_FALSE(resolve_model("qwen3-235b-a22b").qk_norm_across_heads);  // per head: no sum across ranks
  EXPECT_EQ(oss.weight_format, WeightFormat::bf16);                     // modules_to_not_convert: self_attn
  EXPECT_EQ(oss.expert_weight_format, WeightFormat::mxfp4);
  EXPECT_EQ(oss.num_experts, 128);
  EXPECT_EQ(oss.experts_per_token, 4);
  // "117B parameters with 5.1B active" (gpt-oss model card); active counts the embedding and
  // the LM head apart, 2 x 0.58B.
  EXPECT_NEAR(static_cast<double>(oss.total_params()) / 1e9, 117, 1);

  const ModelSpec maverick = resolve_model("llama-4-maverick");
  EXPECT_EQ(maverick.dense_layers, 24);  // interleave_moe_layer_step 2
  EXPECT_EQ(maverick.dense_ffn_size, 16384);
  EXPECT_EQ(maverick.shared_expert_ffn_size, 8192);
  EXPECT_EQ(maverick.chunked_attention_layers, 36);  // every fourth layer is NoPE, full attention
  EXPECT_EQ(maverick.attention_chunk_size, 8192);
  EXPECT_NEAR(static_cast<double>(maverick.total_params()) / 1e9, 400, 4);
  const ModelSpec scout = resolve_model("llama-4-scout");
  EXPECT_EQ(scout.dense_layers, 0);
  EXPECT_NEAR(static_cast<double>(scout.total_params()) / 1e9, 109, 2);

  const ModelSpec glm = resolve_model("glm-4.5");
  EXPECT_EQ(glm.num_kv_heads, 8);
  EXPECT_EQ(glm.head_dim, 128);
  EXPECT_EQ(glm.num_experts, 160);
  EXPECT_EQ(glm.dense_layers, 3);
  EXPECT_NEAR(static_cast<double>(glm.total_params()) / 1e9, 355, 4);

  const ModelSpec minimax = resolve_model("minimax-m2");
  EXPECT_EQ(minimax.num_experts, 256);
  EXPECT_EQ(minimax.shared_expert_ffn_size, 0);
  EXPECT_EQ(minimax.dense_layers, 0);
  EXPECT_EQ(minimax.weight_format, WeightFormat::fp8_block);
  EXPECT_NEAR(static_cast<double>(minimax.total_params()) / 1e9, 230, 3);

  const ModelSpec qwen = resolve_model("qwen3-235b-a22b");
  EXPECT_EQ(qwen.num_kv_heads, 4);
  EXPECT_EQ(qwen.weight_format, WeightFormat::bf16);
  EXPECT_EQ(resolve_model("Qwen/Qwen3-235B-A22B-FP8").weight_format, WeightFormat::fp8_block);
}

// KV bytes per token, by hand from each config.
TEST(MoeModels, KvBytesPerTokenOfEachAttentionKind) {
  // MLA: the latent and the RoPE key, 512 + 64 = 576 elements per layer, whatever the heads.
  ModelSpec v3 = resolve_model("deepseek-v3");
  EXPECT_EQ(v3.kv_elements_per_token_layer(), 576);
  EXPECT_EQ(v3.kv_bytes_per_token(), 61 * 576 * 2);
  // FlashMLA's FP8 cache: 512 FP8 + 4 scales of 4 bytes + 64 x 2 = 656 bytes per layer.
  v3.kv_dtype_bytes = 1;
  EXPECT_DOUBLE_EQ(v3.kv_bytes_per_token_layer(), 656);
  EXPECT_EQ(v3.kv_bytes_per_token(), 61 * 656);
  // GQA: K and V of 8 heads of 64 in each of 36 layers (the window layers too, while a token is
  // in their window).
  EXPECT_EQ(resolve_model("gpt-oss-120b").kv_bytes_per_token(), 36 * 2 * 8 * 64 * 2);
  // Qwen3-235B: 94 layers x 2 x 4 x 128 x 2.
  EXPECT_EQ(resolve_model("qwen3-235b-a22b").kv_bytes_per_token(), 94 * 2 * 4 * 128 * 2);
  // Kimi K2 has 64 heads, not 128: the latent is the same size.
  EXPECT_EQ(resolve_model("kimi-k2").kv_bytes_per_token(), 61 * 576 * 2);
}

// Weight bytes by format, by hand: MXFP4 stores 4 bits and one 8-bit scale per 32 values, FP8
// block one float per 128 x 128; the embedding, the LM head and the routers stay 16-bit.
TEST(MoeModels, WeightBytesFollowTheFormats) {
  EXPECT_DOUBLE_EQ(weight_format_bytes(WeightFormat::bf16), 2);
  EXPECT_DOUBLE_EQ(weight_format_bytes(WeightFormat::fp8), 1);
  EXPECT_DOUBLE_EQ(weight_format_bytes(WeightFormat::fp8_block), 1 + 4.0 / 16384);
  EXPECT_DOUBLE_EQ(weight_format_bytes(WeightFormat::mxfp4), 0.5 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(weight_format_bytes(WeightFormat::nvfp4), 0.5 + 1.0 / 16);

  const ModelSpec oss = resolve_model("gpt-oss-120b");
  const double h = 2880, layers = 36, experts = 128, ffn = 2880;
  const double attention = layers * (h * (64 * 64 + 2 * 8 * 64) + 64 * 64 * h);
  const double routed = layers * experts * 3 * h * ffn;
  const double router = layers * h * experts;
  const double embedding = 2.0 * 201088 * h;
  EXPECT_NEAR(static_cast<double>(oss.weight_bytes()),
              attention * 2 + routed * (0.5 + 1.0 / 32) + (router + embedding) * 2, 1.0);
  // About 65 GB: what makes gpt-oss-120b fit on one 80 GB GPU.
  EXPECT_NEAR(static_cast<double>(oss.weight_bytes()) / 1e9, 65, 2);
  // The same model in 16-bit is about 3.6 times as large.
  ModelSpec bf16 = oss;
  bf16.expert_weight_format = WeightFormat::bf16;
  EXPECT_GT(static_cast<double>(bf16.weight_bytes()) / static_cast<double>(oss.weight_bytes()), 3.3);
}

// A folder holding a config.json is a model too, read the same way as the shipped file.
TEST(MoeModels, AFolderWithAConfigJsonIsAModel) {
  const auto dir = testing::scratch_dir("moe-models-folder") / "DeepSeek-V3";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::source_dir() / "hwmodel" / "models" / "deepseek-ai--DeepSeek-V3.json",
                             dir / "config.json", std::filesystem::copy_options::overwrite_existing);
  const ModelSpec from_folder = resolve_model(dir.string());
  const ModelSpec builtin = resolve_model("deepseek-v3");
  EXPECT_EQ(from_folder.total_params(), builtin.total_params());
  EXPECT_EQ(from_folder.kv_bytes_per_token(), builtin.kv_bytes_per_token());
  EXPECT_EQ(from_folder.weight_bytes(), builtin.weight_bytes());
}

// Bad configs of the new families name the file and the key.
TEST(MoeModels, BadConfigsNameTheFileAndKey) {
  const auto dir = testing::scratch_dir("moe-models-bad");
  const std::string mla = R"({"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 1024,
    "num_attention_heads": 8, "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 4096,
    "kv_lora_rank": 128, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32)";
  EXPECT_THAT(user_error_of([&] { load_hf_config(write_text_file(dir, "nov.json", mla + "}")); }),
              AllOf(HasSubstr("nov.json"), HasSubstr("v_head_dim")));
  const std::string oss = R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 512,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512,
    "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 4096)";
  EXPECT_THAT(user_error_of([&] {
                load_hf_config(write_text_file(dir, "types.json", oss + R"(, "layer_types": ["sliding_attention"]})"));
              }),
              AllOf(HasSubstr("types.json"), HasSubstr("layer_types")));
  EXPECT_THAT(user_error_of([&] {
                load_hf_config(write_text_file(dir, "nowin.json",
                                               oss + R"(, "layer_types": ["sliding_attention", "full_attention"]})"));
              }),
              AllOf(HasSubstr("nowin.json"), HasSubstr("sliding_window")));
  EXPECT_THAT(
      user_error_of([&] {
        load_hf_config(write_text_file(
            dir, "q.json", oss + R"(, "quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8"}})"));
      }),
      AllOf(HasSubstr("q.json"), HasSubstr("quant_algo"), HasSubstr("W4A8")));
}

}  // namespace
}  // namespace batchsim
