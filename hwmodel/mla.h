// batchsim — multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2): its attention kernels.
//
// MLA caches one latent of kv_lora_rank plus a RoPE key of qk_rope_head_dim per token (576
// elements in DeepSeek-V3), shared by every head (DeepSeek-V2, arXiv 2405.04434, section 2.1).
// Engines run its two phases differently (vLLM MLACommonImpl, vllm/v1/attention/backends/mla/
// common.py; SGLang's FlashMLA / FlashInfer backends):
//   decode  absorbed: the key and value up-projections are folded into the query and the output,
//           so every head of the GPU attends over the one latent, an MQA with qk width
//           kv_lora_rank + qk_rope_head_dim and v width kv_lora_rank. The kernel (FlashMLA,
//           deepseek-ai/FlashMLA csrc/; FlashInfer's BatchMLAPagedAttentionWrapper) tiles 64
//           query-head rows per CTA, so fewer heads are padded to 64: its FLOPs are those of
//           ceil(heads / 64) x 64 rows. The latent is read once per sequence for all heads.
//   prefill un-absorbed: the latent of every key is decompressed into each head's K (nope +
//           rope) and V (v_head_dim) by the kv_b GEMM (the cost model's, mla_gemm_shapes in
//           roofline.h), then a causal MHA with qk width qk_nope + qk_rope and v width
//           v_head_dim runs (FlashAttention-3's varlen kernel).
// Tensor parallelism divides the heads, never the latent: every GPU of an attention rank reads
// all of it (roofline.h, kv_bytes_per_token_per_gpu), so decode bytes per GPU do not shrink
// with tp, and below 64 heads per GPU neither do its FLOPs.
//
// The time functions use the profile's `mla` block (attention_kernel.h, MlaAttentionFit), fitted
// on InferSim's H800 tables (hwmodel/fit/fit_mla.h); a profile without one uses its flat
// attention parameters (attention_launch_s, prefill_attention_efficiency,
// decode_attention_efficiency) in the same formulas.
#pragma once

#include <cstdint>

#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/roofline.h"

namespace batchsim {

// Query-head rows of one CTA tile of the MLA decode kernels (FlashMLA's and FlashInfer's Hopper
// MLA kernels both process 64 query rows per tile); fewer heads per GPU are padded to it.
inline constexpr int64_t kMlaDecodeHeadTile = 64;

// Decode of `num_decodes` sequences of `context_sum` cached keys in all (each context includes
// its new token), heads = num_heads / tp:
//   flops = 2 x padded heads x (kv_lora + rope + kv_lora) x context_sum   (QK^T over the latent and
//           its RoPE key, PV over the latent), padded heads = 64 ceil(heads / 64);
//   bytes = context_sum x kv_bytes_per_token_layer (the latent, FlashMLA's FP8 layout for an FP8
//           cache) + num_decodes x heads x (kv_lora + rope + kv_lora) x 2 (absorbed Q in, O out).
// `units` is the sequences, `context_sum` and `key_sum` the keys. Throws std::logic_error for a
// model that is not MLA.
OperatorWork mla_decode_attention_work(const ModelSpec& model, int tp, int64_t num_decodes, int64_t context_sum);
// The same work as coefficients of its counts, so that a caller that costs many steps of one
// model (CostModel) computes them once. With `queries` tokens per sequence (a speculative
// step verifies 1 + k), the kernel packs queries x heads rows into its 64-row tiles (FlashMLA's
// num_q_tokens_per_head_k = s_q x heads / kv heads), so the padded rows grow only past a tile:
// DeepSeek-V3's 16 heads per GPU at TP 8 verify 4 tokens for the FLOPs of one; the absorbed Q
// in and O out grow with the queries.
struct MlaDecodeWork {
  int64_t heads = 0;  // query heads per GPU
  double flops_per_row_key = 0, bytes_per_key = 0, bytes_per_query = 0;
  // The FLOPs and bytes alone (what the decode kernel's time reads), for the simulator's hot path.
  struct FlopsBytes {
    double flops = 0, bytes = 0;
  };
  FlopsBytes flops_bytes(int64_t num_decodes, int64_t context_sum, int64_t queries = 1) const {
    const double n = static_cast<double>(num_decodes);
    const double keys = static_cast<double>(context_sum);
    const int64_t rows = heads * queries;
    const double padded =
        static_cast<double>((rows + kMlaDecodeHeadTile - 1) / kMlaDecodeHeadTile * kMlaDecodeHeadTile);
    // Whole numbers far below 2^53: the products are exact in any order.
    return {flops_per_row_key * padded * keys,
            keys * bytes_per_key + n * static_cast<double>(queries) * bytes_per_query};
  }
  OperatorWork operator()(int64_t num_decodes, int64_t context_sum, int64_t queries = 1) const {
    const FlopsBytes fb = flops_bytes(num_decodes, context_sum, queries);
    const double n = static_cast<double>(num_decodes);
    const double keys = static_cast<double>(context_sum);
    OperatorWork w;
    w.flops = fb.flops;
    w.bytes = fb.bytes;
    w.units = n;
    w.sequences = n;
    w.key_sum = keys;
    w.context_sum = keys;
    return w;
  }
};
MlaDecodeWork mla_decode_work_coefficients(const ModelSpec& model, int tp);
// launch + max(flops / (peak_flops x compute), bytes / (hbm x memory)): the hard roofline
// (fitted on InferSim's H800 decode table, a soft corner fits its exponent to infinity).
// Compute at the 16-bit rate, FP8 caches too (the kernels dequantise the latent).
double mla_decode_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work);
double mla_decode_attention_time_s(const HardwareProfile& gpu, MlaDecodeWork::FlopsBytes work);

// Prefill of `new_tokens` queries after `context_before` cached tokens, un-absorbed, causal:
//   pairs = new_tokens x context_before + new_tokens (new_tokens + 1) / 2,
//   flops = 2 x heads x (qk_nope + qk_rope + v_head_dim) x pairs,
//   bytes = Q and O (new_tokens x heads x (qk + v) x 2) + the decompressed K and V of every key
//           ((context_before + new_tokens) x heads x (qk + v) x 2).
// Chunks of one call add up (OperatorWork +=).
OperatorWork mla_prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens, int64_t context_before);
// launch + max(flops / (peak_flops x efficiency), bytes / (hbm x hbm_efficiency)); zero without work.
double mla_prefill_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work);

}  // namespace batchsim
