// batchsim calibration — which shapes to measure.
//
// GEMMs: the four per-layer projections a transformer runs (QKV, attention output, MLP
// up[+gate], MLP down) and the LM head, per model and tensor-parallel degree, as the
// (K, N) of Y[M,N] = X[M,K]·W[N,K]ᵀ with M = tokens in the step. These are exactly the
// operators Vidur profiles (vidur/profiling/mlp/mlp_impl.py: attn_pre_proj, attn_post_proj,
// mlp_up_proj, mlp_down_proj), so our rows line up with its published measurements.
// Token counts: dense where GEMM efficiency changes fastest (small M) and at every multiple of
// 64/128 where tile and wave quantisation show (Vidur's NUM_TOKENS_SPACE,
// vidur/profiling/utils/__init__.py: 1, 2, 4, then steps of 8 to 1024, 16 to 2048, 32 to 4096,
// 64 to 8192, 128 to 16K — steps that are powers of two, so every multiple of 64 up to 8192
// and of 128 up to 16384 is in the grid).
// Attention: decode batch size × context length (uniform, and mixed lengths in one batch), and
// prefill chunk × prior context, each capped by the KV tokens one measured layer may hold.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim::calibration {

// The shape facts of a model that calibration needs. A small built-in table for now; the
// fields map one-to-one onto hwmodel's ModelSpec (hwmodel/model_spec.h); a test keeps the two
// tables equal. Kept here so batchsim-calibrate builds with nvcc alone (see CMakeLists.txt).
struct CalibrationModel {
  std::string name;      // short name: "llama-2-7b"
  std::string hf_id;     // Hugging Face id, also the measurement sub-folder (as in Vidur)
  int hidden_size = 0;   // Vidur: n_embd
  int num_heads = 0;     // n_head / n_q_head
  int num_kv_heads = 0;  // n_kv_head
  int head_dim = 0;
  int ffn_size = 0;        // n_expanded_embd
  bool gated_mlp = false;  // use_gated_mlp: up projection produces gate and up (2·ffn)
  int vocab_size = 0;
  int max_context_tokens = 0;
};

const std::vector<CalibrationModel>& calibration_models();
// Throws std::invalid_argument listing the known names.
const CalibrationModel& find_calibration_model(std::string_view name);

enum class GemmOp { kQkv, kAttnOut, kMlpUp, kMlpDown, kLmHead };
inline constexpr GemmOp kAllGemmOps[] = {GemmOp::kQkv, GemmOp::kAttnOut, GemmOp::kMlpUp, GemmOp::kMlpDown,
                                         GemmOp::kLmHead};
// Vidur's operator name ("attn_pre_proj", …); the LM head, which Vidur does not profile,
// is "lm_head".
std::string_view vidur_op_name(GemmOp op);

struct GemmShape {
  GemmOp op;
  int64_t k = 0;  // reduction dimension (input features)
  int64_t n = 0;  // output features on one GPU
};

// Per-GPU GEMM shapes of one layer (+ LM head) at tensor-parallel degree `tp` (Megatron-LM
// split: QKV, up and LM head column-parallel, O and down row-parallel). KV heads are
// replicated when tp exceeds their number, as vLLM does. Throws std::invalid_argument when
// tp does not divide the heads, the FFN size or the vocabulary.
std::vector<GemmShape> layer_gemm_shapes(const CalibrationModel& model, int tp);
// Query and KV heads on one GPU at degree tp.
int heads_per_gpu(const CalibrationModel& model, int tp);
int kv_heads_per_gpu(const CalibrationModel& model, int tp);

// The full token-count grid described above, ascending, ≤ max_tokens.
std::vector<int> token_count_grid(int max_tokens = 16384);
// A sparser grid for `--quick`: 1, 2, 4, 8, 16, 32, then powers of two from 64 and 1.5× those
// from 128 (so every count ≥ 64 is a multiple of 64), ≤ max_tokens.
std::vector<int> quick_token_count_grid(int max_tokens = 16384);

struct DecodeAttentionPoint {
  int batch_size = 0;
  std::vector<int> context_lens_tokens;  // one per sequence
  bool mixed = false;
  int64_t total_context_tokens() const;
  int max_context_tokens() const;
};
struct PrefillAttentionPoint {
  int chunk_tokens = 0;
  int prior_tokens = 0;
};
struct AttentionGridOptions {
  std::vector<int> batch_sizes;
  std::vector<int> context_lens_tokens;
  std::vector<int> chunk_sizes_tokens;
  std::vector<int> prior_context_tokens;
  int64_t max_total_kv_tokens = 0;  // cap on Σ context of one measured batch
  int max_model_len_tokens = 0;     // cap on one sequence's context (prior + chunk)

  static AttentionGridOptions full(int max_model_len_tokens);
  static AttentionGridOptions quick(int max_model_len_tokens);
};
// Uniform-context points for every (batch, context) within the caps, then the same
// (batch ≥ 2, mean context) with mixed lengths (see mixed_context_lengths).
std::vector<DecodeAttentionPoint> decode_attention_grid(const AttentionGridOptions& options);
std::vector<PrefillAttentionPoint> prefill_attention_grid(const AttentionGridOptions& options);
// Deterministic mixed lengths with the given mean: a linear ramp from mean/8 to 15·mean/8
// (so the longest is ~1.9× the mean), sequence i of batch_size. Σ = batch_size·mean up to
// rounding; every length ≥ 1.
std::vector<int> mixed_context_lengths(int batch_size, int mean_tokens);

}  // namespace batchsim::calibration
