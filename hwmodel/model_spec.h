// batchsim — transformer model specifications.
//
// A ModelSpec holds the shapes the cost model needs: layers, hidden size, query and KV heads,
// head dimension, FFN size and whether the MLP is gated (SwiGLU: gate+up then down) or not
// (GeLU: up then down), vocabulary, bytes per weight/KV element, and the maximum context.
// Built-in specs are named as `batchsim list models` prints them; `load_hf_config` reads a
// Hugging Face `config.json`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int hidden_size = 0;     // d_model
  int num_heads = 0;       // query heads
  int num_kv_heads = 0;    // == num_heads without GQA/MQA
  int head_dim = 0;        // usually hidden_size / num_heads
  int ffn_size = 0;        // intermediate size of the MLP
  bool gated_mlp = false;  // SwiGLU-style gate+up projection (Llama, Mistral)
  int vocab_size = 0;
  int dtype_bytes = 2;         // bytes per weight and per KV element (bf16/fp16 = 2)
  int max_context_tokens = 0;  // max_position_embeddings

  // Parameters in one transformer layer's four GEMMs (QKV, O, MLP up[/gate], down).
  int64_t layer_gemm_params() const;
  // All parameters: layers, embedding and LM head (counted separately even when tied, since
  // both are read: the embedding row gather is negligible, the LM head GEMM is not).
  int64_t total_params() const;
  int64_t weight_bytes() const { return total_params() * dtype_bytes; }
  // K and V for one token across all layers.
  int64_t kv_bytes_per_token() const;
};

// Built-in specs, sorted by name.
const std::vector<ModelSpec>& builtin_models();
// A built-in spec by name, or a Hugging Face config.json when `name_or_path` names a file.
// Throws UserError listing the known names for an unknown one.
ModelSpec resolve_model(std::string_view name_or_path);
// Reads a Hugging Face config.json (Llama, Mistral, OPT, GPT-NeoX-style keys). Throws
// UserError naming the file and the missing key.
ModelSpec load_hf_config(const std::filesystem::path& path);

}  // namespace batchsim
