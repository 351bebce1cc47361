// batchsim — the roofline cost model of one iteration (see cost_model.h, roofline.h).
#include "hwmodel/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "hwmodel/base/error.h"
#include "hwmodel/mla.h"

namespace batchsim {

CostModel::CostModel(ModelSpec model, HardwareProfile gpu, int tensor_parallel, EngineProfile engine)
    : CostModel(std::move(model), std::move(gpu), ParallelLayout{tensor_parallel}, std::move(engine)) {}

CostModel::CostModel(ModelSpec model, HardwareProfile gpu, ParallelLayout layout, EngineProfile engine)
    : model_(std::move(model)), gpu_(std::move(gpu)), tp_(layout.tp), layout_(layout), engine_(std::move(engine)) {
  if (tp_ < 1) throw UserError(fmt::format("tensor parallel degree must be >= 1, got {}", tp_));
  // The FFN tp must split: a dense model's, or under plain TP an MoE model's experts (with
  // expert parallelism check_layout checks the experts' own split).
  const bool ffn_on_tp = !model_.is_moe() || layout_.is_plain_tp();
  if (model_.num_heads % tp_ != 0 || (ffn_on_tp && model_.ffn_size % tp_ != 0)) {
    // vLLM refuses the same (vllm/config.py verify_with_parallel_config).
    throw UserError(fmt::format("model '{}': {} attention heads and FFN size {} must be divisible by --tp {}",
                                model_.name, model_.num_heads, model_.ffn_size, tp_));
  }
  if (model_.is_moe() && (model_.experts_per_token < 1 || model_.experts_per_token > model_.num_experts ||
                          model_.shared_expert_ffn_size < 0 || model_.shared_expert_ffn_size % tp_ != 0 ||
                          model_.dense_ffn_size % tp_ != 0)) {
    // vLLM shards each expert's (and the shared expert's) intermediate size like a dense MLP.
    throw UserError(fmt::format("model '{}': top-{} of {} experts with shared expert FFN {} cannot run on --tp {}",
                                model_.name, model_.experts_per_token, model_.num_experts,
                                model_.shared_expert_ffn_size, tp_));
  }
  if (model_.num_kv_heads % tp_ != 0 && tp_ % model_.num_kv_heads != 0) {
    // KV heads are either split or replicated whole (vLLM QKVParallelLinear).
    throw UserError(
        fmt::format("model '{}': {} KV heads cannot be split over --tp {}", model_.name, model_.num_kv_heads, tp_));
  }
  check_layout(model_, layout_);
  if (gpu_.peak_flops <= 0 || gpu_.hbm_bytes_per_s <= 0) {
    throw UserError(fmt::format("GPU '{}': peak_flops and hbm_bytes_per_s must be > 0", gpu_.name));
  }
  if (layout_.gpus() > 1 && gpu_.interconnect_bytes_per_s <= 0) {
    throw UserError(fmt::format("GPU '{}' has no interconnect bandwidth, needed for --tp {}", gpu_.name, tp_));
  }
  if (layout_.gpus() > gpu_.node_gpus() && gpu_.internode_bytes_per_s <= 0) {
    throw UserError(
        fmt::format("{}: {} GPUs span more than one node of {}, and GPU '{}' has no "
                    "internode_bytes_per_s for the traffic between nodes",
                    layout_.text(), layout_.gpus(), gpu_.gpus_per_node, gpu_.name));
  }
  layer_gemms_ = layer_gemm_shapes(model_, tp_);
  moe_gemms_ = moe_gemm_shapes(model_, tp_);
  mla_gemms_ = mla_gemm_shapes(model_, tp_);
  if (model_.is_mla()) mla_decode_work_ = mla_decode_work_coefficients(model_, tp_);
  lm_head_ = lm_head_shape(model_, tp_);
  if (model_.is_moe() && model_.dense_layers > 0) {
    dense_layer_model_ = model_;
    dense_layer_model_.num_experts = dense_layer_model_.experts_per_token = 0;
    dense_layer_model_.shared_expert_ffn_size = dense_layer_model_.dense_layers = 0;
    dense_layer_model_.ffn_size = model_.dense_ffn_size;
    const auto dense = layer_gemm_shapes(dense_layer_model_, tp_);
    dense_up_ = dense[static_cast<int>(LayerGemm::mlp_up)];
    dense_down_ = dense[static_cast<int>(LayerGemm::mlp_down)];
  }
  if (model_.is_moe() && model_.shared_expert_ffn_size > 0) {
    // The shared experts' activation: a dense MLP of their FFN.
    shared_expert_model_ = model_;
    shared_expert_model_.num_experts = shared_expert_model_.experts_per_token = 0;
    shared_expert_model_.ffn_size = model_.shared_expert_ffn_size;
  }
  tiles_ = prefill_attention_tiles(gpu_, model_);
}

double CostModel::weight_bytes_per_gpu() const {
  const double all = static_cast<double>(model_.weight_bytes());
  double target = all / tp_;
  if (layout_.dp > 1) {
    // The routed experts split over every GPU of the replica, the rest over an attention rank.
    const double routed = model_.routed_expert_weight_bytes();
    target = (all - routed) / tp_ + routed / layout_.gpus();
  }
  // A drafter's weights sit beside the target's (vLLM loads them in the same worker).
  return with_drafter(target, [](const CostModel& draft) { return draft.weight_bytes_per_gpu(); });
}

double CostModel::kv_bytes_per_token_per_gpu_with_drafter() const {
  // The drafter's KV shares the pool (vLLM's KV cache spec holds the draft layers too).
  return with_drafter(static_cast<double>(kv_bytes_per_token_per_gpu(model_, tp_)), [](const CostModel& draft) {
    return static_cast<double>(kv_bytes_per_token_per_gpu(draft.model_, draft.tp_));
  });
}

template <class DraftPart>
double CostModel::with_drafter(double target, DraftPart&& draft_part) const {
  if (!speculative_.enabled() || !speculative_.drafts_on_gpu()) return target;
  // A draft model's own; EAGLE's and MTP's one decoder layer, an average layer of the target's.
  if (speculative_.method == DraftMethod::draft_model) return target + draft_part(*draft_model_);
  return target + target / model_.num_layers;
}

TokenCosts CostModel::token_costs(int64_t tokens, NonAttentionCache* memo) const {
  TokenCosts cost;
  cost.tokens = tokens;
  const double layers = model_.num_layers;
  const WeightFormat w_format = model_.weight_format;
  constexpr int kQkv = static_cast<int>(LayerGemm::qkv);
  constexpr int kO = static_cast<int>(LayerGemm::o);
  constexpr int kUp = static_cast<int>(LayerGemm::mlp_up);
  constexpr int kDown = static_cast<int>(LayerGemm::mlp_down);
  // With dp attention ranks this is one rank's part; the routed experts, which see every rank's
  // tokens, are the step's (moe_step).
  const bool routed_here = layout_.dp == 1;
  if (model_.is_moe()) {
    // Attention projections on the rank's tokens; the routed experts as one fused-MoE call on
    // their expert rank (moe_kernel.h), with the step's tokens when this rank is the step.
    cost.layer_gemm_s[kQkv] = layers * gemm_time_s(gpu_, layer_gemms_[kQkv], tokens, w_format);
    cost.layer_gemm_s[kO] = layers * gemm_time_s(gpu_, layer_gemms_[kO], tokens, w_format);
    if (routed_here && tokens > 0) {
      const FusedMoeTime t = routed_experts_time(tokens, memo);  // the expected loads once
      const auto [up_s, down_s] = routed_experts_split(t);
      cost.layer_gemm_s[kUp] = model_.moe_layers() * up_s;
      cost.layer_gemm_s[kDown] = model_.moe_layers() * down_s;
      cost.gemm_compute_bound = t.compute_bound();
    }
  } else {
    // A dense MLP on all the tokens: one "expert" of all of them (expected_expert_load).
    const ExpertLoad load = expected_expert_load(model_, tokens);
    for (int g = 0; g < kNumLayerGemms; ++g) {
      const bool mlp = g == kUp || g == kDown;
      const double layer_s =
          mlp ? grouped_gemm_time_s(gpu_, layer_gemms_[g], load.tokens_per_expert, load.experts, w_format)
              : gemm_time_s(gpu_, layer_gemms_[g], tokens, w_format);
      cost.layer_gemm_s[g] = layers * layer_s;
    }
    // The MLP up projection is the largest GEMM; its regime is the layer's.
    cost.gemm_compute_bound =
        grouped_gemm_compute_bound(gpu_, layer_gemms_[kUp], load.tokens_per_expert, load.experts, w_format);
  }
  if (model_.is_mla()) {
    // MLA's query up-projection follows the fused down-projection (mla_gemm_shapes).
    cost.layer_gemm_s[kQkv] += layers * gemm_time_s(gpu_, mla_gemms_.q_b, tokens, w_format);
  }
  if (model_.is_moe()) {
    // The router is unquantised (16-bit) and replicated; the shared expert runs on every token.
    const double moe_layers = model_.moe_layers();
    cost.layer_gemm_s[kUp] += moe_layers * (gemm_time_s(gpu_, moe_gemms_.router, tokens, WeightFormat::bf16) +
                                            gemm_time_s(gpu_, moe_gemms_.shared_up, tokens, w_format));
    cost.layer_gemm_s[kDown] += moe_layers * gemm_time_s(gpu_, moe_gemms_.shared_down, tokens, w_format);
    if (model_.dense_layers > 0) {
      const double dense_layers = model_.dense_layers;
      cost.layer_gemm_s[kUp] += dense_layers * gemm_time_s(gpu_, dense_up_, tokens, w_format);
      cost.layer_gemm_s[kDown] += dense_layers * gemm_time_s(gpu_, dense_down_, tokens, w_format);
    }
  }
  for (double s : cost.layer_gemm_s) cost.gemm_s += s;
  if (model_.is_moe() && !routed_here) {
    cost.gemm_compute_bound = gemm_compute_bound(gpu_, layer_gemms_[kQkv], tokens, w_format);
  }

  // Per layer, the memory-bound kernels Vidur times (vidur/profiling/mlp/mlp_impl.py): two
  // norms, rotary embedding, the MLP activation and one residual add (vLLM fuses the other
  // residual add into the next RMSNorm, fused_add_rms_norm). The embedding runs once.
  // Models with learned positions (OPT) are charged the rotary kernel too: it is < 1% of a layer.
  auto layer_op_s = [&](ElementwiseOp op) {
    return elementwise_time_s(gpu_, op, elementwise_bytes(model_, tp_, op, tokens));
  };
  if (!model_.is_moe()) {
    cost.elementwise_s = layers * (2 * layer_op_s(ElementwiseOp::norm) + layer_op_s(ElementwiseOp::rope) +
                                   layer_op_s(ElementwiseOp::activation) + layer_op_s(ElementwiseOp::residual_add)) +
                         layer_op_s(ElementwiseOp::embedding);
  } else {
    // The routed experts' activation and top-k combine are in the fused-MoE call; an MoE layer
    // adds its shared expert's activation, a dense layer its MLP's.
    auto activation_s = [&](const ModelSpec& m) {
      return elementwise_time_s(gpu_, ElementwiseOp::activation,
                                elementwise_bytes(m, tp_, ElementwiseOp::activation, tokens));
    };
    const double shared_activation_s = model_.shared_expert_ffn_size > 0 ? activation_s(shared_expert_model_) : 0;
    const double dense_activation_s = model_.dense_layers > 0 ? activation_s(dense_layer_model_) : 0;
    cost.elementwise_s = layers * (2 * layer_op_s(ElementwiseOp::norm) + layer_op_s(ElementwiseOp::rope) +
                                   layer_op_s(ElementwiseOp::residual_add)) +
                         model_.moe_layers() * shared_activation_s + model_.dense_layers * dense_activation_s +
                         layer_op_s(ElementwiseOp::embedding);
  }

  // Two all-reduces per layer: after the attention output projection and after the MLP down
  // projection (Megatron-LM, Shoeybi et al. 2019, section 3). Expert parallelism on one
  // attention rank (TensorRT-LLM's TEP: every GPU holds all tokens, each its own experts) sums
  // the experts' outputs the same way. With dp ranks, an MoE layer's exchange is the step's
  // (moe_step): here only the attention's and the dense layers' all-reduces, on the rank's tp.
  const double message_s = allreduce_s(allreduce_message_bytes(model_, tokens));
  cost.communication_s = routed_here ? 2 * layers * message_s : (layers + model_.dense_layers) * message_s;
  // A norm of q and k over all heads sums each token's two fp32 partial variances over the ranks,
  // once per attention layer (forward_qk concatenates them into one all-reduce).
  if (model_.qk_norm_across_heads) cost.communication_s += layers * allreduce_s(static_cast<double>(tokens) * 2 * 4);
  return cost;
}

FusedMoeCall CostModel::fused_moe_call(int64_t tokens) const {
  FusedMoeCall call;
  call.tokens = tokens;
  call.hidden = model_.hidden_size;
  call.intermediate = model_.ffn_size / layout_.expert_tp();
  call.top_k = model_.experts_per_token;
  call.experts = model_.num_experts;
  call.ep = layout_.ep;
  call.format = model_.expert_weight_format;
  call.gated = model_.gated_mlp;
  call.routing = moe_routing_;
  return call;
}

MoeRankLoad CostModel::routed_load(const FusedMoeCall& call, NonAttentionCache* memo) const {
  const int64_t tokens = call.tokens;
  if (call.routing.kind != MoeRoutingKind::power_law || tokens <= kExactLoadTokens) return expected_moe_load(call);
  const auto exact = [&call](int64_t n) {
    FusedMoeCall at = call;
    at.tokens = n;
    return expected_moe_load(at);
  };
  const auto [lo, hi] = moe_load_grid_bracket(tokens);
  if (memo == nullptr) return interpolate_moe_load(exact(lo), lo, exact(hi), hi, tokens, call.top_k);
  const MoeRankLoad& lo_load = memo->moe_load(lo, exact);
  return interpolate_moe_load(lo_load, lo, memo->moe_load(hi, exact), hi, tokens, call.top_k);
}

FusedMoeTime CostModel::routed_experts_time(int64_t tokens, NonAttentionCache* memo) const {
  const FusedMoeCall call = fused_moe_call(tokens);
  return fused_moe_time(gpu_, call, routed_load(call, memo));
}

std::pair<double, double> CostModel::routed_experts_s(int64_t tokens, NonAttentionCache* memo) const {
  // One MoE layer's routed experts on the busiest expert rank: vLLM's fused-MoE call (routing,
  // the w13 and w2 grouped GEMMs, the activation and the top-k combine), fitted on NVIDIA's H100
  // tables where the profile has the kernel's fit (moe_kernel.h). Reported split as the GEMMs
  // split their weights (w13 holds gate and up: 2 of 3 parts when gated), the fixed part with
  // the up projection and the per-row work with the down one.
  if (tokens <= 0) return {0, 0};
  return routed_experts_split(routed_experts_time(tokens, memo));
}

std::pair<double, double> CostModel::routed_experts_split(const FusedMoeTime& t) const {
  const double up_share = model_.gated_mlp ? 2.0 / 3 : 0.5;
  return {t.fixed_s + t.gemm_s * up_share, t.gemm_s * (1 - up_share) + t.rows_s};
}

double CostModel::exchange_s(double bytes_per_gpu, int gpus) const {
  if (gpus <= 1 || bytes_per_gpu <= 0) return 0;
  const int node = gpu_.node_gpus();
  if (gpus <= node) return gpu_.interconnect_latency_s + bytes_per_gpu / gpu_.interconnect_bytes_per_s;
  // Spread evenly over the other GPUs, (node - 1) / (gpus - 1) of the traffic stays in the node
  // and the rest crosses the NICs; the two links run at once (DeepEP's normal kernels forward
  // over NVLink and RDMA together: docs/REFERENCE-moe-spec-offload.md 1.3).
  const double inside = static_cast<double>(node - 1) / (gpus - 1);
  return gpu_.internode_latency_s + std::max(bytes_per_gpu * inside / gpu_.interconnect_bytes_per_s,
                                             bytes_per_gpu * (1 - inside) / gpu_.internode_bytes_per_s);
}

CostModel::MoeStepCost CostModel::moe_step(int64_t tokens, NonAttentionCache* memo) const {
  MoeStepCost c;
  if (!model_.is_moe() || tokens <= 0) return c;
  const double moe_layers = model_.moe_layers();
  const auto [up_s, down_s] = routed_experts_s(tokens, memo);
  c.experts_up_s = moe_layers * up_s;
  c.experts_down_s = moe_layers * down_s;
  if (layout_.dp == 1) return c;  // the experts' outputs are summed by the layer's all-reduce
  const double hidden_bytes = static_cast<double>(model_.hidden_size) * kActivationBytes;
  const int gpus = layout_.gpus();
  const double rank_tokens = static_cast<double>(tokens) / layout_.dp;
  double per_layer_s = 0;
  if (layout_.ep > 1 && engine_.moe_all_to_all) {
    // All-to-all (DeepEP; TensorRT-LLM's alltoall): each token goes to the ranks that hold its k
    // experts, the others of which a given rank is with probability 1 - (1 - 1/ep)^k, and comes
    // back from them. Dispatch sends FP8 activations (DeepEP's and the engines' default), the
    // combine 16-bit ones (docs/REFERENCE-moe-spec-offload.md 1.3).
    const double ep = layout_.ep;
    const double remote = (ep - 1) * (1 - std::pow(1 - 1 / ep, model_.experts_per_token));
    const double dispatch = rank_tokens * remote * model_.hidden_size * 1.0;
    const double combine = rank_tokens * remote * hidden_bytes;
    per_layer_s = exchange_s(dispatch, layout_.ep) + exchange_s(combine, layout_.ep);
  } else {
    // Gather every rank's tokens onto every GPU before the experts, and reduce-scatter their
    // outputs after (vLLM's default all2all backend, allgather_reducescatter; SGLang's
    // dp_gather / dp_scatter): each GPU receives the other ranks' share and sends its own.
    const double others = static_cast<double>(tokens) - rank_tokens;
    per_layer_s = 2 * exchange_s(others * hidden_bytes, gpus);
  }
  c.exchange_s = moe_layers * per_layer_s;
  return c;
}

double CostModel::lm_head_s(int64_t sampled) const {
  // vLLM does not quantise the LM head: its weights stay 16-bit under --quantization fp8.
  return gemm_time_s(gpu_, lm_head_, sampled, WeightFormat::bf16);
}

IterationCost CostModel::iteration(const BatchShape& shape, NonAttentionCache* memo) const {
  if (shape.empty()) return IterationCost{};
  const int64_t tokens = shape.total_tokens();
  if (memo == nullptr) {
    return iteration_from(shape, token_costs(tokens, nullptr), lm_head_s(shape.num_sampled), nullptr);
  }
  const TokenCosts& t = memo_token_costs(tokens, *memo);
  return iteration_from(shape, t, memo_lm_head_s(shape.num_sampled, *memo), memo);
}

IterationCost CostModel::advance_decodes(const IterationCost& previous, const BatchShape& shape,
                                         NonAttentionCache* memo) const {
  IterationCost cost = previous;
  advance_decodes_in_place(cost, shape, memo);
  return cost;
}

void CostModel::advance_decodes_in_place(IterationCost& cost, const BatchShape& shape, NonAttentionCache* memo) const {
  if (!shape.prefills.empty()) {
    throw std::logic_error("CostModel::advance_decodes: a batch with prefills is not a repeated decode step");
  }
  if (shape.empty()) {
    cost = IterationCost{};
    return;
  }
  // Tokens, rows sampled and sequences are the previous step's, so are all but the decodes'
  // attention and what is summed from it (the engine's times among them).
  cost.decode_attention_s = decode_attention_s(shape, memo);
  settle_iteration(shape, cost, memo);
}

IterationCost CostModel::step(std::span<const BatchShape> ranks, NonAttentionCache* memo,
                              std::vector<IterationCost>* rank_costs, std::span<const uint8_t> repeated) const {
  if (ranks.size() == 1 && rank_costs == nullptr) return iteration(ranks.front(), memo);
  const bool any_repeated = std::any_of(repeated.begin(), repeated.end(), [](uint8_t f) { return f != 0; });
  if (!repeated.empty() && (repeated.size() != ranks.size() ||
                            (any_repeated && (rank_costs == nullptr || rank_costs->size() != ranks.size())))) {
    throw std::logic_error(fmt::format("CostModel::step: {} repeated-rank flags for {} rank batches and {} rank costs",
                                       repeated.size(), ranks.size(), rank_costs != nullptr ? rank_costs->size() : 0));
  }
  std::vector<IterationCost> own;
  std::vector<IterationCost>& costs = rank_costs != nullptr ? *rank_costs : own;
  costs.resize(ranks.size());
  // (lockstep passes an idle rank by; every other rank's cost is written below.)
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].empty()) costs[r] = IterationCost{};
  }
  return lockstep(ranks, memo, [&](size_t r, const BatchShape& batch) -> const IterationCost& {
    if (!repeated.empty() && repeated[r] != 0) {
      advance_decodes_in_place(costs[r], batch, memo);
      return costs[r];
    }
    return costs[r] = iteration(batch, memo);
  });
}

IterationCost CostModel::advance_step(std::span<const BatchShape> ranks, std::span<IterationCost> rank_costs,
                                      NonAttentionCache* memo) const {
  if (rank_costs.size() != ranks.size()) {
    throw std::logic_error(
        fmt::format("CostModel::advance_step: {} rank costs for {} rank batches", rank_costs.size(), ranks.size()));
  }
  return lockstep(ranks, memo, [&](size_t r, const BatchShape& batch) -> const IterationCost& {
    advance_decodes_in_place(rank_costs[r], batch, memo);
    return rank_costs[r];
  });
}

template <class RankCost>
IterationCost CostModel::lockstep(std::span<const BatchShape> ranks, NonAttentionCache* memo,
                                  RankCost&& rank_cost) const {
  if (ranks.size() == 1) return rank_cost(0, ranks.front());
  if (static_cast<int>(ranks.size()) != layout_.dp) {
    throw std::logic_error(
        fmt::format("CostModel: a lockstep step of {} rank batches for {} DP ranks (step, advance_step)", ranks.size(),
                    layout_.dp));
  }
  // An idle rank runs the engine's dummy batch of one token while another rank has work
  // (vLLM's execute_dummy_batch, v1/engine/core.py DPEngineCoreProc; SGLang's IDLE forward).
  constexpr int64_t kDummyTokens = 1;
  const IterationCost* slowest_rank = nullptr;  // the first of the slowest
  int64_t tokens = 0, most_tokens = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const BatchShape& rank = ranks[r];
    const int64_t n = rank.empty() ? kDummyTokens : rank.total_tokens();
    tokens += n;
    most_tokens = std::max(most_tokens, n);
    if (rank.empty()) continue;
    const IterationCost& c = rank_cost(r, rank);
    if (slowest_rank == nullptr || c.total_s > slowest_rank->total_s) slowest_rank = &c;
  }
  if (slowest_rank == nullptr) return IterationCost{};
  IterationCost slowest = *slowest_rank;
  // Under CUDA graphs every rank brings the largest rank's token count to the MoE layers.
  if (engine_.moe_pad_dp_to_max && engine_.cuda_graph_max_tokens > 0 && most_tokens <= engine_.cuda_graph_max_tokens) {
    tokens = most_tokens * layout_.dp;
  }
  const MoeStepCost moe = memo != nullptr
                              ? memo->moe_step(tokens, [this, memo](int64_t n) { return moe_step(n, memo); })
                              : moe_step(tokens);
  slowest.layer_gemm_s[static_cast<int>(LayerGemm::mlp_up)] += moe.experts_up_s;
  slowest.layer_gemm_s[static_cast<int>(LayerGemm::mlp_down)] += moe.experts_down_s;
  slowest.gemm_s += moe.experts_up_s + moe.experts_down_s;
  slowest.communication_s += moe.exchange_s;
  slowest.total_s += moe.experts_up_s + moe.experts_down_s + moe.exchange_s;
  return slowest;
}

double CostModel::mla_absorb_s(int64_t decodes) const {
  // vLLM keeps the absorbed W_UK and W_UV in 16-bit (MLACommonImpl.process_weights_after_loading
  // dequantises kv_b for them).
  const double rows = static_cast<double>(decodes);
  const double heads = static_cast<double>(mla_gemms_.heads_per_gpu);
  return grouped_gemm_time_s(gpu_, mla_gemms_.uk, rows, heads, WeightFormat::bf16) +
         grouped_gemm_time_s(gpu_, mla_gemms_.uv, rows, heads, WeightFormat::bf16);
}

// Multi-head latent attention as vLLM runs it (MLACommonImpl, layers/attention/mla_attention.py
// at local-inference-lab/vllm@28be48f). Prefill decompresses: the latent of every token a chunk
// attends to (its cached context and itself) goes through kv_b to each head's K and V, then
// FlashAttention runs as MHA with head_dim nope + rope. Decode absorbs kv_b's halves into the
// query and the output (uk, uv: a batched GEMM per head) and reads the latent once for all of
// the GPU's heads, as one KV head of kv_lora_rank + rope (FlashMLA). The latent is whole on
// every GPU of the rank, so tp divides the heads' work but not the bytes read.
double CostModel::mla_prefill_attention_s(const BatchShape& shape) const {
  if (shape.prefills.empty()) return 0;
  OperatorWork prefill;
  int64_t decompressed = 0;
  for (const PrefillChunk& chunk : shape.prefills) {
    prefill += mla_prefill_attention_work(model_, tp_, chunk.new_tokens, chunk.context_before);
    decompressed += chunk.context_before + chunk.new_tokens;
  }
  const double layers = model_.num_layers;
  return layers * (mla_prefill_attention_time_s(gpu_, prefill) +
                   gemm_time_s(gpu_, mla_gemms_.kv_b, decompressed, model_.weight_format));
}

double CostModel::mla_decode_attention_s(const BatchShape& shape, NonAttentionCache* memo) const {
  if (shape.num_decodes <= 0) return 0;
  // A speculative step's decodes verify 1 + k query tokens each (the most of any sets the tiles).
  const int64_t queries = 1 + (shape.decode_draft_tokens + shape.num_decodes - 1) / shape.num_decodes;
  const MlaDecodeWork::FlopsBytes decode =
      mla_decode_work_.flops_bytes(shape.num_decodes, shape.decode_context_sum, queries);
  double absorb_s = 0;
  if (memo == nullptr) {
    absorb_s = mla_absorb_s(shape.num_decodes);
  } else {
    auto& [rows, seconds] = memo->mla_absorb_slot(shape.num_decodes);
    if (rows != shape.num_decodes) {
      rows = shape.num_decodes;
      seconds = mla_absorb_s(rows);
    }
    absorb_s = seconds;
  }
  const double layers = model_.num_layers;
  return layers * (mla_decode_attention_time_s(gpu_, decode) + absorb_s);
}

// All prefill chunks run in one variable-length attention kernel per layer (FlashAttention's
// varlen API, as vLLM calls it), so their work is summed under one roofline. Layers that see
// only a window of the last W keys (gpt-oss) or their chunk of C (Llama 4) cost the same kernel
// over that span: a chunk's prior context is cut to the window, or to its place in the current
// chunk; a decode reads at most W (or C) keys, summed as min(context sum, decodes x span),
// which is exact when every context is beyond the span or every one within it. A sliding window
// is the kernel's own (window_tokens); a chunk of Llama 4's chunked attention is full attention
// from the chunk's start. The layer kinds are summed in one order: full, window, chunked.
template <class LayerKindSeconds>
double CostModel::over_layer_kinds(LayerKindSeconds&& seconds) const {
  double s = seconds(0, false, model_.full_attention_layers());
  if (model_.sliding_window_layers > 0) s += seconds(model_.sliding_window, false, model_.sliding_window_layers);
  if (model_.chunked_attention_layers > 0) {
    s += seconds(model_.attention_chunk_size, true, model_.chunked_attention_layers);
  }
  return s;
}

double CostModel::kv_concat_s(double context_tokens) const {
  // Concatenating a token onto a layer's cache reads the old cache and writes the new one:
  // twice the context's K/V bytes per layer, streamed (HF DynamicCache / past_key_values).
  const double per_token_layer = static_cast<double>(kv_bytes_per_token_per_gpu(model_, tp_)) / model_.num_layers;
  return model_.num_layers * (2 * context_tokens * per_token_layer / (gpu_.hbm_bytes_per_s * gpu_.hbm_efficiency));
}

double CostModel::prefill_attention_s(const BatchShape& shape) const {
  double s = 0;
  if (model_.is_mla()) {
    s = mla_prefill_attention_s(shape);
  } else {
    s = over_layer_kinds([&](int64_t span, bool chunked, double count) {
      if (count <= 0) return 0.0;
      OperatorWork prefill;
      for (const PrefillChunk& chunk : shape.prefills) {
        const int64_t before = chunked && span > 0 ? chunk.context_before % span : chunk.context_before;
        prefill += prefill_attention_work(model_, tp_, chunk.new_tokens, before, tiles_, chunked ? 0 : span);
      }
      return count * prefill_attention_time_s(gpu_, prefill);
    });
  }
  if (engine_.kv_cache_write == KvCacheWrite::concat && !shape.prefills.empty()) {
    double prefill_context = 0;
    for (const PrefillChunk& chunk : shape.prefills) prefill_context += chunk.context_before + chunk.new_tokens;
    s += kv_concat_s(prefill_context);
  }
  return s;
}

double CostModel::decode_attention_s(const BatchShape& shape, NonAttentionCache* memo) const {
  double s = 0;
  if (model_.is_mla()) {
    s = mla_decode_attention_s(shape, memo);
  } else {
    s = over_layer_kinds([&](int64_t span, bool chunked, double count) {
      if (count <= 0) return 0.0;
      int64_t context_sum = shape.decode_context_sum, context_max = shape.decode_context_max;
      if (chunked && span > 0) {
        context_sum = std::min(context_sum, shape.num_decodes * span);
        context_max = std::min(context_max, span);
      }
      OperatorWork decode =
          decode_attention_work(model_, tp_, shape.num_decodes, context_sum, context_max, chunked ? 0 : span);
      if (shape.decode_draft_tokens > 0) {
        // Speculative verification: each sequence's 1 + k queries read its KV once.
        decode.flops *=
            static_cast<double>(shape.num_decodes + shape.decode_draft_tokens) / static_cast<double>(shape.num_decodes);
      }
      return count * decode_attention_time_s(gpu_, decode, shape.num_decodes);
    });
  }
  if (engine_.kv_cache_write == KvCacheWrite::concat && shape.num_decodes > 0) {
    s += kv_concat_s(static_cast<double>(shape.decode_context_sum));
  }
  return s;
}

IterationCost CostModel::iteration_from(const BatchShape& shape, const TokenCosts& t, double lm_head_seconds,
                                        NonAttentionCache* memo) const {
  IterationCost cost;
  cost.layer_gemm_s = t.layer_gemm_s;
  cost.gemm_s = t.gemm_s;
  cost.gemm_compute_bound = t.gemm_compute_bound;
  cost.lm_head_s = lm_head_seconds;
  cost.elementwise_s = t.elementwise_s;
  cost.communication_s = t.communication_s;
  cost.prefill_attention_s = prefill_attention_s(shape);
  cost.decode_attention_s = decode_attention_s(shape, memo);
  // (t.tokens is read before the drafter's passes, which may reuse the memo slot that `t` is.)
  close_iteration(shape, t.tokens, cost, memo);
  return cost;
}

void CostModel::close_iteration(const BatchShape& shape, int64_t tokens, IterationCost& cost,
                                NonAttentionCache* memo) const {
  // Launches run ahead of the GPU asynchronously; the GPU waits only for what they lag behind.
  // Whether they replay a graph depends on the tokens and, for some engines, on whether the
  // iteration computes a prompt (EngineProfile::launch_s).
  cost.launch_s = engine_.launch_s(model_.num_layers, tokens, !shape.prefills.empty());
  const int64_t sequences = static_cast<int64_t>(shape.prefills.size()) + shape.num_decodes;
  cost.cpu_s = engine_.cpu.seconds(sequences, tp_);
  cost.residual_s = engine_.residual.seconds(sequences, tp_);
  settle_iteration(shape, cost, memo);
}

void CostModel::settle_iteration(const BatchShape& shape, IterationCost& cost, NonAttentionCache* memo) const {
  if (speculative_.drafts_on_gpu()) cost.draft_s = draft_s(shape, cost, memo);
  const double kernels_s = cost.gemm_s + cost.prefill_attention_s + cost.decode_attention_s + cost.lm_head_s +
                           cost.elementwise_s + cost.communication_s + cost.draft_s;
  const double device_s = std::max(kernels_s, cost.launch_s);
  cost.overhead_s = (device_s - kernels_s) +
                    (engine_.cpu_overlaps_gpu ? std::max(0.0, cost.cpu_s - device_s) : cost.cpu_s) + cost.residual_s;
  cost.total_s = kernels_s + cost.overhead_s;
}

void CostModel::set_speculative(SpeculativeDecoding spec, std::shared_ptr<const CostModel> draft_model) {
  if (spec.method == DraftMethod::draft_model && spec.enabled() && draft_model == nullptr) {
    throw std::logic_error("CostModel::set_speculative: a draft model's drafts need its cost model");
  }
  speculative_ = std::move(spec);
  draft_model_ = std::move(draft_model);
}

const TokenCosts& CostModel::memo_token_costs(int64_t tokens, NonAttentionCache& memo) const {
  TokenCosts& slot = memo.token_slot(tokens);
  if (slot.tokens != tokens) slot = token_costs(tokens, &memo);
  return slot;
}

double CostModel::memo_lm_head_s(int64_t sampled, NonAttentionCache& memo) const {
  auto& [rows, seconds] = memo.lm_head_slot(sampled);
  if (rows != sampled) {
    rows = sampled;
    seconds = lm_head_s(sampled);
  }
  return seconds;
}

double CostModel::draft_s(const BatchShape& shape, const IterationCost& cost, NonAttentionCache* memo) const {
  // The sequences that sample this step draft the next one's tokens.
  const int64_t sequences = shape.num_sampled - shape.decode_draft_tokens;
  const int64_t k = speculative_.k;
  if (sequences <= 0 || k <= 0) return 0;
  if (speculative_.method == DraftMethod::draft_model) {
    BatchShape first = shape;
    first.num_sampled = sequences;
    first.decode_draft_tokens = 0;
    const IterationCost f = draft_model_->iteration(first);
    double s = f.total_s - f.overhead_s;
    if (k > 1) {
      BatchShape next;
      next.num_decodes = sequences;
      next.num_sampled = sequences;
      next.decode_context_sum = shape.decode_context_sum + shape.num_decodes;
      next.decode_context_max = shape.decode_context_max + 1;
      for (const PrefillChunk& c : shape.prefills) {
        next.decode_context_sum += c.context_before + c.new_tokens + 1;
        next.decode_context_max = std::max(next.decode_context_max, c.context_before + c.new_tokens + 1);
      }
      const IterationCost n = draft_model_->iteration(next);
      s += static_cast<double>(k - 1) * (n.total_s - n.overhead_s);
    }
    return s;
  }
  // EAGLE, EAGLE-3, MTP: one layer of the target per pass.
  const double layers = model_.num_layers;
  auto layer_s = [&](int64_t tokens) {
    const TokenCosts& t = memo != nullptr ? memo_token_costs(tokens, *memo) : token_costs(tokens, nullptr);
    return (t.gemm_s + t.elementwise_s + t.communication_s) / layers;
  };
  const double head_s = memo != nullptr ? memo_lm_head_s(sequences, *memo) : lm_head_s(sequences);
  double s = layer_s(shape.total_tokens()) + (cost.prefill_attention_s + cost.decode_attention_s) / layers + head_s;
  if (k > 1) {
    // One token per sequence, attending to what the decodes read.
    const double attention_s = cost.decode_attention_s / layers;
    s += static_cast<double>(k - 1) * (layer_s(sequences) + attention_s + head_s);
  }
  return s;
}

double CostModel::allreduce_s(double message_bytes) const {
  // An engine's custom all-reduce works inside one node (vLLM's CustomAllreduce turns itself off
  // for a group that spans nodes: vllm/distributed/device_communicators/custom_all_reduce.py).
  if (engine_.allreduce == AllReduceImpl::custom && message_bytes <= engine_.custom_allreduce_max_bytes &&
      tp_ <= gpu_.node_gpus()) {
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

int64_t CostModel::kv_capacity_tokens(double gpu_memory_utilization, int64_t activation_tokens, int64_t sampler_rows,
                                      WindowKv window) const {
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1)) {
    throw UserError(fmt::format("gpu memory utilization must be in (0, 1], got {}", gpu_memory_utilization));
  }
  const double weights_per_gpu = weight_bytes_per_gpu();
  return kv_tokens_in(static_cast<double>(gpu_.memory_bytes) * gpu_memory_utilization - weights_per_gpu -
                          activation_reserve_bytes(activation_tokens, sampler_rows),
                      window);
}

int64_t CostModel::kv_capacity_tokens_static(double mem_fraction_static, WindowKv window) const {
  if (!(mem_fraction_static > 0 && mem_fraction_static < 1)) {
    throw UserError(fmt::format("mem_fraction_static must be in (0, 1), got {}", mem_fraction_static));
  }
  const double weights_per_gpu = weight_bytes_per_gpu();
  return kv_tokens_in(
      static_cast<double>(gpu_.memory_bytes) * mem_fraction_static - weights_per_gpu - kRuntimeReserveBytes, window);
}

int64_t CostModel::kv_capacity_tokens_of_free(double free_fraction, int64_t activation_tokens, int64_t sampler_rows,
                                              WindowKv window) const {
  if (!(free_fraction > 0 && free_fraction <= 1)) {
    throw UserError(fmt::format("free_gpu_memory_fraction must be in (0, 1], got {}", free_fraction));
  }
  const double weights_per_gpu = weight_bytes_per_gpu();
  const double free_after_profile = static_cast<double>(gpu_.memory_bytes) - weights_per_gpu -
                                    activation_reserve_bytes(activation_tokens, sampler_rows);
  return kv_tokens_in(free_after_profile * free_fraction, window);
}

int64_t CostModel::kv_tokens_in(double kv_bytes_per_gpu, WindowKv window) const {
  // Every GPU holds its share of the heads of every token, so the replica's capacity in tokens
  // is one GPU's free memory over one GPU's bytes per token (of the layers the pool's token
  // holds: WindowKv).
  double per_token = kv_bytes_per_token_per_gpu_with_drafter();
  const int window_layers = model_.sliding_window_layers;
  if (window != WindowKv::as_full && window_layers > 0 && window_layers < model_.num_layers) {
    const double per_layer = per_token / model_.num_layers;
    const double share = window == WindowKv::hybrid ? 0.0 : 0.8;  // SGLang's swa_full_tokens_ratio
    per_token = per_layer * (model_.num_layers - window_layers + share * window_layers);
  }
  return static_cast<int64_t>(std::floor(kv_bytes_per_gpu / per_token));
}

int64_t CostModel::sliding_window_side_blocks(int32_t block_size) const {
  const int window_layers = model_.sliding_window_layers;
  const int other_layers = model_.num_layers - window_layers;
  if (window_layers <= 0 || other_layers <= 0 || model_.sliding_window <= 0 || block_size < 1) return 0;
  const int64_t per_layer = (model_.sliding_window - 1 + block_size - 1) / block_size + 1;
  return (window_layers * per_layer + other_layers - 1) / other_layers;
}

}  // namespace batchsim
