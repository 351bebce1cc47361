// batchsim — the roofline's pieces: per-operator work (FLOPs, HBM bytes) and time.
//
// CostModel::iteration is the sum of these over one iteration's operators; the fit
// (hwmodel/fit/) and `batchsim validate` call the same functions on single operators, so the
// model that is fitted is exactly the model that is simulated. Everything here is per GPU:
// with tensor parallelism `tp`, query heads, KV heads, the QKV/up output columns and the O/down
// input rows are divided by tp (Megatron-LM column/row parallel layers, as in vLLM's
// QKVParallelLinear / RowParallelLinear).
//
// Units: FLOPs and bytes are plain counts (double, since they exceed 2^53 only for absurd
// batches); times are seconds.
#pragma once

#include <array>
#include <cstdint>

#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"

namespace batchsim {

// Y[M, N] = X[M, K] * W[K, N] on one GPU; M is the number of tokens.
struct GemmShape {
  int64_t k = 0;
  int64_t n = 0;
};

// FLOPs and HBM bytes moved by one operator call, and for attention the count of work units
// that carry a fixed cost each (prefill: query tokens x query heads; decode: sequences x KV
// heads), all per GPU.
struct OperatorWork {
  double flops = 0;
  double bytes = 0;
  double units = 0;
  double causal_flops = 0;  // prefill: the part of `flops` in the chunk's own causal triangle

  OperatorWork& operator+=(const OperatorWork& o) {
    flops += o.flops;
    bytes += o.bytes;
    units += o.units;
    causal_flops += o.causal_flops;
    return *this;
  }
};

// The four GEMMs of a transformer layer, in execution order; the names are Vidur's
// (vidur/profiling/mlp/mlp_impl.py), which the measurement reader maps onto these.
enum class LayerGemm : int { qkv = 0, o = 1, mlp_up = 2, mlp_down = 3 };
inline constexpr int kNumLayerGemms = 4;
const char* layer_gemm_name(LayerGemm gemm);  // "qkv", "o", "mlp_up", "mlp_down"

// Heads held by one GPU. KV heads are replicated when tp exceeds them (vLLM
// QKVParallelLinear: num_kv_head_replicas), so a GPU always holds at least one.
int64_t q_heads_per_gpu(const ModelSpec& model, int tp);
int64_t kv_heads_per_gpu(const ModelSpec& model, int tp);
// K and V of one token across all layers, on one GPU.
int64_t kv_bytes_per_token_per_gpu(const ModelSpec& model, int tp);

// Per-GPU weight shapes. QKV: (hidden, (q + 2 kv) * head_dim / tp); O: (q * head_dim / tp,
// hidden); up: (hidden, ffn * (gated ? 2 : 1) / tp); down: (ffn / tp, hidden). LM head: (hidden,
// vocab / tp), vocabulary-parallel as in vLLM's ParallelLMHead.
std::array<GemmShape, kNumLayerGemms> layer_gemm_shapes(const ModelSpec& model, int tp);
GemmShape lm_head_shape(const ModelSpec& model, int tp);

// 2*M*K*N FLOPs; bytes = dtype * (M*K + K*N + M*N): activations in, weights, activations out.
OperatorWork gemm_work(GemmShape shape, int64_t m_tokens, int dtype_bytes);

// Causal attention of `new_tokens` queries over `context_before + new_tokens` keys, flash style
// (FlashAttention, Dao et al. 2022: the score matrix never reaches HBM). Query i of the chunk
// sees context_before + i + 1 keys, so the (query, key) pairs are
//   new_tokens * context_before + new_tokens * (new_tokens + 1) / 2,
// each costing 2*head_dim FLOPs for QK^T and 2*head_dim for PV, per query head.
// Bytes: Q read and O written (new_tokens * q_heads * head_dim each) plus K and V of all keys
// read once (re-reads of K/V tiles by later query tiles are served from L2 and not counted).
OperatorWork prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens,
                                    int64_t context_before);
// Decode attention: one query per sequence over its context (context_sum = sum of the
// sequences' context lengths including the new token). Bytes: K and V of every context token
// plus Q and O; FLOPs as above with one query. Memory-bound for every real shape (arithmetic
// intensity ~ q_heads / kv_heads FLOP/byte).
OperatorWork decode_attention_work(const ModelSpec& model, int tp, int64_t num_decodes,
                                   int64_t context_sum);

// Bytes of the activation tensor one tensor-parallel all-reduce sums: tokens * hidden * dtype.
double allreduce_message_bytes(const ModelSpec& model, int64_t tokens);

// HBM bytes of one elementwise kernel over `tokens` tokens on one GPU (reads + writes):
//   norm (RMSNorm/LayerNorm): read and write tokens x hidden;
//   rope: read and write the query and key heads of the GPU;
//   activation: gated reads gate and up (2 x ffn/tp) and writes ffn/tp, else reads and writes
//     ffn/tp;
//   residual_add: reads two tokens x hidden tensors and writes one;
//   embedding: gathers tokens rows of hidden and writes them.
// Norm, residual add and embedding work on the whole hidden state on every GPU.
double elementwise_bytes(const ModelSpec& model, int tp, ElementwiseOp op, int64_t tokens);

// ---- time: the roofline with a profile's efficiencies ----

// Combines a compute time and a memory time: (a^p + b^p)^(1/p), or max(a, b) for p <= 0.
// p = 1 is the sum (no overlap), p -> infinity the hard roofline.
double roofline_combine(double a_s, double b_s, double exponent);

// GEMM efficiency at M tokens: eta_max * M / (M + m_half). Small M cannot fill the tensor
// cores' tiles (cuBLAS tiles are 64..256 rows), so achieved FLOP/s rises with M and saturates.
double gemm_compute_efficiency(const HardwareProfile& gpu, int64_t m_tokens);
// kernel_launch_s + roofline_combine(flops / (peak * eta_c(M)), bytes / (hbm * hbm_efficiency),
//                                  gemm_roofline_exponent).
double gemm_time_s(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, int dtype_bytes);
// Whether the FLOP roof, not the bandwidth roof, binds this GEMM.
bool gemm_compute_bound(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens,
                        int dtype_bytes);
// One variable-length prefill attention call (all chunks of an iteration summed in `work`):
//   attention_launch_s + units * prefill_attention_per_head_token_s
//   + max((flops - causal_flops) / (peak * prefill_attention_efficiency)
//           + causal_flops / (peak * prefill_attention_causal_efficiency),
//         bytes / (hbm * hbm_efficiency)).
// Queries against the prior context run as full tiles; the chunk's own triangle runs as
// causal-masked tiles, which FlashAttention executes at a lower rate (in Vidur's A100 profiles,
// both the Llama-2-7B and the 70B-shape files, about half of the unmasked rate).
double prefill_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work);
// One decode attention call over num_decodes sequences:
//   attention_launch_s + num_decodes * decode_attention_per_seq_s
//   + roofline_combine(units * decode_attention_per_seq_kv_head_s,
//                      max(flops / (peak * prefill_attention_efficiency),
//                          bytes / (hbm * decode_attention_efficiency)),
//                      decode_attention_roofline_exponent).
// The per-unit term is the fixed work of each (sequence, KV head) block of the kernel; it
// dominates short contexts (Vidur's A100 decode profile: ~45 ns per unit at 32 tokens).
double decode_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work,
                               int64_t num_decodes);
// launch + elementwise_bytes / (hbm * efficiency) of the op's StreamingKernel.
double elementwise_time_s(const HardwareProfile& gpu, ElementwiseOp op, double bytes);
// All-reduce over tp GPUs: latency + wire bytes / bandwidth, wire bytes = message * 2 (tp-1)/tp
// (a ring all-reduce sends and receives that much per GPU; NCCL's "bus bandwidth"). The
// profile's `allreduce` entry for tp if there is one, else interconnect_latency_s and
// interconnect_bytes_per_s. Zero for tp == 1.
double allreduce_time_s(const HardwareProfile& gpu, double message_bytes, int tp);
// CPU time of one iteration outside the GPU kernels: fixed + per sequence in the batch + per
// tensor-parallel worker beyond the first.
double iteration_overhead_time_s(const HardwareProfile& gpu, int64_t num_sequences, int tp);

}  // namespace batchsim
