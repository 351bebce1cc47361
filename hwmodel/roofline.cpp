// batchsim — per-operator work and roofline time (see roofline.h).
#include "hwmodel/roofline.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace batchsim {

const char* layer_gemm_name(LayerGemm gemm) {
  switch (gemm) {
    case LayerGemm::qkv: return "qkv";
    case LayerGemm::o: return "o";
    case LayerGemm::mlp_up: return "mlp_up";
    case LayerGemm::mlp_down: return "mlp_down";
  }
  throw std::logic_error("layer_gemm_name: bad LayerGemm");
}

int64_t q_heads_per_gpu(const ModelSpec& model, int tp) {
  return std::max<int64_t>(1, model.num_heads / tp);
}

int64_t kv_heads_per_gpu(const ModelSpec& model, int tp) {
  return std::max<int64_t>(1, model.num_kv_heads / tp);
}

int64_t kv_bytes_per_token_per_gpu(const ModelSpec& model, int tp) {
  return 2 * int64_t{model.num_layers} * kv_heads_per_gpu(model, tp) * model.head_dim *
         model.dtype_bytes;
}

std::array<GemmShape, kNumLayerGemms> layer_gemm_shapes(const ModelSpec& model, int tp) {
  const int64_t d = model.hidden_size;
  const int64_t q_cols = q_heads_per_gpu(model, tp) * model.head_dim;
  const int64_t kv_cols = kv_heads_per_gpu(model, tp) * model.head_dim;
  const int64_t ffn = model.ffn_size / tp;
  std::array<GemmShape, kNumLayerGemms> shapes;
  shapes[static_cast<int>(LayerGemm::qkv)] = {d, q_cols + 2 * kv_cols};
  shapes[static_cast<int>(LayerGemm::o)] = {q_cols, d};
  shapes[static_cast<int>(LayerGemm::mlp_up)] = {d, ffn * (model.gated_mlp ? 2 : 1)};
  shapes[static_cast<int>(LayerGemm::mlp_down)] = {ffn, d};
  return shapes;
}

GemmShape lm_head_shape(const ModelSpec& model, int tp) {
  return {model.hidden_size, model.vocab_size / tp};
}

OperatorWork gemm_work(GemmShape shape, int64_t m_tokens, int dtype_bytes) {
  const double m = static_cast<double>(m_tokens);
  const double k = static_cast<double>(shape.k);
  const double n = static_cast<double>(shape.n);
  return {2 * m * k * n, dtype_bytes * (m * k + k * n + m * n)};
}

OperatorWork prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens,
                                    int64_t context_before) {
  const double c = static_cast<double>(new_tokens);
  const double p = static_cast<double>(context_before);
  const double hq = static_cast<double>(q_heads_per_gpu(model, tp));
  const double hkv = static_cast<double>(kv_heads_per_gpu(model, tp));
  const double dh = model.head_dim;
  const double causal_pairs = c * (c + 1) / 2;
  const double pairs = c * p + causal_pairs;
  return {4 * hq * dh * pairs, model.dtype_bytes * (2 * c * hq * dh + 2 * (p + c) * hkv * dh),
          c * hq, 4 * hq * dh * causal_pairs};
}

OperatorWork decode_attention_work(const ModelSpec& model, int tp, int64_t num_decodes,
                                   int64_t context_sum) {
  const double n = static_cast<double>(num_decodes);
  const double ctx = static_cast<double>(context_sum);
  const double hq = static_cast<double>(q_heads_per_gpu(model, tp));
  const double hkv = static_cast<double>(kv_heads_per_gpu(model, tp));
  const double dh = model.head_dim;
  return {4 * hq * dh * ctx, model.dtype_bytes * (2 * ctx * hkv * dh + 2 * n * hq * dh), n * hkv};
}

double allreduce_message_bytes(const ModelSpec& model, int64_t tokens) {
  return static_cast<double>(tokens) * model.hidden_size * model.dtype_bytes;
}

double elementwise_bytes(const ModelSpec& model, int tp, ElementwiseOp op, int64_t tokens) {
  const double m = static_cast<double>(tokens) * model.dtype_bytes;
  const double d = model.hidden_size;
  switch (op) {
    case ElementwiseOp::norm: return 2 * m * d;
    case ElementwiseOp::rope:
      return 2 * m * static_cast<double>(q_heads_per_gpu(model, tp) + kv_heads_per_gpu(model, tp)) *
             model.head_dim;
    case ElementwiseOp::activation: {
      const double ffn = static_cast<double>(model.ffn_size / tp);
      return m * ffn * (model.gated_mlp ? 3 : 2);
    }
    case ElementwiseOp::residual_add: return 3 * m * d;
    case ElementwiseOp::embedding: return 2 * m * d;
  }
  throw std::logic_error("elementwise_bytes: bad ElementwiseOp");
}

double roofline_combine(double a_s, double b_s, double exponent) {
  if (exponent <= 0) return std::max(a_s, b_s);
  const double hi = std::max(a_s, b_s);
  if (hi <= 0) return 0;
  // Scaled by the larger term so that large exponents do not overflow.
  return hi * std::pow(std::pow(a_s / hi, exponent) + std::pow(b_s / hi, exponent), 1 / exponent);
}

double gemm_compute_efficiency(const HardwareProfile& gpu, int64_t m_tokens) {
  const double m = static_cast<double>(m_tokens);
  return gpu.gemm_eta_max * m / (m + gpu.gemm_m_half);
}

namespace {
double gemm_compute_s(const HardwareProfile& gpu, const OperatorWork& w, int64_t m_tokens) {
  return w.flops / (gpu.peak_flops * gemm_compute_efficiency(gpu, m_tokens));
}
double streaming_s(const HardwareProfile& gpu, double bytes, double efficiency) {
  return bytes / (gpu.hbm_bytes_per_s * efficiency);
}
}  // namespace

double gemm_time_s(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, int dtype_bytes) {
  if (m_tokens <= 0) return 0;
  const OperatorWork w = gemm_work(shape, m_tokens, dtype_bytes);
  return gpu.kernel_launch_s + roofline_combine(gemm_compute_s(gpu, w, m_tokens),
                                                streaming_s(gpu, w.bytes, gpu.hbm_efficiency),
                                                gpu.gemm_roofline_exponent);
}

bool gemm_compute_bound(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens,
                        int dtype_bytes) {
  if (m_tokens <= 0) return false;
  const OperatorWork w = gemm_work(shape, m_tokens, dtype_bytes);
  return gemm_compute_s(gpu, w, m_tokens) >= streaming_s(gpu, w.bytes, gpu.hbm_efficiency);
}

double prefill_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work) {
  if (work.flops <= 0) return 0;
  const double compute_s =
      (work.flops - work.causal_flops) / (gpu.peak_flops * gpu.prefill_attention_efficiency) +
      work.causal_flops / (gpu.peak_flops * gpu.prefill_attention_causal_efficiency);
  return gpu.attention_launch_s + work.units * gpu.prefill_attention_per_head_token_s +
         std::max(compute_s, streaming_s(gpu, work.bytes, gpu.hbm_efficiency));
}

double decode_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work,
                               int64_t num_decodes) {
  if (num_decodes <= 0) return 0;
  const double kv_s = std::max(work.flops / (gpu.peak_flops * gpu.prefill_attention_efficiency),
                               streaming_s(gpu, work.bytes, gpu.decode_attention_efficiency));
  return gpu.attention_launch_s +
         static_cast<double>(num_decodes) * gpu.decode_attention_per_seq_s +
         roofline_combine(work.units * gpu.decode_attention_per_seq_kv_head_s, kv_s,
                          gpu.decode_attention_roofline_exponent);
}

double elementwise_time_s(const HardwareProfile& gpu, ElementwiseOp op, double bytes) {
  if (bytes <= 0) return 0;
  const StreamingKernel& k = gpu.elementwise[static_cast<int>(op)];
  return k.launch_s + streaming_s(gpu, bytes, k.efficiency);
}

double allreduce_time_s(const HardwareProfile& gpu, double message_bytes, int tp) {
  if (tp <= 1) return 0;
  const double wire_bytes = message_bytes * 2.0 * (tp - 1) / tp;
  for (const AllReduceFit& fit : gpu.allreduce) {
    if (fit.tp == tp) return fit.latency_s + wire_bytes / fit.bytes_per_s;
  }
  return gpu.interconnect_latency_s + wire_bytes / gpu.interconnect_bytes_per_s;
}

double iteration_overhead_time_s(const HardwareProfile& gpu, int64_t num_sequences, int tp) {
  return gpu.iteration_overhead_s +
         gpu.iteration_overhead_per_seq_s * static_cast<double>(num_sequences) +
         gpu.iteration_overhead_per_extra_worker_s * std::max(0, tp - 1);
}

}  // namespace batchsim
