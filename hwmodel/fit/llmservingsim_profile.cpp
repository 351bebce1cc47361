#include "hwmodel/fit/llmservingsim_profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"
#include "hwmodel/model_spec.h"

namespace batchsim {

namespace fs = std::filesystem;

namespace {

constexpr double kMicro = 1e-6;

// NAME or NAME.gz beside it; nullopt when neither exists.
std::optional<fs::path> table(const fs::path& dir, const std::string& name) {
  for (const fs::path& p : {dir / name, dir / (name + ".gz")}) {
    if (fs::is_regular_file(p)) return p;
  }
  return std::nullopt;
}

bool is_tp_folder(const fs::path& p) {
  const std::string name = p.filename().string();
  return fs::is_directory(p) && name.size() > 2 && name.rfind("tp", 0) == 0 &&
         std::all_of(name.begin() + 2, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The profiler's meta.yaml files below `dir` (those with a tp<N> folder beside them).
std::vector<fs::path> profile_metas(const fs::path& dir) {
  std::vector<fs::path> metas;
  if (!fs::is_directory(dir)) return metas;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    if (it->path().filename() != "meta.yaml") continue;
    const fs::path folder = it->path().parent_path();
    bool tp = false;
    for (const auto& e : fs::directory_iterator(folder)) tp = tp || is_tp_folder(e.path());
    if (tp) metas.push_back(it->path());
  }
  std::sort(metas.begin(), metas.end());
  return metas;
}

// The GPU folder of a profile: the path component after `perf`, else meta.yaml's `hardware`.
std::string gpu_of(const fs::path& meta_file, const YAML::Node& meta) {
  std::optional<std::string> after_perf;
  bool next = false;
  for (const auto& part : meta_file) {
    if (next) {
      after_perf = part.string();
      break;
    }
    next = part == "perf";
  }
  if (after_perf) return *after_perf;
  if (meta["hardware"] && meta["hardware"].IsScalar()) return meta["hardware"].as<std::string>();
  throw UserError(fmt::format("{}: no GPU folder (profiler/perf/<GPU>/...) and no `hardware` key", meta_file.string()));
}

int tp_of(const fs::path& folder) { return std::stoi(folder.filename().string().substr(2)); }

void read_dense(const fs::path& file, const std::string& model, const MeasuredShape& shape, int tp, Measurements& out) {
  // layernorm fills both of vLLM's per-layer RMSNorm calls; `add` is fused into them.
  static const std::map<std::string, std::vector<TokenOp>> kOps = {
      {"embedding", {TokenOp::emb}},
      {"layernorm", {TokenOp::input_layernorm, TokenOp::post_attention_layernorm}},
      {"qkv_proj", {TokenOp::attn_pre_proj}},
      {"rotary_emb", {TokenOp::attn_rope}},
      {"o_proj", {TokenOp::attn_post_proj}},
      {"gate_up_proj", {TokenOp::mlp_up_proj}},
      {"act_fn", {TokenOp::mlp_act}},
      {"down_proj", {TokenOp::mlp_down_proj}},
  };
  std::map<int64_t, TokenOpRow> by_tokens;
  CsvTable t(file);
  while (t.next()) {
    const std::string& layer = t.text("layer");
    const auto op = kOps.find(layer);
    const int64_t tokens = t.integer("tokens", 1, int64_t{1} << 30);
    const double s = t.number("time_us") * kMicro;
    if (!(s > 0)) t.fail("column 'time_us': must be > 0");
    if (op == kOps.end()) continue;  // final_layernorm: once per step, not per layer
    auto [it, inserted] = by_tokens.try_emplace(tokens);
    TokenOpRow& row = it->second;
    if (inserted) {
      row.model = model;
      row.shape = shape;
      row.num_tokens = tokens;
      row.tp = tp;
      row.median_s.fill(std::numeric_limits<double>::quiet_NaN());
    }
    for (TokenOp o : op->second) row.median_s[static_cast<int>(o)] = s;
  }
  for (auto& [tokens, row] : by_tokens) out.token_ops.push_back(std::move(row));
}

int64_t read_attention(const fs::path& file, const std::string& model, const MeasuredShape& shape, int tp,
                       Measurements& out) {
  int64_t mixed = 0;
  CsvTable t(file);
  while (t.next()) {
    AttentionRow r;
    r.source = model;
    r.hidden_size = shape.hidden_size;
    r.num_heads = shape.num_heads;
    r.num_kv_heads = shape.num_kv_heads;
    r.tp = tp;
    const int64_t chunk = t.integer("prefill_chunk", 0, int64_t{1} << 30);
    const int64_t kv_prefill = t.integer("kv_prefill", 0, int64_t{1} << 30);
    const int64_t decodes = t.integer("n_decode", 0, int64_t{1} << 30);
    const int64_t kv_decode = t.integer("kv_decode", 0, int64_t{1} << 30);
    r.median_s = t.number("time_us") * kMicro;
    if (!(r.median_s > 0)) t.fail("column 'time_us': must be > 0");
    if (chunk > 0 && decodes > 0) {
      ++mixed;  // a mixed call: Vidur's schema (and the fit) time the two phases apart
      continue;
    }
    if (chunk == 0 && decodes == 0) continue;
    r.is_prefill = chunk > 0;
    r.prefill_chunk_size = chunk;
    r.batch_size = r.is_prefill ? 1 : decodes;
    r.kv_cache_size = r.is_prefill ? kv_prefill : kv_decode;
    out.attention.push_back(r);
  }
  return mixed;
}

void read_per_sequence(const fs::path& file, const std::string& model, int tp, Measurements& out) {
  CsvTable t(file);
  while (t.next()) {
    if (t.text("layer") != "sampler") continue;  // lm_head: the cost model's logits GEMM
    CpuOverheadRow r;
    r.model = model;
    r.batch_size = t.integer("sequences", 1, int64_t{1} << 30);
    r.tp = tp;
    r.sampler_s = t.number("time_us") * kMicro;
    out.cpu_overheads.push_back(r);
  }
}

}  // namespace

bool is_llmservingsim_profile(const fs::path& dir) { return !profile_metas(dir).empty(); }

Measurements read_llmservingsim_profile(const fs::path& dir, std::string_view device) {
  const std::vector<fs::path> metas = profile_metas(dir);
  if (metas.empty())
    throw UserError(fmt::format("{}: no LLMServingSim profile (meta.yaml beside tp<N>/) below it", dir.string()));
  std::map<std::string, std::vector<std::pair<fs::path, YAML::Node>>> by_gpu;
  for (const fs::path& m : metas) {
    YAML::Node meta;
    try {
      meta = YAML::LoadFile(m.string());
    } catch (const YAML::Exception& e) {
      throw UserError(fmt::format("{}:{}: not valid YAML: {}", m.string(), e.mark.line + 1, e.msg));
    }
    by_gpu[gpu_of(m, meta)].emplace_back(m, meta);
  }
  std::vector<std::string> gpus;
  for (const auto& [gpu, list] : by_gpu) gpus.push_back(gpu);
  std::string chosen(device);
  if (chosen.empty()) {
    if (gpus.size() != 1) {
      throw UserError(fmt::format("{}: holds profiles of several GPUs ({}); name one (--device)", dir.string(),
                                  fmt::join(gpus, ", ")));
    }
    chosen = gpus.front();
  } else if (!by_gpu.count(chosen)) {
    throw UserError(fmt::format("{}: no profile of GPU '{}' (have: {})", dir.string(), chosen, fmt::join(gpus, ", ")));
  }
  Measurements out;
  out.root = dir.string();
  out.device = chosen;
  for (const auto& [meta_file, meta] : by_gpu.at(chosen)) {
    if (!meta["model"] || !meta["model"].IsScalar())
      throw UserError(fmt::format("{}: no `model` key", meta_file.string()));
    const std::string model = meta["model"].as<std::string>();
    if (meta["vllm_version"] && meta["vllm_version"].IsScalar())
      out.kernels = "vllm " + meta["vllm_version"].as<std::string>();
    ModelSpec spec;
    try {
      spec = resolve_model(model);
    } catch (const UserError& e) {
      throw UserError(
          fmt::format("{}: model '{}': its layer shape is not known here ({})", meta_file.string(), model, e.what()));
    }
    MeasuredShape shape;
    shape.num_heads = spec.num_heads;
    shape.num_kv_heads = spec.num_kv_heads;
    shape.hidden_size = spec.hidden_size;
    shape.ffn_size = spec.ffn_size;
    shape.vocab_size = spec.vocab_size;
    shape.gated_mlp = spec.gated_mlp;
    const fs::path folder = meta_file.parent_path();
    auto relative = [&](const fs::path& p) { return fs::relative(p, dir).string(); };
    for (const auto& e : fs::directory_iterator(folder)) {
      if (!is_tp_folder(e.path())) continue;
      const int tp = tp_of(e.path());
      if (const auto f = table(e.path(), "dense.csv")) {
        read_dense(*f, model, shape, tp, out);
        out.files_read.push_back(relative(*f));
      }
      if (const auto f = table(e.path(), "attention.csv")) {
        const int64_t mixed = read_attention(*f, model, shape, tp, out);
        out.files_read.push_back(relative(*f));
        if (mixed > 0)
          out.files_skipped.push_back(fmt::format("{}: {} mixed prefill+decode rows", relative(*f), mixed));
      }
      if (const auto f = table(e.path(), "per_sequence.csv")) {
        read_per_sequence(*f, model, tp, out);
        out.files_read.push_back(relative(*f));
      }
      for (const char* other : {"skew.csv", "moe.csv"}) {
        if (const auto f = table(e.path(), other)) out.files_skipped.push_back(relative(*f));
      }
    }
  }
  std::sort(out.files_read.begin(), out.files_read.end());
  if (out.token_ops.empty()) {
    throw UserError(fmt::format("{}: the profile of {} has no dense.csv rows to fit on", dir.string(), chosen));
  }
  return out;
}

Measurements holdout_by_shape(const Measurements& m) {
  Measurements out = m;
  auto held = [](const std::string& model) { return model + " (held-out shapes)"; };
  for (size_t i = 0; i < out.token_ops.size(); ++i) {
    if (i % 2 == 1) out.token_ops[i].model = held(out.token_ops[i].model);
  }
  // Attention rows alternate within each phase, so both phases are fitted and scored.
  size_t prefill = 0, decode = 0;
  for (AttentionRow& r : out.attention) {
    if ((r.is_prefill ? prefill++ : decode++) % 2 == 1) r.source = held(r.source);
  }
  for (size_t i = 0; i < out.cpu_overheads.size(); ++i) {
    if (i % 2 == 1) out.cpu_overheads[i].model = held(out.cpu_overheads[i].model);
  }
  return out;
}

}  // namespace batchsim
