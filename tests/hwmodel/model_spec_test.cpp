// Built-in model specs and the Hugging Face config.json reader.
#include "hwmodel/model_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using testing::user_error_of;
using testing::write_text_file;

TEST(ModelSpec, BuiltinsHaveThePublishedShapes) {
  const ModelSpec opt = resolve_model("opt-13b");
  EXPECT_EQ(opt.num_layers, 40);
  EXPECT_EQ(opt.hidden_size, 5120);
  EXPECT_EQ(opt.num_kv_heads, 40);
  EXPECT_EQ(opt.ffn_size, 4 * 5120);
  EXPECT_FALSE(opt.gated_mlp);
  EXPECT_EQ(opt.max_context_tokens, 2048);

  const ModelSpec l70 = resolve_model("llama-2-70b");
  EXPECT_EQ(l70.num_heads, 64);
  EXPECT_EQ(l70.num_kv_heads, 8);
  EXPECT_EQ(l70.head_dim, 128);
  EXPECT_EQ(l70.ffn_size, 28672);
  EXPECT_TRUE(l70.gated_mlp);

  const ModelSpec l3 = resolve_model("llama-3-8b");
  EXPECT_EQ(l3.vocab_size, 128256);
  EXPECT_EQ(l3.num_kv_heads, 8);
  EXPECT_EQ(l3.max_context_tokens, 8192);

  for (const char* name : {"llama-2-7b", "llama-2-13b", "llama-3-70b", "mistral-7b"}) {
    const ModelSpec m = resolve_model(name);
    EXPECT_EQ(m.name, name);
    EXPECT_TRUE(m.gated_mlp) << name;
    EXPECT_EQ(m.head_dim * m.num_heads, m.hidden_size) << name;
  }
}

TEST(ModelSpec, BuiltinsAreSortedByName) {
  const auto& models = builtin_models();
  ASSERT_GE(models.size(), 7u);
  for (size_t i = 1; i < models.size(); ++i) EXPECT_LT(models[i - 1].name, models[i].name);
}

TEST(ModelSpec, ParameterCountsMatchHandCalculation) {
  // Llama-2-7B per layer: QKV 4096*12288 + O 4096^2 + gate/up 2*4096*11008 + down 11008*4096
  //   = 50,331,648 + 16,777,216 + 90,177,536 + 45,088,768 = 202,375,168.
  const ModelSpec m = resolve_model("llama-2-7b");
  EXPECT_EQ(m.layer_gemm_params(), 202375168);
  // 32 layers + embedding and LM head 2 * 32000 * 4096: 6,738,149,376 (the "7B").
  EXPECT_EQ(m.total_params(), 6738149376);
  EXPECT_EQ(m.weight_bytes(), 2 * 6738149376);
}

TEST(ModelSpec, KvBytesPerTokenMatchPublishedFigures) {
  // vLLM paper (Kwon et al., SOSP'23, section 3): "the KV cache of a single token demands
  // 800 KB of space" for OPT-13B = 2 (K,V) * 5120 hidden * 40 layers * 2 bytes.
  EXPECT_EQ(resolve_model("opt-13b").kv_bytes_per_token(), 800 * 1024);
  // GQA: Llama-3-8B keeps 8 KV heads of 128: 2 * 32 * 8 * 128 * 2 = 128 KiB.
  EXPECT_EQ(resolve_model("llama-3-8b").kv_bytes_per_token(), 128 * 1024);
  // Llama-2-70B: 2 * 80 * 8 * 128 * 2 = 320 KiB.
  EXPECT_EQ(resolve_model("llama-2-70b").kv_bytes_per_token(), 320 * 1024);
}

TEST(HfConfig, ReadsLlamaStyleConfig) {
  const auto dir = testing::scratch_dir("hf_llama");
  // The keys of meta-llama/Meta-Llama-3-8B's config.json.
  const auto path = write_text_file(dir / "my-llama", "config.json", R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rope_theta": 500000.0, "torch_dtype": "bfloat16", "vocab_size": 128256 })");
  const ModelSpec m = load_hf_config(path);
  const ModelSpec builtin = resolve_model("llama-3-8b");
  EXPECT_EQ(m.name, "my-llama");  // no _name_or_path: the folder names it
  EXPECT_EQ(m.num_layers, builtin.num_layers);
  EXPECT_EQ(m.hidden_size, builtin.hidden_size);
  EXPECT_EQ(m.num_heads, builtin.num_heads);
  EXPECT_EQ(m.num_kv_heads, builtin.num_kv_heads);
  EXPECT_EQ(m.head_dim, builtin.head_dim);
  EXPECT_EQ(m.ffn_size, builtin.ffn_size);
  EXPECT_EQ(m.gated_mlp, builtin.gated_mlp);
  EXPECT_EQ(m.vocab_size, builtin.vocab_size);
  EXPECT_EQ(m.max_context_tokens, builtin.max_context_tokens);
  EXPECT_EQ(m.weight_format, WeightFormat::bf16);
  // resolve_model accepts the file and the folder holding it.
  EXPECT_EQ(resolve_model(path.string()).num_kv_heads, 8);
  EXPECT_EQ(resolve_model((dir / "my-llama").string()).ffn_size, 14336);
}

TEST(HfConfig, ExplicitHeadDimAndMissingKvHeads) {
  const auto dir = testing::scratch_dir("hf_headdim");
  // Gemma-style: head_dim is not hidden / heads; no num_key_value_heads means MHA.
  const auto path = write_text_file(dir, "config.json", R"({
    "_name_or_path": "org/odd", "model_type": "gemma", "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 3072, "intermediate_size": 24576, "max_position_embeddings": 8192,
    "num_attention_heads": 16, "num_hidden_layers": 28, "head_dim": 256,
    "vocab_size": 256000, "torch_dtype": "float32" })");
  const ModelSpec m = load_hf_config(path);
  EXPECT_EQ(m.name, "org/odd");
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_EQ(m.num_kv_heads, 16);
  EXPECT_TRUE(m.gated_mlp);
  EXPECT_EQ(m.weight_format, WeightFormat::bf16);  // float32 checkpoints are served in fp16 (vLLM dtype auto)
}

TEST(HfConfig, ReadsOptConfig) {
  const auto dir = testing::scratch_dir("hf_opt");
  // The keys of facebook/opt-13b's config.json.
  const auto path = write_text_file(dir, "config.json", R"({
    "_name_or_path": "facebook/opt-13b", "activation_function": "relu", "model_type": "opt",
    "do_layer_norm_before": true, "ffn_dim": 20480, "hidden_size": 5120,
    "max_position_embeddings": 2048, "num_attention_heads": 40, "num_hidden_layers": 40,
    "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 5120 })");
  const ModelSpec m = load_hf_config(path);
  const ModelSpec builtin = resolve_model("opt-13b");
  EXPECT_EQ(m.name, "facebook/opt-13b");
  EXPECT_EQ(m.ffn_size, builtin.ffn_size);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.layer_gemm_params(), builtin.layer_gemm_params());
  EXPECT_EQ(m.kv_bytes_per_token(), builtin.kv_bytes_per_token());
}

TEST(HfConfig, ReadsGptNeoxAndGpt2Configs) {
  const auto dir = testing::scratch_dir("hf_neox");
  const auto neox = write_text_file(dir / "neox", "config.json", R"({
    "model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 2560,
    "intermediate_size": 10240, "max_position_embeddings": 2048, "num_attention_heads": 32,
    "num_hidden_layers": 32, "vocab_size": 50432 })");
  const ModelSpec n = load_hf_config(neox);
  EXPECT_FALSE(n.gated_mlp);
  EXPECT_EQ(n.head_dim, 80);
  EXPECT_EQ(n.ffn_size, 10240);
  // GPT-2 names its keys n_*; n_inner null means 4 * n_embd.
  const auto gpt2 = write_text_file(dir / "gpt2", "config.json", R"({
    "model_type": "gpt2", "activation_function": "gelu_new", "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_inner": null, "n_positions": 1024, "vocab_size": 50257 })");
  const ModelSpec g = load_hf_config(gpt2);
  EXPECT_EQ(g.num_layers, 12);
  EXPECT_EQ(g.ffn_size, 3072);
  EXPECT_EQ(g.max_context_tokens, 1024);
  EXPECT_FALSE(g.gated_mlp);
}

TEST(HfConfig, ErrorsNameTheFileAndKey) {
  const auto dir = testing::scratch_dir("hf_errors");
  const auto missing = write_text_file(dir, "missing.json", R"({"model_type": "llama",
    "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 11008,
    "vocab_size": 32000, "max_position_embeddings": 4096})");
  EXPECT_THAT(user_error_of([&] { load_hf_config(missing); }),
              AllOf(HasSubstr("missing.json"), HasSubstr("num_hidden_layers")));

  const auto wrong_type = write_text_file(dir, "wrong.json", R"({"model_type": "llama",
    "num_hidden_layers": "32", "hidden_size": 4096, "num_attention_heads": 32,
    "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096})");
  EXPECT_THAT(
      user_error_of([&] { load_hf_config(wrong_type); }),
      AllOf(HasSubstr("wrong.json"), HasSubstr("num_hidden_layers"), HasSubstr("must be an integer from 1 to")));

  const auto bad_gqa = write_text_file(dir, "gqa.json", R"({"num_hidden_layers": 2,
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 5,
    "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096})");
  EXPECT_THAT(user_error_of([&] { load_hf_config(bad_gqa); }),
              AllOf(HasSubstr("gqa.json"), HasSubstr("num_key_value_heads")));

  const auto not_json = write_text_file(dir, "broken.json", "{ \"hidden_size\": ");
  EXPECT_THAT(user_error_of([&] { load_hf_config(not_json); }),
              AllOf(HasSubstr("broken.json"), HasSubstr("not valid JSON")));

  EXPECT_THAT(user_error_of([&] { load_hf_config(dir / "absent.json"); }),
              AllOf(HasSubstr("absent.json"), HasSubstr("cannot open")));
}

TEST(ModelSpec, UnknownNameListsKnownModels) {
  EXPECT_THAT(user_error_of([] { resolve_model("llama-9-1t"); }),
              AllOf(HasSubstr("llama-9-1t"), HasSubstr("opt-13b"), HasSubstr("llama-3-70b"), HasSubstr("mistral-7b")));
}

}  // namespace
}  // namespace batchsim
