// batchsim — multi-head latent attention's kernels (see mla.h).
#include "hwmodel/mla.h"

#include <algorithm>
#include <stdexcept>

namespace batchsim {

namespace {
void require_mla(const ModelSpec& model, const char* what) {
  if (!model.is_mla()) throw std::logic_error(std::string(what) + ": model '" + model.name + "' has no MLA");
}
}  // namespace

MlaDecodeWork mla_decode_work_coefficients(const ModelSpec& model, int tp) {
  require_mla(model, "mla_decode_attention_work");
  // Absorbed: QK^T over the latent and its RoPE key (576 in DeepSeek-V3), PV over the latent (512).
  const double qk = static_cast<double>(model.kv_lora_rank) + model.qk_rope_head_dim;
  const double v = model.kv_lora_rank;
  MlaDecodeWork c;
  c.heads = q_heads_per_gpu(model, tp);
  c.flops_per_row_key = 2 * (qk + v);
  c.bytes_per_key = model.kv_bytes_per_token_layer();
  c.bytes_per_query = static_cast<double>(c.heads) * (qk + v) * kActivationBytes;
  return c;
}

OperatorWork mla_decode_attention_work(const ModelSpec& model, int tp, int64_t num_decodes, int64_t context_sum) {
  return mla_decode_work_coefficients(model, tp)(num_decodes, context_sum);
}

double mla_decode_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work) {
  return mla_decode_attention_time_s(gpu, MlaDecodeWork::FlopsBytes{work.flops, work.bytes});
}

double mla_decode_attention_time_s(const HardwareProfile& gpu, MlaDecodeWork::FlopsBytes work) {
  if (work.flops <= 0) return 0;
  const MlaAttentionFit& m = gpu.mla;
  const bool fitted = !m.empty();
  const double launch = fitted ? m.decode_launch_s : gpu.attention_launch_s;
  const double compute = fitted ? m.decode_compute_efficiency : gpu.prefill_attention_efficiency;
  const double memory = fitted ? m.decode_memory_efficiency : gpu.decode_attention_efficiency;
  return launch + std::max(work.flops / (gpu.peak_flops * compute), work.bytes / (gpu.hbm_bytes_per_s * memory));
}

OperatorWork mla_prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens, int64_t context_before) {
  require_mla(model, "mla_prefill_attention_work");
  const double c = static_cast<double>(new_tokens);
  const double p = static_cast<double>(context_before);
  const double heads = static_cast<double>(q_heads_per_gpu(model, tp));
  const double qk = static_cast<double>(model.qk_nope_head_dim) + model.qk_rope_head_dim;
  const double v = model.v_head_dim;
  const double pairs = c * p + c * (c + 1) / 2;
  OperatorWork w;
  w.flops = 2 * heads * (qk + v) * pairs;
  w.causal_flops = 2 * heads * (qk + v) * c * (c + 1) / 2;
  w.bytes = (c + (p + c)) * heads * (qk + v) * kActivationBytes;
  w.units = c * heads;
  w.sequences = new_tokens > 0 ? 1 : 0;
  w.new_tokens_max = c;
  w.key_sum = p + c;
  w.context_sum = p + c;
  w.context_max = context_before + new_tokens;
  return w;
}

double mla_prefill_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work) {
  if (work.flops <= 0) return 0;
  const MlaAttentionFit& m = gpu.mla;
  const bool fitted = !m.empty();
  const double launch = fitted ? m.prefill_launch_s : gpu.attention_launch_s;
  const double efficiency = fitted ? m.prefill_efficiency : gpu.prefill_attention_efficiency;
  return launch +
         std::max(work.flops / (gpu.peak_flops * efficiency), work.bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency));
}

}  // namespace batchsim
