#include "calibration/shape_grid.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace batchsim::calibration {

const std::vector<CalibrationModel>& calibration_models() {
  // Shapes from each model's Hugging Face config.json.
  static const std::vector<CalibrationModel> models = {
      {"llama-2-7b", "meta-llama/Llama-2-7b-hf", 4096, 32, 32, 128, 11008, true, 32000, 4096},
      {"llama-2-70b", "meta-llama/Llama-2-70b-hf", 8192, 64, 8, 128, 28672, true, 32000, 4096},
      {"llama-3-8b", "meta-llama/Meta-Llama-3-8B", 4096, 32, 8, 128, 14336, true, 128256, 8192},
  };
  return models;
}

const CalibrationModel& find_calibration_model(std::string_view name) {
  std::string known;
  for (const CalibrationModel& m : calibration_models()) {
    if (m.name == name || m.hf_id == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw std::invalid_argument("unknown model '" + std::string(name) + "' (known: " + known + ")");
}

std::string_view vidur_op_name(GemmOp op) {
  switch (op) {
    case GemmOp::kQkv:
      return "attn_pre_proj";
    case GemmOp::kAttnOut:
      return "attn_post_proj";
    case GemmOp::kMlpUp:
      return "mlp_up_proj";
    case GemmOp::kMlpDown:
      return "mlp_down_proj";
    case GemmOp::kLmHead:
      return "lm_head";
  }
  return "?";
}

namespace {
void require_divides(int tp, int value, const char* what, const CalibrationModel& model) {
  if (tp < 1 || value % tp != 0) {
    throw std::invalid_argument("tensor-parallel degree " + std::to_string(tp) + " does not divide " + what + " (" +
                                std::to_string(value) + ") of " + model.name);
  }
}
}  // namespace

int heads_per_gpu(const CalibrationModel& model, int tp) {
  require_divides(tp, model.num_heads, "the query heads", model);
  return model.num_heads / tp;
}

int kv_heads_per_gpu(const CalibrationModel& model, int tp) {
  // With more GPUs than KV heads each GPU keeps one (replicated) KV head (vLLM
  // QKVParallelLinear: num_kv_head_replicas = tp_size / total_num_kv_heads).
  if (tp >= model.num_kv_heads) {
    if (tp % model.num_kv_heads != 0) {
      throw std::invalid_argument("tensor-parallel degree " + std::to_string(tp) +
                                  " is not a multiple of the KV heads (" + std::to_string(model.num_kv_heads) +
                                  ") of " + model.name);
    }
    return 1;
  }
  require_divides(tp, model.num_kv_heads, "the KV heads", model);
  return model.num_kv_heads / tp;
}

std::vector<GemmShape> layer_gemm_shapes(const CalibrationModel& model, int tp) {
  require_divides(tp, model.ffn_size, "the FFN size", model);
  require_divides(tp, model.vocab_size, "the vocabulary", model);
  const int64_t d = model.head_dim;
  const int64_t q_width = heads_per_gpu(model, tp) * d;
  const int64_t kv_width = kv_heads_per_gpu(model, tp) * d;
  const int64_t ffn = model.ffn_size / tp;
  return {
      {GemmOp::kQkv, model.hidden_size, q_width + 2 * kv_width},
      {GemmOp::kAttnOut, q_width, model.hidden_size},
      {GemmOp::kMlpUp, model.hidden_size, (model.gated_mlp ? 2 : 1) * ffn},
      {GemmOp::kMlpDown, ffn, model.hidden_size},
      {GemmOp::kLmHead, model.hidden_size, model.vocab_size / tp},
  };
}

std::vector<int> token_count_grid(int max_tokens) {
  std::vector<int> grid;
  for (int m : {1, 2, 4}) {
    if (m <= max_tokens) grid.push_back(m);
  }
  // (first, last, step): Vidur's NUM_TOKENS_SPACE, extended to 16K at step 128.
  struct Range {
    int first, last, step;
  };
  for (const Range r : {Range{8, 1024, 8}, Range{1040, 2048, 16}, Range{2080, 4096, 32}, Range{4160, 8192, 64},
                        Range{8320, 16384, 128}}) {
    for (int m = r.first; m <= std::min(r.last, max_tokens); m += r.step) grid.push_back(m);
  }
  return grid;
}

std::vector<int> quick_token_count_grid(int max_tokens) {
  std::vector<int> grid;
  for (int m : {1, 2, 4, 8, 16, 32}) {
    if (m <= max_tokens) grid.push_back(m);
  }
  for (int p = 64; p <= max_tokens; p *= 2) {
    grid.push_back(p);
    if (p >= 128 && p + p / 2 <= max_tokens) grid.push_back(p + p / 2);  // 192, 384, …: multiples of 64
  }
  return grid;
}

int64_t DecodeAttentionPoint::total_context_tokens() const {
  return std::accumulate(context_lens_tokens.begin(), context_lens_tokens.end(), int64_t{0});
}

int DecodeAttentionPoint::max_context_tokens() const {
  return context_lens_tokens.empty() ? 0 : *std::max_element(context_lens_tokens.begin(), context_lens_tokens.end());
}

AttentionGridOptions AttentionGridOptions::full(int max_model_len_tokens) {
  AttentionGridOptions o;
  o.batch_sizes = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512};
  o.context_lens_tokens = {32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384};
  o.chunk_sizes_tokens = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  o.prior_context_tokens = {0, 256, 512, 1024, 2048, 4096, 8192, 12288};
  o.max_total_kv_tokens = int64_t{1} << 20;
  o.max_model_len_tokens = max_model_len_tokens;
  return o;
}

AttentionGridOptions AttentionGridOptions::quick(int max_model_len_tokens) {
  AttentionGridOptions o;
  o.batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  o.context_lens_tokens = {128, 512, 1024, 2048, 4096, 8192, 16384};
  o.chunk_sizes_tokens = {64, 256, 512, 1024, 2048, 4096};
  o.prior_context_tokens = {0, 1024, 4096, 8192};
  o.max_total_kv_tokens = int64_t{1} << 19;
  o.max_model_len_tokens = max_model_len_tokens;
  return o;
}

std::vector<int> mixed_context_lengths(int batch_size, int mean_tokens) {
  if (batch_size < 1 || mean_tokens < 1) throw std::invalid_argument("mixed lengths need batch, mean >= 1");
  std::vector<int> lens(static_cast<size_t>(batch_size), mean_tokens);
  if (batch_size == 1) return lens;
  const double lo = mean_tokens / 8.0, span = 14.0 * mean_tokens / 8.0;
  for (int i = 0; i < batch_size; ++i) {
    lens[static_cast<size_t>(i)] = std::max(1, static_cast<int>(std::lround(lo + span * i / (batch_size - 1))));
  }
  return lens;
}

std::vector<DecodeAttentionPoint> decode_attention_grid(const AttentionGridOptions& o) {
  std::vector<DecodeAttentionPoint> points;
  for (const bool mixed : {false, true}) {
    for (int batch : o.batch_sizes) {
      for (int ctx : o.context_lens_tokens) {
        if (mixed && batch < 2) continue;
        DecodeAttentionPoint p{
            batch, mixed ? mixed_context_lengths(batch, ctx) : std::vector<int>(static_cast<size_t>(batch), ctx),
            mixed};
        if (p.total_context_tokens() > o.max_total_kv_tokens) continue;
        if (p.max_context_tokens() > o.max_model_len_tokens) continue;
        points.push_back(std::move(p));
      }
    }
  }
  return points;
}

std::vector<PrefillAttentionPoint> prefill_attention_grid(const AttentionGridOptions& o) {
  std::vector<PrefillAttentionPoint> points;
  for (int chunk : o.chunk_sizes_tokens) {
    for (int prior : o.prior_context_tokens) {
      if (chunk + prior > o.max_model_len_tokens) continue;
      if (chunk + prior > o.max_total_kv_tokens) continue;
      points.push_back({chunk, prior});
    }
  }
  return points;
}

}  // namespace batchsim::calibration
