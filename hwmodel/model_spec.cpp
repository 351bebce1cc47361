// batchsim — built-in model specs and the Hugging Face config.json reader.
#include "hwmodel/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "hwmodel/base/error.h"
#include "hwmodel/shipped_profiles.h"

namespace batchsim {

namespace {

// The parameter counts below are templates on the number type: int64_t for the exact counts,
// double for the range check of a config (check_model_size), which must not overflow on sizes
// no real model has.

// Weights of one MLP (or expert) of intermediate size `ffn`: up[/gate] and down.
template <typename T>
T mlp_params(const ModelSpec& m, T ffn) {
  return T(m.hidden_size) * ffn * T(m.gated_mlp ? 3 : 2);
}

// One layer's attention projections. GQA: QKV and O. MLA (vLLM DeepseekV2MLAAttention): the
// query's down (hidden x q_lora_rank) and up (q_lora_rank x heads x (nope + rope)) projections,
// or one hidden x heads x (nope + rope) without q_lora_rank; the KV down projection to the latent
// and the RoPE key (hidden x (kv_lora_rank + rope)); the latent's up projection to every head's
// K (nope) and V (kv_lora_rank x heads x (nope + v)); and O (heads x v x hidden).
template <typename T>
T attention_params(const ModelSpec& m) {
  const T d = T(m.hidden_size);
  if (m.is_mla()) {
    const T heads = T(m.num_heads);
    const T qk = T(m.qk_nope_head_dim + m.qk_rope_head_dim);
    const T q = m.q_lora_rank > 0 ? d * T(m.q_lora_rank) + T(m.q_lora_rank) * heads * qk : d * heads * qk;
    const T kv =
        d * T(m.kv_lora_rank + m.qk_rope_head_dim) + T(m.kv_lora_rank) * heads * T(m.qk_nope_head_dim + m.v_head_dim);
    return q + kv + heads * T(m.v_head_dim) * d;
  }
  const T q_dim = T(m.num_heads) * T(m.head_dim);
  const T kv_dim = T(m.num_kv_heads) * T(m.head_dim);
  return d * (q_dim + T(2) * kv_dim) + q_dim * d;
}

// The weights of the layers, split by the format they are stored in: attention, dense MLPs,
// the routers, the shared experts, and the routed experts with `routed_experts` of each MoE
// layer's experts counted (all of them for memory, top-k for what one token runs).
template <typename T>
struct LayerParams {
  T attention = 0, dense_mlp = 0, router = 0, shared = 0, routed = 0;
  T quantised_non_expert() const { return attention + dense_mlp + shared; }
  T all() const { return attention + dense_mlp + router + shared + routed; }
};
template <typename T>
LayerParams<T> layers_params(const ModelSpec& m, T routed_experts) {
  LayerParams<T> p;
  p.attention = T(m.num_layers) * attention_params<T>(m);
  if (!m.is_moe()) {
    p.dense_mlp = T(m.num_layers) * mlp_params<T>(m, T(m.ffn_size));
    return p;
  }
  const T moe_layers = T(m.moe_layers());
  p.dense_mlp = T(m.dense_layers) * mlp_params<T>(m, T(m.dense_ffn_size));
  p.router = moe_layers * T(m.hidden_size) * T(m.num_experts);
  p.shared = moe_layers * mlp_params<T>(m, T(m.shared_expert_ffn_size));
  p.routed = moe_layers * routed_experts * mlp_params<T>(m, T(m.ffn_size));
  return p;
}

// Embedding and LM head, counted separately even when tied (see the header).
template <typename T>
T embedding_params(const ModelSpec& m) {
  return T(2) * T(m.vocab_size) * T(m.hidden_size);
}

template <typename T>
T all_params(const ModelSpec& m) {
  // Norms and biases are < 0.1%.
  return layers_params<T>(m, T(m.num_experts)).all() + embedding_params<T>(m);
}

}  // namespace

std::string_view attention_kind_name(AttentionKind kind) { return kind == AttentionKind::mla ? "mla" : "gqa"; }

int64_t ModelSpec::layer_gemm_params() const {
  const auto p = layers_params<int64_t>(*this, num_experts);
  return num_layers > 0 ? p.all() / num_layers : 0;
}

int64_t ModelSpec::total_params() const { return all_params<int64_t>(*this); }

int64_t ModelSpec::active_params() const {
  return layers_params<int64_t>(*this, experts_per_token).all() + embedding_params<int64_t>(*this);
}

int64_t ModelSpec::weight_bytes() const {
  const auto p = layers_params<double>(*this, num_experts);
  const double bytes = p.quantised_non_expert() * weight_format_bytes(weight_format) +
                       p.routed * weight_format_bytes(expert_weight_format) +
                       (p.router + embedding_params<double>(*this)) * kActivationBytes;
  return static_cast<int64_t>(std::llround(bytes));
}

double ModelSpec::routed_expert_weight_bytes() const {
  return layers_params<double>(*this, num_experts).routed * weight_format_bytes(expert_weight_format);
}

int64_t ModelSpec::kv_elements_per_token_layer() const {
  if (is_mla()) return int64_t{kv_lora_rank} + qk_rope_head_dim;
  return 2 * int64_t{num_kv_heads} * head_dim;
}

double ModelSpec::kv_bytes_per_token_layer() const {
  if (is_mla() && kv_dtype_bytes == 1) {
    // FlashMLA's FP8 KV cache (deepseek-ai/FlashMLA README, "FP8 KV cache"; vLLM's fp8_ds_mla
    // spec): the latent in e4m3, one float32 scale per 128 latent values, the RoPE key in bf16.
    return kv_lora_rank + 4.0 * ((kv_lora_rank + 127) / 128) + 2.0 * qk_rope_head_dim;
  }
  return static_cast<double>(kv_elements_per_token_layer() * kv_dtype_bytes);
}

int64_t ModelSpec::kv_bytes_per_token() const {
  return static_cast<int64_t>(std::llround(num_layers * kv_bytes_per_token_layer()));
}

std::string ModelSpec::weight_format_text() const {
  if (!is_moe() || expert_weight_format == weight_format) return std::string(weight_format_name(weight_format));
  return fmt::format("{}+{}", weight_format_name(weight_format), weight_format_name(expert_weight_format));
}

namespace {

// Published configs: the `config.json` of each Hugging Face repository named in the comment.
ModelSpec spec(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn, bool gated, int vocab,
               int max_context) {
  ModelSpec m;
  m.name = std::move(name);
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_heads = heads;
  m.num_kv_heads = kv_heads;
  m.head_dim = hidden / heads;
  m.ffn_size = ffn;
  m.gated_mlp = gated;
  m.vocab_size = vocab;
  m.max_context_tokens = max_context;
  return m;
}

ModelSpec with_hf_id(ModelSpec m, std::string id) {
  m.hf_id = std::move(id);
  return m;
}

// For models whose heads are not hidden / heads wide (Qwen3: 64 x 128 > 5120).
ModelSpec with_head_dim(ModelSpec m, int head_dim) {
  m.head_dim = head_dim;
  return m;
}

// `dense` with its MLP replaced by `experts` routed experts of its ffn_size, top `top_k`, and a
// shared expert of `shared_ffn` (0: none).
ModelSpec moe(ModelSpec dense, int experts, int top_k, int shared_ffn = 0) {
  dense.num_experts = experts;
  dense.experts_per_token = top_k;
  dense.shared_expert_ffn_size = shared_ffn;
  return dense;
}

std::vector<ModelSpec> make_builtin_models() {
  std::vector<ModelSpec> models = {
      // facebook/opt-13b: ReLU MLP, ffn_dim = 4 * hidden, learned positions up to 2048.
      spec("opt-13b", 40, 5120, 40, 40, 20480, false, 50272, 2048),
      // meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf (70B uses GQA with 8 KV heads).
      spec("llama-2-7b", 32, 4096, 32, 32, 11008, true, 32000, 4096),
      spec("llama-2-13b", 40, 5120, 40, 40, 13824, true, 32000, 4096),
      spec("llama-2-70b", 80, 8192, 64, 8, 28672, true, 32000, 4096),
      // meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B: 128k vocabulary, GQA with 8 KV heads.
      spec("llama-3-8b", 32, 4096, 32, 8, 14336, true, 128256, 8192),
      spec("llama-3-70b", 80, 8192, 64, 8, 28672, true, 128256, 8192),
      // mistralai/Mistral-7B-v0.1: max_position_embeddings 32768 (sliding window 4096, which
      // this model does not represent: attention reads the whole context).
      spec("mistral-7b", 32, 4096, 32, 8, 14336, true, 32000, 32768),
      // The other models of Vidur's measurements (hwmodel/measured/vidur), so that
      // `batchsim validate` can cost whole iterations of them.
      // codellama/CodeLlama-34b-Instruct-hf
      spec("codellama-34b", 48, 8192, 64, 8, 22016, true, 32000, 16384),
      // internlm/internlm-20b
      spec("internlm-20b", 60, 5120, 40, 40, 13824, true, 103168, 4096),
      // Qwen/Qwen-72B: its config's intermediate_size 49152 counts gate and up together.
      spec("qwen-72b", 80, 8192, 64, 64, 24576, true, 152064, 32768),
      // microsoft/phi-2: GeLU MLP, not gated.
      spec("phi-2", 32, 2560, 32, 32, 10240, false, 51200, 2048),
      // Mixture of experts (SwiGLU experts; vLLM runs them with fused_moe).
      // mistralai/Mixtral-8x7B-v0.1: num_local_experts 8, num_experts_per_tok 2,
      // intermediate_size 14336 per expert, max_position_embeddings 32768. 46.7B parameters,
      // 12.9B active per token (Jiang et al. 2024, "Mixtral of Experts", section 2.1).
      moe(spec("mixtral-8x7b", 32, 4096, 32, 8, 14336, true, 32000, 32768), 8, 2),
      // mistralai/Mixtral-8x22B-Instruct-v0.1 (vocabulary 32768; the base v0.1 release had
      // 32000): 56 layers, 48 heads, 8 KV heads, 16384 per expert, 65536 positions.
      // 141B parameters, 39B active (Mistral AI's release notes).
      moe(spec("mixtral-8x22b", 56, 6144, 48, 8, 16384, true, 32768, 65536), 8, 2),
      // Qwen/Qwen1.5-MoE-A2.7B (named so that it fits `batchsim list models`' name column; it is
      // the only Qwen1.5 MoE): num_experts 60, num_experts_per_tok 4, moe_intermediate_size
      // 1408, shared_expert_intermediate_size 5632 (one shared expert, gated by a sigmoid whose
      // hidden x 1 weight is not counted), MHA with 16 heads, decoder_sparse_step 1 (every
      // layer MoE). 14.3B parameters, 2.7B active (the model card).
      moe(spec("qwen1.5-moe", 24, 2048, 16, 16, 1408, true, 151936, 8192), 60, 4, 5632),
      // meta-llama/Llama-3.1-8B-Instruct: Llama-3-8B's shapes with a 131,072-token context
      // (rope scaling). The model of NVIDIA's measured serving results (measured/aiconfigurator).
      with_hf_id(spec("llama-3.1-8b", 32, 4096, 32, 8, 14336, true, 128256, 131072),
                 "meta-llama/Llama-3.1-8B-Instruct"),
      // Qwen/Qwen3-32B: 64 layers, hidden 5120, 64 query heads of head_dim 128 (8192 wide, more
      // than the hidden size), 8 KV heads, intermediate 25600, vocabulary 151936, 40,960 positions.
      with_hf_id(with_head_dim(spec("qwen3-32b", 64, 5120, 64, 8, 25600, true, 151936, 40960), 128), "Qwen/Qwen3-32B"),
  };
  std::sort(models.begin(), models.end(), [](const ModelSpec& a, const ModelSpec& b) { return a.name < b.name; });
  return models;
}

std::string known_model_names() {
  std::string names;
  for (const auto& m : builtin_models()) names += (names.empty() ? "" : ", ") + m.name;
  return names;
}

// Upper bounds of a config's sizes, each far above every published model (Llama-3.1-405B: 126
// layers, hidden 16,384, FFN 53,248, 128 heads of 128; vocabularies to 256k; DeepSeek-V3 256
// experts), so that only a typo or a hostile file meets them. check_model_size bounds their
// product too, so that no size computed from them overflows 64 bits.
constexpr int kMaxLayers = 1024;
constexpr int kMaxHidden = 1 << 18;
constexpr int kMaxHeads = 1 << 14;
constexpr int kMaxHeadDim = 1 << 14;
constexpr int kMaxFfn = 1 << 22;
constexpr int kMaxVocab = 1 << 24;
constexpr int kMaxExperts = 1 << 16;
// 100 trillion parameters: fifty times the largest published model, and 1.6e14 weight bytes,
// far inside int64.
constexpr double kMaxParams = 1e14;

// Reads config.json values, naming the file and key in every error. `prefix` names the object
// holding the keys when it is nested ("ffn_config." for DBRX's).
class HfConfig {
 public:
  HfConfig(const nlohmann::json& j, const std::filesystem::path& path, std::string prefix = "")
      : j_(j), path_(path), prefix_(std::move(prefix)) {}

  // The first of `keys` present and not null, as an integer from 1 to `max`.
  std::optional<int> optional_int(std::initializer_list<const char*> keys, int max = std::numeric_limits<int>::max(),
                                  int min = 1) const {
    for (const char* key : keys) {
      auto it = j_.find(key);
      if (it == j_.end() || it->is_null()) continue;
      const bool in_range = it->is_number_unsigned()  ? it->get<uint64_t>() <= uint64_t(max)
                            : it->is_number_integer() ? it->get<int64_t>() <= int64_t{max}
                                                      : false;
      if (!in_range || !it->is_number_integer() || it->get<int64_t>() < min) {
        throw UserError(fmt::format("{}: key '{}{}' must be an integer from {} to {}, got {}", path_.string(), prefix_,
                                    key, min, max, it->dump()));
      }
      return it->get<int>();
    }
    return std::nullopt;
  }
  int required_int(std::initializer_list<const char*> keys, int max = std::numeric_limits<int>::max()) const {
    if (auto v = optional_int(keys, max)) return *v;
    std::string names;
    for (const char* key : keys) names += (names.empty() ? "'" : "' or '") + prefix_ + key;
    throw UserError(fmt::format("{}: missing key {}'", path_.string(), names));
  }
  std::string string_or(const char* key, std::string fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      throw UserError(fmt::format("{}: key '{}{}' must be a string, got {}", path_.string(), prefix_, key, it->dump()));
    }
    return it->get<std::string>();
  }
  // The object under `key`, read with this reader's rules; an error when it is not an object.
  HfConfig object(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_object()) {
      throw UserError(fmt::format("{}: key '{}{}' must be an object", path_.string(), prefix_, key));
    }
    return HfConfig(*it, path_, prefix_ + key + ".");
  }

 private:
  const nlohmann::json& j_;
  const std::filesystem::path& path_;
  std::string prefix_;
};

// Architectures whose MLP is gated (gate and up projections, then down): SwiGLU or GeGLU.
// Those known not to be (OPT, GPT-2, GPT-NeoX, Phi, Falcon, BLOOM) fall through to the
// activation rule, which gives them non-gated for relu/gelu.
bool is_gated(const std::string& model_type, const std::string& hidden_act) {
  static const char* const kGated[] = {"llama",    "mistral", "mixtral",  "qwen2",     "qwen3", "qwen",
                                       "gemma",    "gemma2",  "internlm", "internlm2", "yi",    "deepseek",
                                       "baichuan", "olmo",    "cohere",   "dbrx"};
  for (const char* t : kGated) {
    if (model_type == t) return true;
  }
  // Unknown architectures: SiLU is used gated in every current family (Llama's SwiGLU).
  return hidden_act == "silu" || hidden_act == "swish" || hidden_act == "swiglu";
}

// The number of `true` entries of a config's list of per-layer flags (Qwen's mlp_only_layers is
// a list of layer indices instead: see dense_layers_of). An error names a list that is not one,
// or of another length than the layers.
int count_layer_flags(const nlohmann::json& list, const std::filesystem::path& path, const std::string& key,
                      int layers) {
  if (!list.is_array() || static_cast<int>(list.size()) != layers) {
    throw UserError(
        fmt::format("{}: key '{}' must be a list of {} entries, one per layer", path.string(), key, layers));
  }
  int n = 0;
  for (const auto& v : list) {
    if (!v.is_number_integer() && !v.is_boolean()) {
      throw UserError(fmt::format("{}: key '{}' holds {}, not 0/1", path.string(), key, v.dump()));
    }
    n += v.is_boolean() ? (v.get<bool>() ? 1 : 0) : (v.get<int64_t>() != 0 ? 1 : 0);
  }
  return n;
}

// Layer indices listed in `key` (Qwen2/3-MoE mlp_only_layers), each checked to lie in [0, layers).
std::vector<int> layer_indices(const nlohmann::json& j, const std::filesystem::path& path, const std::string& key,
                               int layers) {
  std::vector<int> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) throw UserError(fmt::format("{}: key '{}' must be a list of layer indices", path.string(), key));
  for (const auto& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers) {
      throw UserError(fmt::format("{}: key '{}' holds {}, not a layer index from 0 to {}", path.string(), key, v.dump(),
                                  layers - 1));
    }
    out.push_back(v.get<int>());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Mixture-of-experts keys, by family (each family's transformers config class):
//   Mixtral (MixtralConfig): num_local_experts, num_experts_per_tok, intermediate_size per expert.
//   Qwen2-MoE / Qwen3-MoE (Qwen2MoeConfig, Qwen3MoeConfig): num_experts, num_experts_per_tok,
//     moe_intermediate_size per expert, shared_expert_intermediate_size; layers in
//     mlp_only_layers, and those with (layer + 1) % decoder_sparse_step != 0, keep a dense MLP of
//     intermediate_size (Qwen3MoeDecoderLayer).
//   DeepSeek-V2/V3, Kimi K2, GLM-4.5 (DeepseekV3Config, Glm4MoeConfig): n_routed_experts,
//     num_experts_per_tok, moe_intermediate_size, n_shared_experts of moe_intermediate_size each;
//     the first first_k_dense_replace layers dense (intermediate_size), and of the rest those
//     with layer % moe_layer_freq != 0 (DeepseekV3DecoderLayer).
//   gpt-oss (GptOssConfig): num_local_experts, num_experts_per_tok (or experts_per_token),
//     intermediate_size per expert; every layer MoE.
//   Llama 4 (Llama4TextConfig, under text_config): num_local_experts, num_experts_per_tok,
//     intermediate_size per expert plus one shared expert of the same size in every MoE layer;
//     MoE layers every interleave_moe_layer_step-th (layers step-1, 2 step-1, ..., or the list
//     moe_layers), the others dense of intermediate_size_mlp (Llama4TextDecoderLayer).
//   MiniMax-M2 (MiniMaxM2Config): num_local_experts, num_experts_per_tok, intermediate_size per
//     expert, shared_intermediate_size (0: none); every layer MoE.
void read_experts(const HfConfig& c, const nlohmann::json& j, const std::filesystem::path& path,
                  const std::string& model_type, ModelSpec& m) {
  const int experts = c.optional_int({"n_routed_experts", "num_local_experts", "num_experts"}, kMaxExperts).value_or(0);
  if (experts <= 1) return;          // one expert is a dense MLP
  const int dense_ffn = m.ffn_size;  // intermediate_size, before it becomes the expert's width
  m.num_experts = experts;
  m.experts_per_token = c.required_int({"num_experts_per_tok", "experts_per_token"}, kMaxExperts);
  if (m.experts_per_token > experts) {
    throw UserError(fmt::format("{}: key 'num_experts_per_tok' is {}, more than the {} experts", path.string(),
                                m.experts_per_token, experts));
  }
  if (auto per_expert = c.optional_int({"moe_intermediate_size"}, kMaxFfn)) m.ffn_size = *per_expert;
  if (auto n_shared = c.optional_int({"n_shared_experts"}, kMaxExperts, 0)) {
    m.shared_expert_ffn_size = *n_shared * m.ffn_size;
  } else {
    m.shared_expert_ffn_size =
        c.optional_int({"shared_expert_intermediate_size", "shared_intermediate_size"}, kMaxFfn, 0).value_or(0);
  }
  const int layers = m.num_layers;
  if (j.contains("first_k_dense_replace") || j.contains("moe_layer_freq")) {
    const int first = c.optional_int({"first_k_dense_replace"}, kMaxLayers, 0).value_or(0);
    const int freq = c.optional_int({"moe_layer_freq"}, kMaxLayers).value_or(1);
    if (first > layers) {
      throw UserError(
          fmt::format("{}: key 'first_k_dense_replace' is {}, more than the {} layers", path.string(), first, layers));
    }
    int moe = 0;
    for (int l = first; l < layers; ++l) moe += l % freq == 0 ? 1 : 0;
    m.dense_layers = layers - moe;
    m.dense_ffn_size = dense_ffn;
  } else if (model_type == "llama4_text") {
    m.shared_expert_ffn_size = m.ffn_size;  // Llama4TextMoe: one shared expert of intermediate_size
    const int step = c.optional_int({"interleave_moe_layer_step"}, kMaxLayers).value_or(1);
    std::vector<int> moe_list = layer_indices(j, path, "moe_layers", layers);
    const int moe = !moe_list.empty() ? static_cast<int>(moe_list.size()) : layers / step;
    m.dense_layers = layers - moe;
    m.dense_ffn_size = c.optional_int({"intermediate_size_mlp"}, kMaxFfn).value_or(dense_ffn);
  } else {
    // Qwen2/3-MoE.
    const int step = c.optional_int({"decoder_sparse_step"}, kMaxLayers).value_or(1);
    const std::vector<int> dense_list = layer_indices(j, path, "mlp_only_layers", layers);
    int moe = 0;
    for (int l = 0; l < layers; ++l) {
      const bool listed = std::binary_search(dense_list.begin(), dense_list.end(), l);
      moe += !listed && (l + 1) % step == 0 ? 1 : 0;
    }
    m.dense_layers = layers - moe;
    m.dense_ffn_size = dense_ffn;
  }
  if (m.dense_layers > 0 && m.dense_ffn_size <= 0) {
    throw UserError(fmt::format("{}: {} dense layers but no dense intermediate_size", path.string(), m.dense_layers));
  }
  if (m.dense_layers == layers) {
    throw UserError(fmt::format("{}: every layer is dense by the config's layer keys, though it names {} experts",
                                path.string(), experts));
  }
}

// Multi-head latent attention (DeepseekV3Config: q_lora_rank (null: none), kv_lora_rank,
// qk_rope_head_dim, qk_nope_head_dim, v_head_dim). The query/key head is nope + rope wide.
void read_mla(const HfConfig& c, ModelSpec& m) {
  m.attention = AttentionKind::mla;
  m.q_lora_rank = c.optional_int({"q_lora_rank"}, kMaxHidden).value_or(0);
  m.kv_lora_rank = c.required_int({"kv_lora_rank"}, kMaxHidden);
  m.qk_rope_head_dim = c.required_int({"qk_rope_head_dim"}, kMaxHeadDim);
  m.qk_nope_head_dim = c.required_int({"qk_nope_head_dim"}, kMaxHeadDim);
  m.v_head_dim = c.required_int({"v_head_dim"}, kMaxHeadDim);
  m.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  m.num_kv_heads = m.num_heads;  // after the latent's up-projection every head has its own K, V
}

// Layers that see less than the whole context.
//   gpt-oss: layer_types "sliding_attention" layers keep sliding_window tokens (vLLM
//     gpt_oss.py: the window on layer_types' sliding layers), and every head has a learned sink.
//   Mistral-style sliding_window on every layer (use_sliding_window, Qwen2) is not read: vLLM
//     serves those models with full attention unless the window is below the context it runs.
//   Llama 4: RoPE layers (no_rope_layers[l] == 1; an empty list means the default, every layer
//     but each fourth) attend within their chunk of attention_chunk_size tokens
//     (Llama4TextAttention: attention_type "chunked_attention" where use_rope).
void read_attention_span(const HfConfig& c, const nlohmann::json& j, const std::filesystem::path& path,
                         const std::string& model_type, ModelSpec& m) {
  const int layers = m.num_layers;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int>(it->size()) != layers) {
      throw UserError(fmt::format("{}: key 'layer_types' must be a list of {} entries", path.string(), layers));
    }
    int sliding = 0;
    for (const auto& v : *it) {
      if (!v.is_string()) throw UserError(fmt::format("{}: key 'layer_types' holds {}", path.string(), v.dump()));
      const std::string type = v.get<std::string>();
      if (type == "sliding_attention") {
        ++sliding;
      } else if (type != "full_attention") {
        throw UserError(
            fmt::format("{}: key 'layer_types' holds '{}' (full_attention or sliding_attention)", path.string(), type));
      }
    }
    if (sliding > 0) {
      m.sliding_window_layers = sliding;
      m.sliding_window = c.required_int({"sliding_window"}, std::numeric_limits<int>::max());
    }
  }
  if (model_type == "gpt_oss") m.attention_sinks = true;
  // vLLM's MiniMaxM2Attention normalises q and k over every head (MiniMaxText01RMSNormTP,
  // whatever use_qk_norm says), its variance summed over the TP ranks
  // (vllm/model_executor/layers/mamba/linear_attn.py, forward_qk).
  if (model_type == "minimax_m2") m.qk_norm_across_heads = true;
  if (model_type == "llama4_text") {
    if (auto chunk = c.optional_int({"attention_chunk_size"})) {
      int rope_layers = 0;
      auto it = j.find("no_rope_layers");
      if (it == j.end() || it->is_null() || (it->is_array() && it->empty())) {
        for (int l = 0; l < layers; ++l) rope_layers += (l + 1) % 4 != 0 ? 1 : 0;
      } else {
        rope_layers = count_layer_flags(*it, path, "no_rope_layers", layers);
      }
      m.chunked_attention_layers = rope_layers;
      m.attention_chunk_size = *chunk;
    }
  }
}

// Llama-, Mistral-, Qwen-, OPT-, GPT-NeoX- and GPT-2-style keys, then the experts, MLA and
// the attention spans of the families above.
void read_shapes(const HfConfig& c, const nlohmann::json& j, const std::filesystem::path& path,
                 const std::string& model_type, ModelSpec& m) {
  // GPT-2 style names (n_layer, n_embd, n_head, n_inner, n_positions) are the aliases.
  m.num_layers = c.required_int({"num_hidden_layers", "n_layer", "num_layers"}, kMaxLayers);
  m.hidden_size = c.required_int({"hidden_size", "n_embd", "d_model"}, kMaxHidden);
  m.num_heads = c.required_int({"num_attention_heads", "n_head"}, kMaxHeads);
  m.num_kv_heads = c.optional_int({"num_key_value_heads", "num_kv_heads"}, kMaxHeads).value_or(m.num_heads);
  m.head_dim = c.optional_int({"head_dim"}, kMaxHeadDim).value_or(m.hidden_size / m.num_heads);
  if (m.head_dim == 0) {
    throw UserError(
        fmt::format("{}: hidden_size {} is smaller than num_attention_heads {}, so "
                    "head_dim (hidden_size / heads) would be 0; give key 'head_dim'",
                    path.string(), m.hidden_size, m.num_heads));
  }
  const std::string hidden_act = c.string_or("hidden_act", c.string_or("activation_function", ""));
  // OPT names its FFN size ffn_dim; GPT-2 n_inner (null means 4 * n_embd).
  m.ffn_size = c.optional_int({"intermediate_size", "ffn_dim", "n_inner"}, kMaxFfn)
                   .value_or(model_type == "gpt2" ? 4 * m.hidden_size : 0);
  if (m.ffn_size == 0) m.ffn_size = c.required_int({"intermediate_size", "ffn_dim"}, kMaxFfn);
  m.gated_mlp = is_gated(model_type, hidden_act);
  m.vocab_size = c.required_int({"vocab_size"}, kMaxVocab);
  m.max_context_tokens = c.required_int({"max_position_embeddings", "n_positions", "max_sequence_length"});
  if (j.contains("kv_lora_rank")) read_mla(c, m);
  read_experts(c, j, path, model_type, m);
  read_attention_span(c, j, path, model_type, m);
}

// DBRX (databricks/dbrx-base config.json, transformers DbrxConfig) names its shapes
// differently: d_model, n_heads, n_layers, max_seq_len at the top, the KV heads in
// attn_config.kv_n_heads, and GLU experts (gated, SiLU) in ffn_config: ffn_hidden_size per
// expert, moe_num_experts, moe_top_k.
void read_dbrx(const HfConfig& c, const std::filesystem::path& path, ModelSpec& m) {
  m.num_layers = c.required_int({"n_layers"}, kMaxLayers);
  m.hidden_size = c.required_int({"d_model"}, kMaxHidden);
  m.num_heads = c.required_int({"n_heads"}, kMaxHeads);
  m.num_kv_heads = c.object("attn_config").optional_int({"kv_n_heads"}, kMaxHeads).value_or(m.num_heads);
  m.head_dim = m.hidden_size / m.num_heads;
  if (m.head_dim == 0) {
    throw UserError(
        fmt::format("{}: d_model {} is smaller than n_heads {}", path.string(), m.hidden_size, m.num_heads));
  }
  m.vocab_size = c.required_int({"vocab_size"}, kMaxVocab);
  m.max_context_tokens = c.required_int({"max_seq_len"});
  m.gated_mlp = true;
  const HfConfig ffn = c.object("ffn_config");
  m.ffn_size = ffn.required_int({"ffn_hidden_size"}, kMaxFfn);
  m.num_experts = ffn.required_int({"moe_num_experts"}, kMaxExperts);
  m.experts_per_token = ffn.required_int({"moe_top_k"}, kMaxExperts);
  if (m.experts_per_token > m.num_experts) {
    throw UserError(fmt::format("{}: key 'ffn_config.moe_top_k' is {}, more than the {} experts", path.string(),
                                m.experts_per_token, m.num_experts));
  }
  if (m.num_experts == 1) m.num_experts = m.experts_per_token = 0;  // one expert: dense
}

// The weight formats quantization_config says, for the non-expert layers and the experts:
//   fp8 (vLLM's Fp8Config; AutoFP8, llm-compressor, DeepSeek-V3, MiniMax-M2): fp8, or fp8_block
//     with weight_block_size (one scale per block, DeepSeek's [128, 128]); fbgemm_fp8 (Meta's
//     Llama 3.1 405B FP8): fp8;
//   mxfp4 (gpt-oss): the experts in MXFP4, the layers named in modules_to_not_convert
//     (attention, router, embedding, LM head) 16-bit (vLLM quantization/mxfp4.py quantises
//     FusedMoE only);
//   modelopt with quant_algo FP8 or NVFP4 (NVIDIA's Model Optimizer checkpoints): fp8, or
//     nvfp4 with the attention 16-bit where exclude_modules names self_attn.
// Layers vLLM never quantises (embedding, LM head, MoE router) stay 16-bit in every case. Other
// methods (GPTQ, AWQ, bitsandbytes, compressed-tensors INT8/INT4, ...) change the kernels in
// ways this cost model does not represent, so they are an error naming the key. Returns
// nullopt without a quantization_config.
struct QuantizedFormats {
  WeightFormat non_expert, experts;
};
std::optional<QuantizedFormats> quantized_formats(const nlohmann::json& j, const std::filesystem::path& path) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return std::nullopt;
  const char* key = "quantization_config.quant_method";
  if (!it->is_object()) {
    throw UserError(fmt::format("{}: key 'quantization_config' must be an object, got {}", path.string(), it->dump()));
  }
  auto method = it->find("quant_method");
  if (method == it->end() || !method->is_string()) {
    throw UserError(fmt::format("{}: key '{}' is missing or not a string", path.string(), key));
  }
  // Whether a list of module patterns names the attention ("model.layers.*.self_attn").
  auto names_attention = [&](const char* list_key) {
    auto list = it->find(list_key);
    if (list == it->end() || !list->is_array()) return false;
    return std::any_of(list->begin(), list->end(), [](const nlohmann::json& v) {
      return v.is_string() && v.get<std::string>().find("self_attn") != std::string::npos;
    });
  };
  const std::string name = method->get<std::string>();
  if (name == "fp8") {
    auto block = it->find("weight_block_size");
    const bool blocked = block != it->end() && !block->is_null();
    const WeightFormat f = blocked ? WeightFormat::fp8_block : WeightFormat::fp8;
    return QuantizedFormats{f, f};
  }
  if (name == "fbgemm_fp8") return QuantizedFormats{WeightFormat::fp8, WeightFormat::fp8};
  if (name == "mxfp4") {
    return QuantizedFormats{names_attention("modules_to_not_convert") ? WeightFormat::bf16 : WeightFormat::mxfp4,
                            WeightFormat::mxfp4};
  }
  if (name == "modelopt") {
    auto algo = it->find("quant_algo");
    const std::string a = algo != it->end() && algo->is_string() ? algo->get<std::string>() : "";
    if (a == "FP8") return QuantizedFormats{WeightFormat::fp8, WeightFormat::fp8};
    if (a == "NVFP4") {
      return QuantizedFormats{names_attention("exclude_modules") ? WeightFormat::bf16 : WeightFormat::nvfp4,
                              WeightFormat::nvfp4};
    }
    throw UserError(fmt::format("{}: key 'quantization_config.quant_algo' has unsupported value '{}' (FP8, NVFP4)",
                                path.string(), a));
  }
  throw UserError(
      fmt::format("{}: key '{}' has unsupported value '{}' (supported: fp8, fbgemm_fp8, mxfp4, modelopt; 16-bit "
                  "checkpoints have no quantization_config)",
                  path.string(), key, name));
}

// The name a config.json gives its model: `_name_or_path` when it has one (the Hugging Face id it
// was saved from); else, for a file named config.json, its folder (the layout of a Hugging Face
// snapshot, `Llama-3-8B/config.json`); else the file's own name (`configs/llama-3-8b.json` is
// "llama-3-8b", not "configs").
std::string model_name_of_config(const std::string& name_or_path, const std::filesystem::path& path) {
  if (!name_or_path.empty()) return name_or_path;
  const std::filesystem::path absolute = std::filesystem::absolute(path);
  if (absolute.filename() == "config.json" && !absolute.parent_path().filename().empty()) {
    return absolute.parent_path().filename().string();
  }
  return path.stem().string();
}

// Each size is bounded on its own (kMax*); their product too, computed in floating point so that
// it cannot wrap: a config whose weights wrap to a small int64 would "fit" on any GPU.
void check_model_size(const ModelSpec& m, const std::filesystem::path& path) {
  const double params = all_params<double>(m);
  if (params > kMaxParams) {
    throw UserError(fmt::format(
        "{}: the sizes give {:.3g} parameters, more than any real model ({:g}): check "
        "num_hidden_layers ({}), hidden_size ({}), intermediate_size ({}), the expert count ({}) "
        "and vocab_size ({})",
        path.string(), params, kMaxParams, m.num_layers, m.hidden_size, m.ffn_size, m.num_experts, m.vocab_size));
  }
}

}  // namespace

namespace {

// A parsed config.json (`path` names it in errors: a file, or a built-in's shipped file).
ModelSpec model_from_hf_json(const nlohmann::json& j, const std::filesystem::path& path) {
  if (!j.is_object()) throw UserError(fmt::format("{}: expected a JSON object", path.string()));
  const HfConfig top(j, path);
  // Llama 4 (Llama4Config) keeps the language model's keys under text_config.
  const bool nested = j.contains("text_config") && j.at("text_config").is_object();
  const nlohmann::json& text = nested ? j.at("text_config") : j;
  const HfConfig c = nested ? top.object("text_config") : top;

  ModelSpec m;
  const std::string model_type = c.string_or("model_type", top.string_or("model_type", ""));
  if (model_type == "dbrx") {
    read_dbrx(c, path, m);
  } else {
    read_shapes(c, text, path, model_type, m);
  }
  if (m.num_heads % m.num_kv_heads != 0) {
    throw UserError(
        fmt::format("{}: num_attention_heads {} is not a multiple of "
                    "num_key_value_heads {}",
                    path.string(), m.num_heads, m.num_kv_heads));
  }
  // vLLM's dtype "auto" serves float32 checkpoints in float16
  // (vllm/config.py, _get_and_verify_dtype), so every floating dtype costs 2 bytes here.
  // Newer transformers write `dtype` where older ones wrote `torch_dtype`.
  const std::string dtype = top.string_or("torch_dtype", top.string_or("dtype", c.string_or("torch_dtype", "float16")));
  if (dtype != "float16" && dtype != "bfloat16" && dtype != "float32") {
    throw UserError(
        fmt::format("{}: key 'torch_dtype' has unsupported value '{}' "
                    "(float16, bfloat16 or float32)",
                    path.string(), dtype));
  }
  m.weight_format = m.expert_weight_format = WeightFormat::bf16;
  m.kv_dtype_bytes = 2;  // vLLM's --kv-cache-dtype auto: the activations' 16-bit dtype
  if (const auto q = quantized_formats(j, path)) {
    m.weight_format = q->non_expert;
    m.expert_weight_format = m.is_moe() ? q->experts : q->non_expert;
  }
  m.name = model_name_of_config(top.string_or("_name_or_path", ""), path);
  check_model_size(m, path);
  return m;
}

}  // namespace

ModelSpec load_hf_config(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw UserError(fmt::format("{}: cannot open model config", path.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e400).
    throw UserError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
  return model_from_hf_json(j, path);
}

namespace {

// Built-ins read from the published config.json shipped in hwmodel/models/ (SOURCES.md there
// says where each file comes from): the name `batchsim list models` prints, the file (whose name
// is the Hugging Face id with "--" for "/"), and for a checkpoint that differs from the file
// only in its weights, the id and formats of that checkpoint.
struct ShippedModel {
  const char* name;
  const char* file;
  const char* hf_id = nullptr;  // nullptr: the file's
  std::optional<WeightFormat> formats{};
};
const ShippedModel kShippedModels[] = {
    {"deepseek-v3", "deepseek-ai--DeepSeek-V3.json"},
    {"deepseek-r1", "deepseek-ai--DeepSeek-R1.json"},
    {"kimi-k2", "moonshotai--Kimi-K2-Instruct.json"},
    {"qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B.json"},
    {"qwen3-235b-a22b", "Qwen--Qwen3-235B-A22B.json"},
    // Qwen/Qwen3-235B-A22B-FP8: the same model in DeepSeek-style 128 x 128 block FP8 (its
    // config's quantization_config: quant_method fp8, weight_block_size [128, 128]); the
    // checkpoint of NVIDIA's measured MoE serving rows.
    {"qwen3-235b-a22b-fp8", "Qwen--Qwen3-235B-A22B.json", "Qwen/Qwen3-235B-A22B-FP8", WeightFormat::fp8_block},
    {"gpt-oss-20b", "openai--gpt-oss-20b.json"},
    {"gpt-oss-120b", "openai--gpt-oss-120b.json"},
    {"glm-4.5", "zai-org--GLM-4.5.json"},
    {"glm-4.5-air", "zai-org--GLM-4.5-Air.json"},
    {"llama-4-scout", "meta-llama--Llama-4-Scout-17B-16E-Instruct.json"},
    {"llama-4-maverick", "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json"},
    {"minimax-m2", "MiniMaxAI--MiniMax-M2.json"},
    {"minimax-m2.5", "MiniMaxAI--MiniMax-M2.5.json"},
    {"minimax-m2.7", "MiniMaxAI--MiniMax-M2.7.json"},
    {"llama-3.1-70b", "meta-llama--Llama-3.1-70B-Instruct.json"},
};

ModelSpec shipped_model(const ShippedModel& s) {
  for (std::size_t i = 0; i < detail::kNumShippedModels; ++i) {
    if (std::string_view(detail::kShippedModels[i].file_name) != s.file) continue;
    const std::filesystem::path where = std::filesystem::path("hwmodel/models") / s.file;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(detail::kShippedModels[i].yaml);
    } catch (const nlohmann::json::exception& e) {
      throw std::logic_error(fmt::format("{}: shipped config is not JSON ({})", where.string(), e.what()));
    }
    ModelSpec m = model_from_hf_json(j, where);
    m.name = s.name;
    std::string id = s.file;
    id = id.substr(0, id.size() - 5);  // ".json"
    id.replace(id.find("--"), 2, "/");
    m.hf_id = s.hf_id != nullptr ? s.hf_id : id;
    if (s.formats) m.weight_format = m.expert_weight_format = *s.formats;
    return m;
  }
  throw std::logic_error(fmt::format("hwmodel/models/{}: not compiled in (hwmodel/CMakeLists.txt)", s.file));
}

}  // namespace

const std::vector<ModelSpec>& builtin_models() {
  static const std::vector<ModelSpec> models = [] {
    std::vector<ModelSpec> all = make_builtin_models();
    for (const ShippedModel& s : kShippedModels) all.push_back(shipped_model(s));
    std::sort(all.begin(), all.end(), [](const ModelSpec& a, const ModelSpec& b) { return a.name < b.name; });
    return all;
  }();
  return models;
}

ModelSpec resolve_model(std::string_view name_or_path) {
  for (const auto& m : builtin_models()) {
    if (m.name == name_or_path || (!m.hf_id.empty() && m.hf_id == name_or_path)) return m;
  }
  // A base checkpoint and its instruction tune share the architecture (their config.json differ
  // in nothing the cost model reads: meta-llama/Llama-3.1-8B and -Instruct).
  for (const auto& m : builtin_models()) {
    if (!m.hf_id.empty() && m.hf_id == std::string(name_or_path) + "-Instruct") return m;
  }
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return load_hf_config(path);
  if (std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(path / "config.json", ec)) {
    return load_hf_config(path / "config.json");
  }
  throw UserError(fmt::format("unknown model '{}': not a built-in model ({}) nor a config.json", name_or_path,
                              known_model_names()));
}

int parse_dtype_bytes(std::string_view text, std::string_view option) {
  for (const char* two : {"bf16", "bfloat16", "fp16", "float16", "half"}) {
    if (text == two) return 2;
  }
  // vLLM's fp8 KV cache stores e4m3 or e5m2 (--kv-cache-dtype fp8, fp8_e4m3, fp8_e5m2); its
  // --quantization fp8 stores e4m3 weights. Both are one byte.
  for (const char* one : {"fp8", "fp8_e4m3", "fp8_e5m2"}) {
    if (text == one) return 1;
  }
  if (text == "auto") return 0;
  throw UserError(
      fmt::format("{}: unknown dtype '{}' (auto, bf16, bfloat16, fp16, float16, half, fp8, fp8_e4m3, "
                  "fp8_e5m2)",
                  option, text));
}

std::optional<WeightFormat> parse_weight_dtype(std::string_view text, std::string_view option) {
  if (text == "auto") return std::nullopt;
  try {
    return parse_weight_format(text, option);
  } catch (const UserError&) {
    throw UserError(
        fmt::format("{}: unknown dtype '{}' (auto, bf16, bfloat16, fp16, float16, half, fp8, "
                    "fp8-block, mxfp4, nvfp4)",
                    option, text));
  }
}

ModelSpec with_dtypes(ModelSpec model, std::optional<WeightFormat> weights, int kv_bytes) {
  if (kv_bytes != 0 && kv_bytes != 1 && kv_bytes != 2) {
    throw UserError(fmt::format("model '{}': KV cache bytes per element must be 1 (fp8) or 2 (bf16/fp16), got {}",
                                model.name, kv_bytes));
  }
  // vLLM --quantization quantises every linear and fused-MoE layer alike.
  if (weights) model.weight_format = model.expert_weight_format = *weights;
  if (kv_bytes != 0) model.kv_dtype_bytes = kv_bytes;
  return model;
}

}  // namespace batchsim
