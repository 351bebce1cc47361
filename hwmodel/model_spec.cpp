// batchsim — built-in model specs and the Hugging Face config.json reader.
#include "hwmodel/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "hwmodel/base/error.h"

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

// One layer's GEMM weights with `routed_experts` of the routed experts counted (all of them
// for memory, top-k for what one token runs). An MoE layer also has its router (hidden x
// experts) and shared expert; a dense layer is one MLP of ffn_size.
template <typename T>
T layer_params(const ModelSpec& m, T routed_experts) {
  const T d = T(m.hidden_size);
  const T q_dim = T(m.num_heads) * T(m.head_dim);
  const T kv_dim = T(m.num_kv_heads) * T(m.head_dim);
  const T attention = d * (q_dim + T(2) * kv_dim) + q_dim * d;  // QKV and O
  if (!m.is_moe()) return attention + mlp_params<T>(m, T(m.ffn_size));
  return attention + d * T(m.num_experts) + routed_experts * mlp_params<T>(m, T(m.ffn_size)) +
         mlp_params<T>(m, T(m.shared_expert_ffn_size));
}

// Embedding and LM head, counted separately even when tied (see the header).
template <typename T>
T embedding_params(const ModelSpec& m) {
  return T(2) * T(m.vocab_size) * T(m.hidden_size);
}

template <typename T>
T all_params(const ModelSpec& m) {
  // Norms and biases are < 0.1%.
  return T(m.num_layers) * layer_params<T>(m, T(m.num_experts)) + embedding_params<T>(m);
}

}  // namespace

int64_t ModelSpec::layer_gemm_params() const { return layer_params<int64_t>(*this, num_experts); }

int64_t ModelSpec::total_params() const { return all_params<int64_t>(*this); }

int64_t ModelSpec::active_params() const {
  return int64_t{num_layers} * layer_params<int64_t>(*this, experts_per_token) +
         embedding_params<int64_t>(*this);
}

int64_t ModelSpec::weight_bytes() const {
  const int64_t router = is_moe() ? int64_t{num_layers} * hidden_size * num_experts : 0;
  const int64_t unquantised = embedding_params<int64_t>(*this) + router;
  return (total_params() - unquantised) * dtype_bytes + unquantised * kActivationBytes;
}

int64_t ModelSpec::kv_bytes_per_token() const {
  return 2 * int64_t{num_layers} * num_kv_heads * head_dim * kv_dtype_bytes;
}

namespace {

// Published configs: the `config.json` of each Hugging Face repository named in the comment.
ModelSpec spec(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn,
               bool gated, int vocab, int max_context) {
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
  m.dtype_bytes = 2;
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
      with_hf_id(with_head_dim(spec("qwen3-32b", 64, 5120, 64, 8, 25600, true, 151936, 40960), 128),
                 "Qwen/Qwen3-32B"),
  };
  std::sort(models.begin(), models.end(),
            [](const ModelSpec& a, const ModelSpec& b) { return a.name < b.name; });
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
  std::optional<int> optional_int(std::initializer_list<const char*> keys,
                                  int max = std::numeric_limits<int>::max()) const {
    for (const char* key : keys) {
      auto it = j_.find(key);
      if (it == j_.end() || it->is_null()) continue;
      const bool in_range = it->is_number_unsigned()  ? it->get<uint64_t>() <= uint64_t(max)
                            : it->is_number_integer() ? it->get<int64_t>() <= int64_t{max}
                                                      : false;
      if (!in_range || !it->is_number_integer() || it->get<int64_t>() <= 0) {
        throw UserError(fmt::format("{}: key '{}{}' must be an integer from 1 to {}, got {}",
                                    path_.string(), prefix_, key, max, it->dump()));
      }
      return it->get<int>();
    }
    return std::nullopt;
  }
  int required_int(std::initializer_list<const char*> keys,
                   int max = std::numeric_limits<int>::max()) const {
    if (auto v = optional_int(keys, max)) return *v;
    std::string names;
    for (const char* key : keys) names += (names.empty() ? "'" : "' or '") + prefix_ + key;
    throw UserError(fmt::format("{}: missing key {}'", path_.string(), names));
  }
  std::string string_or(const char* key, std::string fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      throw UserError(fmt::format("{}: key '{}{}' must be a string, got {}", path_.string(),
                                  prefix_, key, it->dump()));
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
  static const char* const kGated[] = {"llama",  "mistral",  "mixtral",  "qwen2",    "qwen3",
                                       "qwen",   "gemma",    "gemma2",   "internlm", "internlm2",
                                       "yi",     "deepseek", "baichuan", "olmo",     "cohere",
                                       "dbrx"};
  for (const char* t : kGated) {
    if (model_type == t) return true;
  }
  // Unknown architectures: SiLU is used gated in every current family (Llama's SwiGLU).
  return hidden_act == "silu" || hidden_act == "swish" || hidden_act == "swiglu";
}

// Mixture-of-experts keys. Mixtral: num_local_experts, num_experts_per_tok, intermediate_size
// per expert (transformers MixtralConfig). Qwen2-MoE / Qwen3-MoE: num_experts,
// num_experts_per_tok, moe_intermediate_size per expert, shared_expert_intermediate_size
// (Qwen2MoeConfig). Layouts this model cannot represent are errors rather than a silently
// dense model.
void read_experts(const HfConfig& c, const nlohmann::json& j, const std::filesystem::path& path,
                  ModelSpec& m) {
  // DeepSeek-V2/V3 (MLA attention, first_k_dense_replace dense layers) is not modelled.
  if (j.contains("n_routed_experts")) {
    throw UserError(fmt::format(
        "{}: key 'n_routed_experts': DeepSeek-style mixture of experts is not supported "
        "(supported: Mixtral, Qwen2-MoE and DBRX configs)",
        path.string()));
  }
  const int experts = c.optional_int({"num_local_experts", "num_experts"}, kMaxExperts).value_or(0);
  if (experts <= 1) return;  // one expert is a dense MLP
  m.num_experts = experts;
  m.experts_per_token = c.required_int({"num_experts_per_tok"}, kMaxExperts);
  if (m.experts_per_token > experts) {
    throw UserError(fmt::format("{}: key 'num_experts_per_tok' is {}, more than the {} experts",
                                path.string(), m.experts_per_token, experts));
  }
  if (auto per_expert = c.optional_int({"moe_intermediate_size"}, kMaxFfn)) m.ffn_size = *per_expert;
  m.shared_expert_ffn_size = c.optional_int({"shared_expert_intermediate_size"}, kMaxFfn).value_or(0);
  // Qwen2-MoE can make some layers dense (decoder_sparse_step > 1, mlp_only_layers); a model of
  // identical layers cannot represent that.
  if (c.optional_int({"decoder_sparse_step"}).value_or(1) != 1) {
    throw UserError(fmt::format(
        "{}: key 'decoder_sparse_step' other than 1 (dense layers between MoE layers) is not "
        "supported",
        path.string()));
  }
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null() &&
                                           !(it->is_array() && it->empty())) {
    throw UserError(fmt::format(
        "{}: key 'mlp_only_layers' must be empty: dense layers in an MoE model are not supported",
        path.string()));
  }
}

// Llama-, Mistral-, Qwen-, OPT-, GPT-NeoX- and GPT-2-style keys, and Mixtral / Qwen2-MoE
// experts.
void read_shapes(const HfConfig& c, const nlohmann::json& j, const std::filesystem::path& path,
                 const std::string& model_type, ModelSpec& m) {
  // GPT-2 style names (n_layer, n_embd, n_head, n_inner, n_positions) are the aliases.
  m.num_layers = c.required_int({"num_hidden_layers", "n_layer", "num_layers"}, kMaxLayers);
  m.hidden_size = c.required_int({"hidden_size", "n_embd", "d_model"}, kMaxHidden);
  m.num_heads = c.required_int({"num_attention_heads", "n_head"}, kMaxHeads);
  m.num_kv_heads = c.optional_int({"num_key_value_heads", "num_kv_heads"}, kMaxHeads).value_or(m.num_heads);
  m.head_dim = c.optional_int({"head_dim"}, kMaxHeadDim).value_or(m.hidden_size / m.num_heads);
  if (m.head_dim == 0) {
    throw UserError(fmt::format("{}: hidden_size {} is smaller than num_attention_heads {}, so "
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
  m.max_context_tokens =
      c.required_int({"max_position_embeddings", "n_positions", "max_sequence_length"});
  read_experts(c, j, path, m);
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
    throw UserError(fmt::format("{}: d_model {} is smaller than n_heads {}", path.string(),
                                m.hidden_size, m.num_heads));
  }
  m.vocab_size = c.required_int({"vocab_size"}, kMaxVocab);
  m.max_context_tokens = c.required_int({"max_seq_len"});
  m.gated_mlp = true;
  const HfConfig ffn = c.object("ffn_config");
  m.ffn_size = ffn.required_int({"ffn_hidden_size"}, kMaxFfn);
  m.num_experts = ffn.required_int({"moe_num_experts"}, kMaxExperts);
  m.experts_per_token = ffn.required_int({"moe_top_k"}, kMaxExperts);
  if (m.experts_per_token > m.num_experts) {
    throw UserError(fmt::format("{}: key 'ffn_config.moe_top_k' is {}, more than the {} experts",
                                path.string(), m.experts_per_token, m.num_experts));
  }
  if (m.num_experts == 1) m.num_experts = m.experts_per_token = 0;  // one expert: dense
}

// Whether quantization_config says FP8 weights: quant_method "fp8" (vLLM's Fp8Config; AutoFP8
// and llm-compressor's FP8 checkpoints) or "fbgemm_fp8" (Meta's Llama 3.1 405B FP8). Other
// methods (GPTQ, AWQ, bitsandbytes, compressed-tensors INT8/INT4, ...) change the kernels in
// ways this cost model does not represent, so they are an error naming the key.
bool weights_are_fp8(const nlohmann::json& j, const std::filesystem::path& path) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return false;
  const char* key = "quantization_config.quant_method";
  if (!it->is_object()) {
    throw UserError(fmt::format("{}: key 'quantization_config' must be an object, got {}",
                                path.string(), it->dump()));
  }
  auto method = it->find("quant_method");
  if (method == it->end() || !method->is_string()) {
    throw UserError(fmt::format("{}: key '{}' is missing or not a string", path.string(), key));
  }
  const std::string name = method->get<std::string>();
  if (name == "fp8" || name == "fbgemm_fp8") return true;
  throw UserError(fmt::format(
      "{}: key '{}' has unsupported value '{}' (supported: fp8, fbgemm_fp8; 16-bit checkpoints "
      "have no quantization_config)",
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
        path.string(), params, kMaxParams, m.num_layers, m.hidden_size, m.ffn_size,
        m.num_experts, m.vocab_size));
  }
}

}  // namespace

const std::vector<ModelSpec>& builtin_models() {
  static const std::vector<ModelSpec> models = make_builtin_models();
  return models;
}

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
  if (!j.is_object()) throw UserError(fmt::format("{}: expected a JSON object", path.string()));
  const HfConfig c(j, path);

  ModelSpec m;
  const std::string model_type = c.string_or("model_type", "");
  if (model_type == "dbrx") {
    read_dbrx(c, path, m);
  } else {
    read_shapes(c, j, path, model_type, m);
  }
  if (m.num_heads % m.num_kv_heads != 0) {
    throw UserError(
        fmt::format("{}: num_attention_heads {} is not a multiple of "
                    "num_key_value_heads {}",
                    path.string(), m.num_heads, m.num_kv_heads));
  }
  // vLLM's dtype "auto" serves float32 checkpoints in float16
  // (vllm/config.py, _get_and_verify_dtype), so every floating dtype costs 2 bytes here.
  const std::string dtype = c.string_or("torch_dtype", "float16");
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "float32") {
    m.dtype_bytes = 2;
  } else {
    throw UserError(
        fmt::format("{}: key 'torch_dtype' has unsupported value '{}' "
                    "(float16, bfloat16 or float32)",
                    path.string(), dtype));
  }
  m.kv_dtype_bytes = 2;  // vLLM's --kv-cache-dtype auto: the activations' 16-bit dtype
  if (weights_are_fp8(j, path)) m.dtype_bytes = 1;
  m.name = model_name_of_config(c.string_or("_name_or_path", ""), path);
  check_model_size(m, path);
  return m;
}

ModelSpec resolve_model(std::string_view name_or_path) {
  for (const auto& m : builtin_models()) {
    if (m.name == name_or_path || (!m.hf_id.empty() && m.hf_id == name_or_path)) return m;
  }
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return load_hf_config(path);
  if (std::filesystem::is_directory(path, ec) &&
      std::filesystem::is_regular_file(path / "config.json", ec)) {
    return load_hf_config(path / "config.json");
  }
  throw UserError(fmt::format("unknown model '{}': not a built-in model ({}) nor a config.json",
                              name_or_path, known_model_names()));
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
  throw UserError(fmt::format(
      "{}: unknown dtype '{}' (auto, bf16, bfloat16, fp16, float16, half, fp8, fp8_e4m3, "
      "fp8_e5m2)",
      option, text));
}

ModelSpec with_dtypes(ModelSpec model, int weight_bytes, int kv_bytes) {
  for (const auto& [what, bytes] : {std::pair<const char*, int>{"weight", weight_bytes},
                                    {"KV cache", kv_bytes}}) {
    if (bytes != 0 && bytes != 1 && bytes != 2) {
      throw UserError(fmt::format(
          "model '{}': {} bytes per element must be 1 (fp8) or 2 (bf16/fp16), got {}", model.name,
          what, bytes));
    }
  }
  if (weight_bytes != 0) model.dtype_bytes = weight_bytes;
  if (kv_bytes != 0) model.kv_dtype_bytes = kv_bytes;
  return model;
}

}  // namespace batchsim
