// batchsim — transformer model specifications.
//
// A ModelSpec holds the shapes the cost model needs: layers, hidden size, query and KV heads,
// head dimension, FFN size and whether the MLP is gated (SwiGLU: gate+up then down) or not
// (GeLU: up then down), vocabulary, bytes per weight and per KV element, and the maximum
// context. A mixture-of-experts (MoE) model replaces every layer's MLP by `num_experts` routed
// experts of `ffn_size` each, of which every token runs `experts_per_token` (top-k), plus
// optionally a shared expert every token runs (Qwen2-MoE). Built-in specs are named as
// `batchsim list models` prints them; `load_hf_config` reads a Hugging Face `config.json`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

// Bytes of everything that is neither a quantised weight nor the KV cache: activations, norms,
// residuals, all-reduce messages, and the layers vLLM leaves unquantised under
// `--quantization fp8` (embedding, LM head, MoE router: vllm/model_executor/layers/
// quantization/fp8.py quantises LinearBase and FusedMoE layers only; the Mixtral gate is a
// ReplicatedLinear built with quant_config=None).
inline constexpr int kActivationBytes = 2;

struct ModelSpec {
  std::string name;
  // The Hugging Face repository a built-in's shapes come from ("meta-llama/Llama-3.1-8B-Instruct");
  // resolve_model accepts it for the built-in. Empty for models read from a config.json.
  std::string hf_id;
  int num_layers = 0;
  int hidden_size = 0;     // d_model
  int num_heads = 0;       // query heads
  int num_kv_heads = 0;    // == num_heads without GQA/MQA
  int head_dim = 0;        // usually hidden_size / num_heads
  // Intermediate size of the MLP; in an MoE model, of ONE routed expert (Mixtral's
  // intermediate_size, Qwen2-MoE's moe_intermediate_size).
  int ffn_size = 0;
  bool gated_mlp = false;  // SwiGLU-style gate+up projection (Llama, Mistral, their MoEs)
  int vocab_size = 0;
  // Bytes per weight of the quantisable layers (QKV, O, MLP/experts): 2 for bf16/fp16, 1 for
  // fp8 (vLLM --quantization fp8). Embedding, LM head and router stay at kActivationBytes.
  int dtype_bytes = 2;
  int kv_dtype_bytes = 2;      // bytes per K/V cache element: 2, or 1 (--kv-cache-dtype fp8)
  int max_context_tokens = 0;  // max_position_embeddings

  // Mixture of experts. num_experts 0 or 1 is a dense model and the fields below are unused.
  int num_experts = 0;        // routed experts per layer (Mixtral num_local_experts)
  int experts_per_token = 0;  // top-k (num_experts_per_tok)
  // Intermediate size of the shared expert(s) every token runs besides its routed ones, summed
  // over them (Qwen2-MoE shared_expert_intermediate_size; DeepSeek would be n_shared_experts *
  // moe_intermediate_size); 0 = none. Gated like the routed experts.
  int shared_expert_ffn_size = 0;

  bool is_moe() const { return num_experts > 1; }

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
  // K and V for one token across all layers, at kv_dtype_bytes.
  int64_t kv_bytes_per_token() const;
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
// `model` with weights of `weight_bytes` and a KV cache of `kv_bytes` per element: 1 or 2, or 0
// to keep the model's value; anything else is a UserError. The name is kept: the run's config
// records the dtypes.
ModelSpec with_dtypes(ModelSpec model, int weight_bytes, int kv_bytes);

}  // namespace batchsim
