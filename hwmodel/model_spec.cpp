// batchsim — built-in model specs and the Hugging Face config.json reader.
#include "hwmodel/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "hwmodel/error.h"

namespace batchsim {

int64_t ModelSpec::layer_gemm_params() const {
  const int64_t d = hidden_size;
  const int64_t q_dim = int64_t{num_heads} * head_dim;
  const int64_t kv_dim = int64_t{num_kv_heads} * head_dim;
  const int64_t qkv = d * (q_dim + 2 * kv_dim);
  const int64_t o = q_dim * d;
  const int64_t up = d * int64_t{ffn_size} * (gated_mlp ? 2 : 1);
  const int64_t down = int64_t{ffn_size} * d;
  return qkv + o + up + down;
}

int64_t ModelSpec::total_params() const {
  // Embedding and LM head are both counted: see the header. Norms and biases are < 0.1%.
  return int64_t{num_layers} * layer_gemm_params() + 2 * int64_t{vocab_size} * hidden_size;
}

int64_t ModelSpec::kv_bytes_per_token() const {
  return 2 * int64_t{num_layers} * num_kv_heads * head_dim * dtype_bytes;
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
      // The other models of Vidur's measurements (../shared/data/measured/vidur), so that
      // `batchsim validate` can cost whole iterations of them.
      // codellama/CodeLlama-34b-Instruct-hf
      spec("codellama-34b", 48, 8192, 64, 8, 22016, true, 32000, 16384),
      // internlm/internlm-20b
      spec("internlm-20b", 60, 5120, 40, 40, 13824, true, 103168, 4096),
      // Qwen/Qwen-72B: its config's intermediate_size 49152 counts gate and up together.
      spec("qwen-72b", 80, 8192, 64, 64, 24576, true, 152064, 32768),
      // microsoft/phi-2: GeLU MLP, not gated.
      spec("phi-2", 32, 2560, 32, 32, 10240, false, 51200, 2048),
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

// Reads config.json values, naming the file and key in every error.
class HfConfig {
 public:
  HfConfig(const nlohmann::json& j, const std::filesystem::path& path) : j_(j), path_(path) {}

  // The first of `keys` present and not null, as a positive integer.
  std::optional<int> optional_int(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      auto it = j_.find(key);
      if (it == j_.end() || it->is_null()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() <= 0 ||
          it->get<int64_t>() > std::numeric_limits<int>::max()) {
        throw UserError(fmt::format("{}: key '{}' must be a positive integer, got {}",
                                    path_.string(), key, it->dump()));
      }
      return it->get<int>();
    }
    return std::nullopt;
  }
  int required_int(std::initializer_list<const char*> keys) const {
    if (auto v = optional_int(keys)) return *v;
    std::string names;
    for (const char* key : keys) names += (names.empty() ? "'" : "' or '") + std::string(key);
    throw UserError(fmt::format("{}: missing key {}'", path_.string(), names));
  }
  std::string string_or(const char* key, std::string fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      throw UserError(
          fmt::format("{}: key '{}' must be a string, got {}", path_.string(), key, it->dump()));
    }
    return it->get<std::string>();
  }

 private:
  const nlohmann::json& j_;
  const std::filesystem::path& path_;
};

// Architectures whose MLP is gated (gate and up projections, then down): SwiGLU or GeGLU.
// Those known not to be (OPT, GPT-2, GPT-NeoX, Phi, Falcon, BLOOM) fall through to the
// activation rule, which gives them non-gated for relu/gelu.
bool is_gated(const std::string& model_type, const std::string& hidden_act) {
  static const char* const kGated[] = {"llama", "mistral",  "mixtral",  "qwen2",    "qwen3",
                                       "qwen",  "gemma",    "gemma2",   "internlm", "internlm2",
                                       "yi",    "deepseek", "baichuan", "olmo",     "cohere"};
  for (const char* t : kGated) {
    if (model_type == t) return true;
  }
  // Unknown architectures: SiLU is used gated in every current family (Llama's SwiGLU).
  return hidden_act == "silu" || hidden_act == "swish" || hidden_act == "swiglu";
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
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
  if (!j.is_object()) throw UserError(fmt::format("{}: expected a JSON object", path.string()));
  const HfConfig c(j, path);

  ModelSpec m;
  // GPT-2 style names (n_layer, n_embd, n_head, n_inner, n_positions) are the aliases.
  m.num_layers = c.required_int({"num_hidden_layers", "n_layer", "num_layers"});
  m.hidden_size = c.required_int({"hidden_size", "n_embd", "d_model"});
  m.num_heads = c.required_int({"num_attention_heads", "n_head"});
  m.num_kv_heads = c.optional_int({"num_key_value_heads", "num_kv_heads"}).value_or(m.num_heads);
  m.head_dim = c.optional_int({"head_dim"}).value_or(m.hidden_size / m.num_heads);
  if (m.num_heads % m.num_kv_heads != 0) {
    throw UserError(
        fmt::format("{}: num_attention_heads {} is not a multiple of "
                    "num_key_value_heads {}",
                    path.string(), m.num_heads, m.num_kv_heads));
  }
  const std::string model_type = c.string_or("model_type", "");
  const std::string hidden_act = c.string_or("hidden_act", c.string_or("activation_function", ""));
  // OPT names its FFN size ffn_dim; GPT-2 n_inner (null means 4 * n_embd).
  m.ffn_size = c.optional_int({"intermediate_size", "ffn_dim", "n_inner"})
                   .value_or(model_type == "gpt2" ? 4 * m.hidden_size : 0);
  if (m.ffn_size == 0) m.ffn_size = c.required_int({"intermediate_size", "ffn_dim"});
  m.gated_mlp = is_gated(model_type, hidden_act);
  m.vocab_size = c.required_int({"vocab_size"});
  m.max_context_tokens =
      c.required_int({"max_position_embeddings", "n_positions", "max_sequence_length"});
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
  std::string name = c.string_or("_name_or_path", "");
  if (name.empty()) {
    name = path.parent_path().filename().string();
    if (name.empty()) name = path.stem().string();
  }
  m.name = name;
  return m;
}

ModelSpec resolve_model(std::string_view name_or_path) {
  for (const auto& m : builtin_models()) {
    if (m.name == name_or_path) return m;
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

}  // namespace batchsim
