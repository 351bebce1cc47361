// batchsim — the roofline cost model of one iteration (see cost_model.h, roofline.h).
#include "hwmodel/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hwmodel/base/error.h"

namespace batchsim {

CostModel::CostModel(ModelSpec model, HardwareProfile gpu, int tensor_parallel, EngineProfile engine)
    : model_(std::move(model)), gpu_(std::move(gpu)), tp_(tensor_parallel), engine_(std::move(engine)) {
  if (tp_ < 1) throw UserError(fmt::format("tensor parallel degree must be >= 1, got {}", tp_));
  if (model_.num_heads % tp_ != 0 || model_.ffn_size % tp_ != 0) {
    // vLLM refuses the same (vllm/config.py verify_with_parallel_config).
    throw UserError(
        fmt::format("model '{}': {} attention heads and FFN size {} must be divisible by --tp {}",
                    model_.name, model_.num_heads, model_.ffn_size, tp_));
  }
  if (model_.is_moe() &&
      (model_.experts_per_token < 1 || model_.experts_per_token > model_.num_experts ||
       model_.shared_expert_ffn_size < 0 || model_.shared_expert_ffn_size % tp_ != 0)) {
    // vLLM shards each expert's (and the shared expert's) intermediate size like a dense MLP.
    throw UserError(fmt::format(
        "model '{}': top-{} of {} experts with shared expert FFN {} cannot run on --tp {}",
        model_.name, model_.experts_per_token, model_.num_experts, model_.shared_expert_ffn_size,
        tp_));
  }
  if (model_.num_kv_heads % tp_ != 0 && tp_ % model_.num_kv_heads != 0) {
    // KV heads are either split or replicated whole (vLLM QKVParallelLinear).
    throw UserError(fmt::format("model '{}': {} KV heads cannot be split over --tp {}", model_.name,
                                model_.num_kv_heads, tp_));
  }
  if (gpu_.peak_flops <= 0 || gpu_.hbm_bytes_per_s <= 0) {
    throw UserError(fmt::format("GPU '{}': peak_flops and hbm_bytes_per_s must be > 0", gpu_.name));
  }
  if (tp_ > 1 && gpu_.interconnect_bytes_per_s <= 0) {
    throw UserError(
        fmt::format("GPU '{}' has no interconnect bandwidth, needed for --tp {}", gpu_.name, tp_));
  }
  layer_gemms_ = layer_gemm_shapes(model_, tp_);
  moe_gemms_ = moe_gemm_shapes(model_, tp_);
  lm_head_ = lm_head_shape(model_, tp_);
  fa3_tiles_ = costs_fa3_prefill_tiles(gpu_);
}

TokenCosts CostModel::token_costs(int64_t tokens) const {
  TokenCosts cost;
  cost.tokens = tokens;
  const double layers = model_.num_layers;
  // The MLP projections run once per expert the tokens touch, on that expert's tokens; a dense
  // MLP is one expert of all of them.
  const ExpertLoad load = expected_expert_load(model_, tokens);
  const WeightFormat w_format = model_.weight_format;
  const WeightFormat expert_format = model_.is_moe() ? model_.expert_weight_format : model_.weight_format;
  for (int g = 0; g < kNumLayerGemms; ++g) {
    const bool mlp = g == static_cast<int>(LayerGemm::mlp_up) ||
                     g == static_cast<int>(LayerGemm::mlp_down);
    const double layer_s =
        mlp ? grouped_gemm_time_s(gpu_, layer_gemms_[g], load.tokens_per_expert, load.experts,
                                  expert_format)
            : gemm_time_s(gpu_, layer_gemms_[g], tokens, w_format);
    cost.layer_gemm_s[g] = layers * layer_s;
  }
  if (model_.is_moe()) {
    // The router is unquantised (16-bit) and replicated; the shared expert runs on every token.
    cost.layer_gemm_s[static_cast<int>(LayerGemm::mlp_up)] +=
        layers * (gemm_time_s(gpu_, moe_gemms_.router, tokens, WeightFormat::bf16) +
                  gemm_time_s(gpu_, moe_gemms_.shared_up, tokens, w_format));
    cost.layer_gemm_s[static_cast<int>(LayerGemm::mlp_down)] +=
        layers * gemm_time_s(gpu_, moe_gemms_.shared_down, tokens, w_format);
  }
  for (double s : cost.layer_gemm_s) cost.gemm_s += s;
  // The MLP up projection is the largest GEMM; its regime is the layer's (an MoE layer's: one
  // routed expert's on its share of the tokens).
  cost.gemm_compute_bound =
      grouped_gemm_compute_bound(gpu_, layer_gemms_[static_cast<int>(LayerGemm::mlp_up)],
                                 load.tokens_per_expert, load.experts, expert_format);

  // Per layer, the memory-bound kernels Vidur times (vidur/profiling/mlp/mlp_impl.py): two
  // norms, rotary embedding, the MLP activation and one residual add (vLLM fuses the other
  // residual add into the next RMSNorm, fused_add_rms_norm). The embedding runs once.
  // Models with learned positions (OPT) are charged the rotary kernel too: it is < 1% of a layer.
  auto layer_op_s = [&](ElementwiseOp op) {
    return elementwise_time_s(gpu_, op, elementwise_bytes(model_, tp_, op, tokens));
  };
  cost.elementwise_s =
      layers * (2 * layer_op_s(ElementwiseOp::norm) + layer_op_s(ElementwiseOp::rope) +
                layer_op_s(ElementwiseOp::activation) + layer_op_s(ElementwiseOp::residual_add)) +
      layer_op_s(ElementwiseOp::embedding);

  // Two all-reduces per layer: after the attention output projection and after the MLP down
  // projection (Megatron-LM, Shoeybi et al. 2019, section 3).
  cost.communication_s = 2 * layers * allreduce_s(allreduce_message_bytes(model_, tokens));

  // Launches run ahead of the GPU asynchronously; the GPU waits only for what they lag behind.
  cost.launch_s = engine_.launch_s(model_.num_layers, tokens);
  return cost;
}

double CostModel::lm_head_s(int64_t sampled) const {
  // vLLM does not quantise the LM head: its weights stay 16-bit under --quantization fp8.
  return gemm_time_s(gpu_, lm_head_, sampled, WeightFormat::bf16);
}

IterationCost CostModel::iteration(const BatchShape& shape, NonAttentionCache* memo) const {
  if (shape.empty()) return IterationCost{};
  const int64_t tokens = shape.total_tokens();
  if (memo == nullptr) return iteration_from(shape, token_costs(tokens), lm_head_s(shape.num_sampled));
  TokenCosts& slot = memo->token_slot(tokens);
  if (slot.tokens != tokens) slot = token_costs(tokens);
  auto& [sampled, head_s] = memo->lm_head_slot(shape.num_sampled);
  if (sampled != shape.num_sampled) {
    sampled = shape.num_sampled;
    head_s = lm_head_s(sampled);
  }
  return iteration_from(shape, slot, head_s);
}

IterationCost CostModel::iteration_from(const BatchShape& shape, const TokenCosts& t, double lm_head_seconds) const {
  IterationCost cost;
  const double layers = model_.num_layers;
  cost.layer_gemm_s = t.layer_gemm_s;
  cost.gemm_s = t.gemm_s;
  cost.gemm_compute_bound = t.gemm_compute_bound;
  cost.lm_head_s = lm_head_seconds;
  cost.elementwise_s = t.elementwise_s;
  cost.communication_s = t.communication_s;

  // All prefill chunks run in one variable-length attention kernel per layer (FlashAttention's
  // varlen API, as vLLM calls it), so their work is summed under one roofline.
  OperatorWork prefill;
  for (const PrefillChunk& chunk : shape.prefills) {
    prefill += prefill_attention_work(model_, tp_, chunk.new_tokens, chunk.context_before, fa3_tiles_);
  }
  cost.prefill_attention_s = layers * prefill_attention_time_s(gpu_, prefill);

  const OperatorWork decode =
      decode_attention_work(model_, tp_, shape.num_decodes, shape.decode_context_sum,
                            shape.decode_context_max);
  cost.decode_attention_s = layers * decode_attention_time_s(gpu_, decode, shape.num_decodes);
  if (engine_.kv_cache_write == KvCacheWrite::concat) {
    // Concatenating a token onto a layer's cache reads the old cache and writes the new one:
    // twice the context's K/V bytes per layer, streamed (HF DynamicCache / past_key_values).
    const double per_token_layer =
        static_cast<double>(kv_bytes_per_token_per_gpu(model_, tp_)) / model_.num_layers;
    auto copy_s = [&](double context_tokens) {
      return 2 * context_tokens * per_token_layer / (gpu_.hbm_bytes_per_s * gpu_.hbm_efficiency);
    };
    double prefill_context = 0;
    for (const PrefillChunk& chunk : shape.prefills) prefill_context += chunk.context_before + chunk.new_tokens;
    if (!shape.prefills.empty()) cost.prefill_attention_s += layers * copy_s(prefill_context);
    if (shape.num_decodes > 0) cost.decode_attention_s += layers * copy_s(static_cast<double>(shape.decode_context_sum));
  }

  const double kernels_s = cost.gemm_s + cost.prefill_attention_s + cost.decode_attention_s +
                           cost.lm_head_s + cost.elementwise_s + cost.communication_s;
  const double device_s = std::max(kernels_s, t.launch_s);
  const int64_t sequences = static_cast<int64_t>(shape.prefills.size()) + shape.num_decodes;
  const double cpu_s = engine_.cpu.seconds(sequences, tp_);
  cost.overhead_s = (device_s - kernels_s) +
                    (engine_.cpu_overlaps_gpu ? std::max(0.0, cpu_s - device_s) : cpu_s) +
                    engine_.residual.seconds(sequences, tp_);
  cost.total_s = kernels_s + cost.overhead_s;
  return cost;
}

double CostModel::allreduce_s(double message_bytes) const {
  if (engine_.allreduce == AllReduceImpl::custom && message_bytes <= engine_.custom_allreduce_max_bytes) {
    // The engine's own kernel where the GPU profile has measured it; NCCL otherwise.
    if (const auto s = custom_allreduce_time_s(gpu_, message_bytes, tp_)) return *s;
  }
  return allreduce_time_s(gpu_, message_bytes, tp_);
}

double CostModel::activation_reserve_bytes(int64_t activation_tokens, int64_t sampler_rows) const {
  const auto& g = layer_gemms_;
  const double mlp_elements = static_cast<double>(g[static_cast<int>(LayerGemm::mlp_up)].n) +
                              static_cast<double>(g[static_cast<int>(LayerGemm::mlp_down)].k);
  const double tokens = static_cast<double>(activation_tokens);
  double elements = tokens * (4.0 * model_.hidden_size + static_cast<double>(g[static_cast<int>(LayerGemm::qkv)].n));
  if (model_.is_moe()) {
    // fused_moe runs its tokens in chunks and sizes its intermediate caches (each token's k
    // experts' up[/gate] and activated outputs, and their k outputs before the combine) for one
    // chunk: min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE = 16384) (vllm/model_executor/layers/
    // fused_moe/fused_moe.py, vllm/envs.py; local-inference-lab/vllm@69520bc). The router
    // logits and the shared expert run on every token at once.
    const auto& m = moe_gemms_;
    const double chunk = std::min(tokens, kFusedMoeChunkTokens);
    elements += chunk * model_.experts_per_token * (mlp_elements + static_cast<double>(model_.hidden_size)) +
                tokens * (static_cast<double>(m.router.n) + static_cast<double>(m.shared_up.n) +
                          static_cast<double>(m.shared_down.k));
  } else {
    elements += tokens * mlp_elements;
  }
  const double logits_bytes = static_cast<double>(sampler_rows) * lm_head_.n * 4.0;
  return kRuntimeReserveBytes + elements * kActivationBytes + logits_bytes;
}

int64_t CostModel::kv_capacity_tokens(double gpu_memory_utilization, int64_t activation_tokens,
                                      int64_t sampler_rows) const {
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1)) {
    throw UserError(
        fmt::format("gpu memory utilization must be in (0, 1], got {}", gpu_memory_utilization));
  }
  const double weights_per_gpu = static_cast<double>(model_.weight_bytes()) / tp_;
  return kv_tokens_in(static_cast<double>(gpu_.memory_bytes) * gpu_memory_utilization - weights_per_gpu -
                      activation_reserve_bytes(activation_tokens, sampler_rows));
}

int64_t CostModel::kv_capacity_tokens_static(double mem_fraction_static) const {
  if (!(mem_fraction_static > 0 && mem_fraction_static < 1)) {
    throw UserError(fmt::format("mem_fraction_static must be in (0, 1), got {}", mem_fraction_static));
  }
  const double weights_per_gpu = static_cast<double>(model_.weight_bytes()) / tp_;
  return kv_tokens_in(static_cast<double>(gpu_.memory_bytes) * mem_fraction_static - weights_per_gpu -
                      kRuntimeReserveBytes);
}

int64_t CostModel::kv_capacity_tokens_of_free(double free_fraction, int64_t activation_tokens,
                                              int64_t sampler_rows) const {
  if (!(free_fraction > 0 && free_fraction <= 1)) {
    throw UserError(fmt::format("free_gpu_memory_fraction must be in (0, 1], got {}", free_fraction));
  }
  const double weights_per_gpu = static_cast<double>(model_.weight_bytes()) / tp_;
  const double free_after_profile =
      static_cast<double>(gpu_.memory_bytes) - weights_per_gpu - activation_reserve_bytes(activation_tokens, sampler_rows);
  return kv_tokens_in(free_after_profile * free_fraction);
}

int64_t CostModel::kv_tokens_in(double kv_bytes_per_gpu) const {
  // Every GPU holds its share of the heads of every token, so the replica's capacity in tokens
  // is one GPU's free memory over one GPU's bytes per token.
  return static_cast<int64_t>(
      std::floor(kv_bytes_per_gpu / static_cast<double>(kv_bytes_per_token_per_gpu(model_, tp_))));
}

}  // namespace batchsim
