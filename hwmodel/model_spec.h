// batchsim — transformer model specifications.
//
// A ModelSpec holds the shapes the cost model needs: layers, hidden size, query and KV heads,
// head dimension, FFN size and whether the MLP is gated (SwiGLU: gate+up then down) or not
// (GeLU: up then down), vocabulary, the format of the weights and the bytes per KV element, and
// the maximum context. What varies from layer to layer is kept as counts, since the cost of a
// step is a sum over layers:
//   * attention: grouped-query (GQA; MHA and MQA are its extremes) or multi-head latent
//     attention (MLA, DeepSeek-V2/V3, Kimi K2: one compressed latent per token shared by every
//     head); layers that attend to the whole context, to a sliding window of the last tokens
//     (gpt-oss), or to a chunk of the context (Llama 4's chunked local attention);
//   * MLP: a mixture-of-experts (MoE) model replaces the MLP of its MoE layers by `num_experts`
//     routed experts of `ffn_size` each, of which every token runs `experts_per_token` (top-k),
//     plus optionally shared experts every token runs; its first (or interleaved) layers may
//     keep a dense MLP of `dense_ffn_size` (DeepSeek's first_k_dense_replace, Llama 4's
//     interleave_moe_layer_step).
// Built-in specs are named as `batchsim list models` prints them, and most are read from the
// published config.json shipped in hwmodel/models/ (SOURCES.md there); `load_hf_config` reads
// any Hugging Face `config.json` of the families it knows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/weight_format.h"

namespace batchsim {

// Bytes of everything that is neither a quantised weight nor the KV cache: activations, norms,
// residuals, all-reduce messages, and the layers vLLM leaves unquantised under
// `--quantization fp8` (embedding, LM head, MoE router: vllm/model_executor/layers/
// quantization/fp8.py quantises LinearBase and FusedMoE layers only; the Mixtral gate is a
// ReplicatedLinear built with quant_config=None).
inline constexpr int kActivationBytes = 2;

// How a layer's attention keeps its keys and values.
//   gqa  query heads in groups over num_kv_heads K and V heads of head_dim (MHA when equal,
//        MQA with one KV head); K and V of every head are cached.
//   mla  multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, section 2.1): one latent of
//        kv_lora_rank plus a shared RoPE key of qk_rope_head_dim per token is cached, and every
//        head's K and V are projected from it (vLLM MLAAttention: decode absorbs the projections
//        into the query and reads the latent as one KV head; prefill decompresses K and V).
enum class AttentionKind : uint8_t { gqa, mla };
std::string_view attention_kind_name(AttentionKind kind);  // "gqa", "mla"

struct ModelSpec {
  std::string name;
  // The Hugging Face repository a built-in's shapes come from ("meta-llama/Llama-3.1-8B-Instruct");
  // resolve_model accepts it for the built-in. Empty for models read from a config.json.
  std::string hf_id;
  int num_layers = 0;
  int hidden_size = 0;   // d_model
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // == num_heads without GQA/MQA
  int head_dim = 0;      // usually hidden_size / num_heads
  // Intermediate size of the MLP; in an MoE model, of ONE routed expert (Mixtral's
  // intermediate_size, Qwen2-MoE's moe_intermediate_size).
  int ffn_size = 0;
  bool gated_mlp = false;  // SwiGLU-style gate+up projection (Llama, Mistral, their MoEs)
  int vocab_size = 0;
  // The format of the quantisable layers' weights (attention projections, dense MLPs, shared
  // experts) and of the routed experts' (gpt-oss: mxfp4 experts, 16-bit attention). Embedding,
  // LM head and router stay at kActivationBytes.
  WeightFormat weight_format = WeightFormat::bf16;
  WeightFormat expert_weight_format = WeightFormat::bf16;
  int kv_dtype_bytes = 2;      // bytes per K/V cache element: 2, or 1 (--kv-cache-dtype fp8)
  int max_context_tokens = 0;  // max_position_embeddings

  // Attention. With MLA, num_kv_heads is num_heads (every head has its own K and V after the
  // up-projection) and head_dim is the query/key head width, qk_nope_head_dim + qk_rope_head_dim.
  AttentionKind attention = AttentionKind::gqa;
  int q_lora_rank = 0;       // MLA: the query's compressed rank (0: queries projected directly)
  int kv_lora_rank = 0;      // MLA: the cached latent's width (512 in DeepSeek-V3)
  int qk_rope_head_dim = 0;  // MLA: the RoPE key shared by the heads (64)
  int qk_nope_head_dim = 0;  // MLA: each head's non-RoPE query/key width (128)
  int v_head_dim = 0;        // MLA: each head's value width (128)
  // Layers whose attention sees only the last `sliding_window` tokens (gpt-oss layer_types
  // "sliding_attention", window 128), and layers that see only their chunk of
  // `attention_chunk_size` tokens (Llama 4's RoPE layers, 8192); the other layers see the whole
  // context. 0 layers: none.
  int sliding_window_layers = 0;
  int sliding_window = 0;
  int chunked_attention_layers = 0;
  int attention_chunk_size = 0;
  // gpt-oss's per-head learned softmax sink: a logit, no cached token (changes no cost).
  bool attention_sinks = false;
  // MiniMax-M2's RMSNorm of q and of k over all heads at once: under TP each rank holds some
  // heads, so every attention layer all-reduces each token's two partial variances.
  bool qk_norm_across_heads = false;

  // Mixture of experts. num_experts 0 or 1 is a dense model and the fields below are unused.
  int num_experts = 0;        // routed experts per layer (Mixtral num_local_experts)
  int experts_per_token = 0;  // top-k (num_experts_per_tok)
  // Intermediate size of the shared expert(s) every token runs besides its routed ones, summed
  // over them (Qwen2-MoE shared_expert_intermediate_size; DeepSeek would be n_shared_experts *
  // moe_intermediate_size); 0 = none. Gated like the routed experts.
  int shared_expert_ffn_size = 0;
  // Layers of an MoE model that keep a dense MLP of dense_ffn_size (DeepSeek-V3: the first 3 of
  // 61, 18432 wide; Llama 4 Maverick: every other layer); the other layers are MoE.
  int dense_layers = 0;
  int dense_ffn_size = 0;

  bool is_moe() const { return num_experts > 1; }
  bool is_mla() const { return attention == AttentionKind::mla; }
  // Layers whose MLP is the experts: all of them for a dense-free MoE model, none for a dense one.
  int moe_layers() const { return is_moe() ? num_layers - dense_layers : 0; }
  int full_attention_layers() const { return num_layers - sliding_window_layers - chunked_attention_layers; }
  // KV elements one token caches in one layer, over all KV heads: 2 x kv_heads x head_dim (K and
  // V), or for MLA the latent and the RoPE key, kv_lora_rank + qk_rope_head_dim (576).
  int64_t kv_elements_per_token_layer() const;
  // Bytes of one token's KV in one layer at kv_dtype_bytes. MLA's FP8 cache is FlashMLA's
  // "fp8 with scale" layout: the latent in FP8, one FP32 scale per 128 of it, the RoPE key in
  // 16-bit (656 bytes for DeepSeek-V3; FlashMLA README, vLLM's fp8_ds_mla).
  double kv_bytes_per_token_layer() const;

  // Parameters in one transformer layer's GEMMs: QKV, O and the MLP (up[/gate], down); for an
  // MoE layer, the router and every expert (routed and shared).
  int64_t layer_gemm_params() const;
  // All parameters: layers, embedding and LM head (counted separately even when tied, since
  // both are read: the embedding row gather is negligible, the LM head GEMM is not). Includes
  // every expert: this is what must fit in memory.
  int64_t total_params() const;
  // Parameters one token runs through: an MoE layer counts the router, experts_per_token routed
  // experts and the shared expert. Equals total_params() for a dense model. FLOPs per token are
  // about 2 x this (Mixtral 8x7B: 46.7B total, 12.9B active; Jiang et al. 2024, section 2.1).
  int64_t active_params() const;
  // Total weight memory: quantisable parameters at dtype_bytes, the rest (embedding, LM head,
  // router) at kActivationBytes.
  int64_t weight_bytes() const;
  // The routed experts' share of weight_bytes(): what expert parallelism shards.
  double routed_expert_weight_bytes() const;
  // K and V (or MLA's latent) of one token across all layers, at kv_dtype_bytes; a layer with a
  // sliding window or a chunk counts too (what one token costs while it is in the window).
  int64_t kv_bytes_per_token() const;
  // The format's name when every quantisable layer shares it, else "ATTN+EXPERTS"
  // ("bf16+mxfp4"): what `list models` and messages print.
  std::string weight_format_text() const;
};

// Built-in specs, sorted by name.
const std::vector<ModelSpec>& builtin_models();
// A built-in spec by name, or a Hugging Face config.json when `name_or_path` names a file.
// Throws UserError listing the known names for an unknown one.
ModelSpec resolve_model(std::string_view name_or_path);
// Reads a Hugging Face config.json (Llama, Mistral, OPT, GPT-NeoX-style keys; Mixtral and
// Qwen2-MoE experts; quantization_config fp8). Throws UserError naming the file and the
// missing or unsupported key.
ModelSpec load_hf_config(const std::filesystem::path& path);

// Bytes per element of a dtype as vLLM's --dtype / --quantization / --kv-cache-dtype spell it:
// "bf16", "bfloat16", "fp16", "float16", "half" -> 2; "fp8", "fp8_e4m3", "fp8_e5m2" -> 1;
// "auto" -> 0, meaning "keep the model's" (vLLM: the checkpoint's dtype). `option` names the
// option in the UserError for anything else (e.g. "--kv-cache-dtype").
int parse_dtype_bytes(std::string_view text, std::string_view option);
// A weight dtype as --weight-dtype spells it: "auto" (nullopt: the checkpoint's formats) or a
// weight format's name (parse_weight_format).
std::optional<WeightFormat> parse_weight_dtype(std::string_view text, std::string_view option);
// `model` with every quantisable layer's weights in `weights` (nullopt: keep the model's) and a
// KV cache of `kv_bytes` per element: 1 or 2, or 0 to keep the model's value; anything else is a
// UserError. The name is kept: the run's config records the dtypes.
ModelSpec with_dtypes(ModelSpec model, std::optional<WeightFormat> weights, int kv_bytes);

}  // namespace batchsim
