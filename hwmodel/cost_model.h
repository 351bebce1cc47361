// batchsim — the roofline cost model: how long one iteration of a batch takes.
//
// The simulator asks "how long does this iteration take?"; the cost model answers from the
// batch's *shape* only (prefill chunks with their context offsets, decode contexts, how many
// sequences sample a token) and keeps no scheduler state. Per transformer layer and operator:
//   time = max(FLOPs / (peak_flops * eta_c), bytes / (hbm_bytes_per_s * eta_m)) + launch
// summed over operators and layers, plus the LM head for sampling sequences only, plus
// tensor-parallel all-reduces (DESIGN.md, "Cost model"). The engine (engine_profile.h) adds
// what the serving software costs: its CPU work per iteration (in series with the GPU or
// overlapped), host launch time where it outruns the kernels, its all-reduce implementation
// and how it writes the KV cache.
// An MoE layer's MLP is its router, the routed experts as one grouped GEMM per projection over
// the experts the iteration's tokens touch (expected_expert_load in roofline.h), and its shared
// expert; all of it is reported in the layer's mlp_up / mlp_down GEMM time. An MoE model's
// dense layers (DeepSeek's first three) run a dense MLP instead.
//
// Parallelism (parallel_layout.h): attention and the dense layers run on each attention rank's
// tp GPUs; the routed experts on their ep x moe_tp GPUs, each holding num_experts / ep experts of
// ffn_size / moe_tp. With dp attention ranks, `step` times one step of all of them in lockstep
// (vLLM's DPEngineCoreProc runs a dummy batch on an idle rank so that every rank joins every MoE
// collective, v1/engine/core.py; SGLang's idle batches, scheduler_dp_attn_mixin.py): the
// slowest rank's attention and dense part, then the MoE layers over every rank's tokens and the
// exchanges that bring the tokens to their experts and back.
//
// Thread safety: a CostModel is immutable after construction; `iteration` is const and may be
// called from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "hwmodel/engine_profile.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/mla.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/moe_kernel.h"
#include "hwmodel/parallel_layout.h"
#include "hwmodel/roofline.h"
#include "hwmodel/speculative.h"

namespace batchsim {

struct PrefillChunk {
  int64_t new_tokens = 0;      // tokens computed in this iteration
  int64_t context_before = 0;  // tokens of this sequence already in the KV cache
};

// The shape of one iteration. Decode sequences are kept as aggregates so that building and
// costing a shape is O(number of prefill chunks), not O(batch size).
struct BatchShape {
  std::vector<PrefillChunk> prefills;
  int64_t num_decodes = 0;         // sequences computing one token after their context
  int64_t decode_context_sum = 0;  // sum over decodes of context_before + 1
  int64_t decode_context_max = 0;
  // Speculative decoding: draft tokens the decodes verify beyond their one token each (a decode
  // with k drafts computes 1 + k query tokens over its context).
  int64_t decode_draft_tokens = 0;
  int64_t num_sampled = 0;  // rows that run the LM head: sampling sequences, and verified drafts

  void clear() {
    prefills.clear();
    num_decodes = decode_context_sum = decode_context_max = decode_draft_tokens = num_sampled = 0;
  }
  void add_prefill(int64_t new_tokens, int64_t context_before) { prefills.push_back({new_tokens, context_before}); }
  void add_decode(int64_t context_before) {
    ++num_decodes;
    decode_context_sum += context_before + 1;
    if (context_before + 1 > decode_context_max) decode_context_max = context_before + 1;
  }
  int64_t prefill_tokens() const {
    int64_t n = 0;
    for (const auto& p : prefills) n += p.new_tokens;
    return n;
  }
  int64_t total_tokens() const { return prefill_tokens() + num_decodes + decode_draft_tokens; }
  bool empty() const { return prefills.empty() && num_decodes == 0; }
  // The same decodes `steps` iterations later (decode fast-forward): every row attends to
  // `steps` more tokens. Shapes without decodes (an idle DP rank's) stay as they are.
  void advance_decodes(int64_t steps) {
    if (num_decodes == 0) return;
    decode_context_sum += steps * num_decodes;
    decode_context_max += steps;
  }
};

// Seconds per part of one iteration; `total_s` is their sum.
struct IterationCost {
  double gemm_s = 0;  // all layers' QKV, O, MLP GEMMs (sum of layer_gemm_s)
  // (MoE: mlp_up holds the router, the routed experts' up[/gate] and the shared expert's;
  // mlp_down the routed and shared experts' down projections.)
  double prefill_attention_s = 0;
  double decode_attention_s = 0;
  double lm_head_s = 0;
  // Speculative decoding: the drafter's forward passes (CostModel, "Speculative decoding").
  double draft_s = 0;
  double elementwise_s = 0;  // norms, rotary embedding, MLP activation, residual add, embedding
  double communication_s = 0;
  // What the engine adds beyond the kernels: its CPU work that the GPU waits for (all of it, or
  // with an overlapping engine the part beyond the GPU time) plus the time the GPU waits for
  // kernel launches that fall behind it.
  double overhead_s = 0;
  // What overhead_s is made of (CostModel::close_iteration), by the iteration's tokens and
  // sequences alone, which a repeated decode step keeps: the launches' time (the GPU waits for
  // what they lag behind its kernels), the engine's CPU time, and its residual time.
  double launch_s = 0, cpu_s = 0, residual_s = 0;
  double total_s = 0;
  bool gemm_compute_bound = false;  // whether the layer GEMMs hit the FLOP roof
  // gemm_s split by operator (indexed by LayerGemm), summed over layers.
  std::array<double, kNumLayerGemms> layer_gemm_s{};
};

// The parts of an iteration's cost that depend on its token count alone: the GEMMs, the
// elementwise kernels, the all-reduces and the launches. (The rest of what is not attention is
// cheap or has few keys: the LM head by the rows sampled, the engine's CPU and residual time by
// the sequences.)
struct TokenCosts {
  int64_t tokens = -1;  // the key; -1: none yet
  std::array<double, kNumLayerGemms> layer_gemm_s{};
  double gemm_s = 0, elementwise_s = 0, communication_s = 0;
  bool gemm_compute_bound = false;
};

// Token costs and LM-head times by key, for a caller that costs many iterations with one cost
// model (a replica): it passes one to CostModel::iteration, which then computes each key's costs
// once while it stays in the cache. Keys recur: a run of decode iterations (whose contexts alone
// grow) has one, and a replica returns to the same token totals (a vLLM run of the Azure
// conversation trace costs ~31,000 iterations of ~11,000 distinct (tokens, sampled, sequences)
// but 1,951 distinct token counts, computed 2,081 times). Direct-mapped by the key's low bits, so that a lookup
// is a mask and a compare and consecutive counts never share a slot; the figures are the ones
// computed without it, to the bit.
// A step's MoE layers (CostModel::moe_step): the routed experts on the busiest expert rank and,
// with DP attention, the exchanges that bring every token to its experts and back.
struct MoeStepCost {
  double experts_up_s = 0, experts_down_s = 0, exchange_s = 0;
};

class NonAttentionCache {
 public:
  static constexpr size_t kTokenSlots = 4096;  // powers of two; ~330 KB in all
  static constexpr size_t kSampledSlots = 512;
  NonAttentionCache() : tokens_(kTokenSlots), lm_head_(kSampledSlots, {-1, 0.0}) {}
  // The slot of `tokens`: it holds that count's costs, or another's.
  TokenCosts& token_slot(int64_t tokens) { return tokens_[static_cast<uint64_t>(tokens) & (kTokenSlots - 1)]; }
  // The slot of `sampled` rows: (rows, LM-head seconds), or another count's.
  std::pair<int64_t, double>& lm_head_slot(int64_t sampled) {
    return lm_head_[static_cast<uint64_t>(sampled) & (kSampledSlots - 1)];
  }
  // The slot of `decodes` decode rows: (rows, seconds of MLA's absorbed per-head GEMMs), or
  // another count's.
  std::pair<int64_t, double>& mla_absorb_slot(int64_t decodes) {
    return mla_absorb_[static_cast<uint64_t>(decodes) & (kSampledSlots - 1)];
  }
  // A DP step's MoE layers over `tokens` (all ranks together), computed by `cost` once per
  // count. Kept by exact count, not by slot: a power-law routing's expected loads cost
  // O(experts x splits) per count (moe_kernel.h, ~130k instructions for DeepSeek's 256 experts),
  // and the DP totals of a run (a few thousand distinct ones, up to DP x the token budget) would
  // evict each other from a slot table (DP 16 on the Azure conversation trace: 4,211 evaluations
  // of 3,264 counts with 4,096 slots).
  template <class Cost>
  const MoeStepCost& moe_step(int64_t tokens, Cost&& cost) {
    return find_or_compute(moe_steps_, tokens, cost);
  }
  // The exact expected loads of a power-law routing at `tokens` (a grid point of
  // moe_load_grid_bracket), computed by `exact` once per count.
  template <class Exact>
  const MoeRankLoad& moe_load(int64_t tokens, Exact&& exact) {
    return find_or_compute(moe_loads_, tokens, exact);
  }

 private:
  template <class Value, class Compute>
  static const Value& find_or_compute(std::unordered_map<int64_t, Value>& map, int64_t key, Compute& compute) {
    auto it = map.find(key);
    if (it == map.end()) it = map.emplace(key, compute(key)).first;
    return it->second;
  }

  std::vector<TokenCosts> tokens_;
  std::vector<std::pair<int64_t, double>> lm_head_;
  std::vector<std::pair<int64_t, double>> mla_absorb_ =
      std::vector<std::pair<int64_t, double>>(kSampledSlots, {-1, 0.0});
  std::unordered_map<int64_t, MoeStepCost> moe_steps_;
  std::unordered_map<int64_t, MoeRankLoad> moe_loads_;
};

class CostModel {
 public:
  // The default engine is `bare` (kernels only); runs pass the preset's or --engine's.
  CostModel(ModelSpec model, HardwareProfile gpu, int tensor_parallel = 1, EngineProfile engine = {});
  // A replica laid out as `layout` (checked: check_layout).
  CostModel(ModelSpec model, HardwareProfile gpu, ParallelLayout layout, EngineProfile engine = {});

  // One step of a replica with one attention rank (layout.dp == 1).
  // `memo`: see NonAttentionCache (it must only ever be passed to this cost model).
  IterationCost iteration(const BatchShape& shape, NonAttentionCache* memo = nullptr) const;
  // One lockstep step of the layout's dp attention ranks, `ranks[r]` the batch of rank r (an
  // empty one runs the engine's dummy batch while another rank has work). The result is the
  // slowest rank's attention and dense part, plus the MoE layers over every rank's tokens and
  // their exchanges. With one rank, iteration(ranks[0]). `rank_costs`, when given, receives
  // each rank's own cost (an idle rank's empty), for advance_step. A rank flagged in
  // `repeated` (one flag per rank, or none) repeats its decodes of the step that filled
  // `rank_costs`, one token further on: its cost is advanced from that step's
  // (advance_decodes), the others' computed afresh.
  IterationCost step(std::span<const BatchShape> ranks, NonAttentionCache* memo = nullptr,
                     std::vector<IterationCost>* rank_costs = nullptr, std::span<const uint8_t> repeated = {}) const;

  // Repeated decode steps (the simulator's fast-forward): `shape` is a decode-only batch whose
  // cost one step earlier, every context one token shorter, was `previous`. Tokens, rows
  // sampled and sequences are unchanged, so only the decodes' attention is computed again: the
  // same figures as iteration(shape), to the bit, for a fraction of the work.
  IterationCost advance_decodes(const IterationCost& previous, const BatchShape& shape,
                                NonAttentionCache* memo = nullptr) const;
  // The same for a lockstep step: `ranks` one token further than the step that filled
  // `rank_costs` (step's, or this function's last call), which it advances in place.
  IterationCost advance_step(std::span<const BatchShape> ranks, std::span<IterationCost> rank_costs,
                             NonAttentionCache* memo = nullptr) const;

  // How a KV pool holds the layers that attend to a sliding window (gpt-oss: every other layer,
  // 128 tokens), which keep only the window's KV:
  //   as_full      every layer's KV for every token (an engine without a hybrid allocator; the
  //                capacity of every model without such layers)
  //   hybrid       vLLM v1's hybrid KV cache manager (docs/design/hybrid_kv_cache_manager.md,
  //                vllm/v1/core/single_type_kv_cache_manager.py SlidingWindowManager): one pool
  //                of pages, each layer type its own block table; a token's page holds the
  //                full-attention layers, and each request holds sliding_window_side_blocks()
  //                more pages for its window layers, freed as the window moves. TensorRT-LLM's
  //                variable sliding-window attention gives each window its own pool in the same
  //                spirit (examples/llm_kv_cache_connector_vswa.py).
  //   sglang_swa   SGLang's SWA memory pool (mem_cache/memory_pool.py SWAKVPool, server_args.py
  //                swa_full_tokens_ratio 0.8): a full pool of F tokens and a window pool of 0.8 F,
  //                so one token of capacity costs full + 0.8 x window bytes.
  // Capacities below are in tokens of that pool; with no window layers (or no full ones) every
  // rule is as_full.
  enum class WindowKv { as_full, hybrid, sglang_swa };

  // KV cache capacity of the replica in tokens: (memory * utilization - weights per GPU -
  // activation reserve) * tp / kv_bytes_per_token. Zero or negative means the weights do not fit.
  // The reserve is activation_reserve_bytes(activation_tokens, sampler_rows), by default that of
  // kDefaultActivationTokens and kSamplerRows (a policy that knows its own largest step passes it:
  // Policy::kv_sizing).
  int64_t kv_capacity_tokens(double gpu_memory_utilization, int64_t activation_tokens = kDefaultActivationTokens,
                             int64_t sampler_rows = kSamplerRows, WindowKv window = WindowKv::as_full) const;
  // KV cache capacity when weights and KV together may take `mem_fraction_static` of the GPU's
  // memory, as SGLang sizes its pool (model_runner profile_max_num_token: the memory free after
  // the weights, less the (1 - fraction) of the total it keeps for activations and CUDA graphs):
  // (memory * fraction - weights per GPU - kRuntimeReserveBytes, the CUDA context and
  // workspaces that were taken before it measured) * tp / kv_bytes_per_token.
  int64_t kv_capacity_tokens_static(double mem_fraction_static, WindowKv window = WindowKv::as_full) const;
  // KV cache capacity when the engine takes `free_fraction` of the memory left after its profile
  // run, as TensorRT-LLM sizes its pool (tensorrt_llm/_torch/pyexecutor/_util.py,
  // KvCacheCreator.configure_kv_cache_capacity and _cal_max_memory: (total - peak) *
  // free_gpu_memory_fraction, the peak being the weights, the activations of a dummy batch of
  // max_num_tokens and the memory outside torch, NCCL and CUDA graphs among it):
  // (memory - weights per GPU - activation_reserve_bytes(activation_tokens)) * free_fraction
  // * tp / kv_bytes_per_token.
  int64_t kv_capacity_tokens_of_free(double free_fraction, int64_t activation_tokens,
                                     int64_t sampler_rows = kSamplerRows, WindowKv window = WindowKv::as_full) const;
  // Under WindowKv::hybrid: the pages (of `block_size` tokens of the full-attention layers) that
  // one request's sliding-window layers hold at most, ceil(window layers x (ceil((W - 1) / B) + 1)
  // / full layers): vLLM keeps the blocks that cover the last W - 1 tokens and the new one
  // (SlidingWindowManager.get_num_skipped_tokens), and a page of the window layers is as large
  // as one of the full layers when their counts match (gpt-oss: 18 and 18). 0 without window layers.
  int64_t sliding_window_side_blocks(int32_t block_size) const;

  // Memory per GPU that is neither weights nor KV, after vLLM's profile run
  // (vllm/worker/worker.py determine_num_available_blocks: a dummy forward pass of
  // max_num_batched_tokens measures the peak; the rest of the budget goes to KV):
  //   kRuntimeReserveBytes (CUDA context, cuBLAS and NCCL workspaces: vLLM's "non-torch
  //     memory", about 1 GiB on A100/H100)
  //   + activation_tokens * the live activations of one layer's forward per token
  //     (residual, normed input, attention output, MLP output: 4 * hidden; the QKV output;
  //     the up[/gate] output and the activated FFN), all 16-bit (kActivationBytes); in an MoE
  //     layer the up[/gate] and activated outputs of the top-k experts (fused_moe's
  //     intermediate caches), their k outputs of hidden before the combine (both for at most
  //     kFusedMoeChunkTokens tokens, the chunk fused_moe runs at once), the router logits
  //     and the shared expert's up[/gate] and activated outputs
  //   + the sampler's fp32 logits for `sampler_rows` rows (vLLM's profile run samples one row per
  //     dummy request, min(max_num_batched_tokens, max_num_seqs) of them: _dummy_run in
  //     vllm/v1/worker/gpu_model_runner.py; kSamplerRows, 256, when the caller does not know).
  // An estimate, not a measurement: it lands within a few percent of the KV blocks vLLM
  // reports for 7B-70B models, which is what capacity-driven preemption needs.
  double activation_reserve_bytes(int64_t activation_tokens, int64_t sampler_rows = kSamplerRows) const;
  static constexpr int64_t kDefaultActivationTokens = 8192;  // a common max_num_batched_tokens
  static constexpr double kRuntimeReserveBytes = 1024.0 * 1024.0 * 1024.0;
  static constexpr int64_t kSamplerRows = 256;
  static constexpr double kFusedMoeChunkTokens = 16384;

  const ModelSpec& model() const { return model_; }
  const HardwareProfile& gpu() const { return gpu_; }
  const EngineProfile& engine() const { return engine_; }
  int tensor_parallel() const { return tp_; }
  const ParallelLayout& layout() const { return layout_; }
  // How the tokens choose their experts (moe_kernel.h): balanced (the default, every expert
  // T k / E rows) or a power law, whose busiest expert rank sets the MoE layers' time. An
  // expert-load balancer that spreads hot experts (vLLM --enable-eplb, SGLang --enable-eplb) is
  // modelled as balanced routing.
  void set_moe_routing(MoeRouting routing) { moe_routing_ = routing; }
  const MoeRouting& moe_routing() const { return moe_routing_; }
  // Speculative decoding (speculative.h): the policies draft by it, the simulation accepts by its
  // rates, and every step pays the drafter's passes (draft_s). After the target has verified a
  // step, the drafter proposes the next one's drafts (vLLM v1 SpecDecodeBaseProposer.propose;
  // docs/REFERENCE-moe-spec-offload.md 5.1):
  //   eagle, eagle3, mtp  a first pass of one decoder layer of the target (its GEMMs, elementwise
  //            kernels and all-reduces, and a layer's share of the step's attention) over every
  //            token of the step, EAGLE's head reading the target's hidden states, then k - 1
  //            passes of one token per sampling sequence (its share of decode attention); each
  //            pass runs the LM head over the sampling sequences. The head is costed as an
  //            average layer of the target (DeepSeek-V3's MTP module is one MoE decoder layer);
  //            EAGLE-3's smaller draft vocabulary is not modelled (the full LM head is counted).
  //   draft    the draft model's own cost model: the step's shape without its drafts (the
  //            draft model prefills the prompts too), then k - 1 one-token passes of the
  //            sampling sequences; its kernels, not its CPU overhead (one engine runs both).
  //   ngram    nothing on the GPU (vLLM's NgramProposer runs on the CPU, between steps).
  // The verification itself is the target's step with the drafts as query tokens: the GEMMs and
  // the LM head on 1 + k rows per decode, decode attention's FLOPs (not its KV bytes) times the
  // queries per sequence.
  void set_speculative(SpeculativeDecoding spec, std::shared_ptr<const CostModel> draft_model = nullptr);
  const SpeculativeDecoding& speculative() const { return speculative_; }
  // Weight bytes one GPU holds: everything but the routed experts split over an attention
  // rank's tp GPUs (replicated over the dp ranks), the routed experts over all tp x dp; and a
  // speculative drafter's (set_speculative).
  double weight_bytes_per_gpu() const;
  // KV bytes one token takes on one GPU, the drafter's layers included (set_speculative).
  double kv_bytes_per_token_per_gpu_with_drafter() const;
  // The MoE layers of one step whose tokens, over all ranks, number `tokens`: the routed experts
  // on the busiest expert rank, and with dp > 1 the exchanges that bring every token to its
  // experts and back (all-gather and reduce-scatter, or all-to-all dispatch and combine).
  using MoeStepCost = batchsim::MoeStepCost;
  MoeStepCost moe_step(int64_t tokens, NonAttentionCache* memo = nullptr) const;

 private:
  TokenCosts token_costs(int64_t tokens, NonAttentionCache* memo) const;
  double lm_head_s(int64_t sampled) const;
  // The replica's KV tokens in `kv_bytes_per_gpu` of one GPU's memory (each GPU holds its share
  // of the heads of every token).
  int64_t kv_tokens_in(double kv_bytes_per_gpu, WindowKv window = WindowKv::as_full) const;
  // A non-empty shape's cost from its token costs `t` (its token count's) and LM-head time.
  IterationCost iteration_from(const BatchShape& shape, const TokenCosts& t, double lm_head_seconds,
                               NonAttentionCache* memo) const;
  // The attention of a shape's prefill chunks and of its decodes, every layer (with an engine
  // that concatenates its KV cache, the copies).
  double prefill_attention_s(const BatchShape& shape) const;
  double decode_attention_s(const BatchShape& shape, NonAttentionCache* memo) const;
  // seconds(span, chunked, layers) summed over the model's attention layer kinds: full (span
  // 0), sliding window, chunked.
  template <class LayerKindSeconds>
  double over_layer_kinds(LayerKindSeconds&& seconds) const;
  // advance_decodes into `cost` itself.
  void advance_decodes_in_place(IterationCost& cost, const BatchShape& shape, NonAttentionCache* memo) const;
  // Every layer's KV-cache concatenation over `context_tokens` (KvCacheWrite::concat).
  double kv_concat_s(double context_tokens) const;
  // What an iteration adds to its kernels' parts in `cost`: the drafter's passes, the launches
  // the GPU waits for, the engine's CPU and residual time, the total. `tokens` and the shape's
  // sequences set the engine's times (launch_s, cpu_s, residual_s); settle_iteration sums the
  // rest, which is all a repeated decode step changes.
  void close_iteration(const BatchShape& shape, int64_t tokens, IterationCost& cost, NonAttentionCache* memo) const;
  void settle_iteration(const BatchShape& shape, IterationCost& cost, NonAttentionCache* memo) const;
  // step's and advance_step's common part: rank_cost(r, batch) (a reference that stays valid
  // through the call) of every busy rank, the slowest kept, the MoE layers over every rank's
  // tokens added.
  template <class RankCost>
  IterationCost lockstep(std::span<const BatchShape> ranks, NonAttentionCache* memo, RankCost&& rank_cost) const;
  ModelSpec model_;
  HardwareProfile gpu_;
  int tp_;
  ParallelLayout layout_;
  EngineProfile engine_;
  // The routed experts of one MoE layer on the busiest expert rank over `tokens` tokens (the
  // fused-MoE call, moe_kernel.h), split into the up and down projections' shares.
  FusedMoeCall fused_moe_call(int64_t tokens) const;
  // The busiest expert rank's expected loads in `call`: exact, or for a power-law
  // routing above kExactLoadTokens interpolated on the grid of moe_kernel.h (its points kept in
  // `memo` when there is one; without, computed: the same numbers).
  MoeRankLoad routed_load(const FusedMoeCall& call, NonAttentionCache* memo) const;
  FusedMoeTime routed_experts_time(int64_t tokens, NonAttentionCache* memo) const;
  std::pair<double, double> routed_experts_s(int64_t tokens, NonAttentionCache* memo) const;
  std::pair<double, double> routed_experts_split(const FusedMoeTime& t) const;
  // How tokens choose their experts (uniform: balanced; or a power law): set_moe_routing.
  MoeRouting moe_routing_;
  SpeculativeDecoding speculative_;               // off unless set_speculative
  std::shared_ptr<const CostModel> draft_model_;  // method draft: the draft model's
  // `target` (the target's weights or KV bytes per GPU) plus the speculative drafter's share:
  // `draft_part` of a draft model's cost model, or one average layer of the target's.
  template <class DraftPart>
  double with_drafter(double target, DraftPart&& draft_part) const;
  // The drafter's passes for a step of `shape` whose target cost so far is `cost`.
  double draft_s(const BatchShape& shape, const IterationCost& cost, NonAttentionCache* memo) const;
  // The memo's costs of `tokens` tokens and LM-head seconds of `sampled` rows, computed into
  // their slots when another count holds them.
  const TokenCosts& memo_token_costs(int64_t tokens, NonAttentionCache& memo) const;
  double memo_lm_head_s(int64_t sampled, NonAttentionCache& memo) const;
  // Seconds to exchange `bytes_per_gpu` (what each GPU sends) among `gpus` GPUs: over NVLink
  // within a node, and for the share bound to other nodes over the inter-node NICs.
  double exchange_s(double bytes_per_gpu, int gpus) const;
  // One all-reduce of `message_bytes` as the engine runs it.
  double allreduce_s(double message_bytes) const;
  // Shapes per GPU, computed once so that iteration() does no work proportional to the model.
  std::array<GemmShape, kNumLayerGemms> layer_gemms_;
  MoeGemmShapes moe_gemms_;
  // An MoE model's dense layers (dense_layers of them): its attention with a dense MLP of
  // dense_ffn_size, split by tp; their up and down shapes.
  ModelSpec dense_layer_model_;
  ModelSpec shared_expert_model_;  // the shared experts as a dense MLP, for their activation
  GemmShape dense_up_, dense_down_;
  // MLA's projections (mla_gemm_shapes): the query and latent down-projection, the query's up.
  MlaGemmShapes mla_gemms_;
  MlaDecodeWork mla_decode_work_;  // MLA decode attention's work per key and per decode
  // MLA's prefill and decode attention of `shape`, every layer.
  double mla_prefill_attention_s(const BatchShape& shape) const;
  double mla_decode_attention_s(const BatchShape& shape, NonAttentionCache* memo) const;
  // MLA decode's absorbed per-head GEMMs (uk, uv) for `decodes` rows, per layer.
  double mla_absorb_s(int64_t decodes) const;
  GemmShape lm_head_;
  // The tiles prefill attention is costed by (prefill_attention_tiles: FlashAttention-3's, the
  // other kernels' generic ones, or none), which the prefill chunks' work then counts.
  AttentionTiles tiles_ = AttentionTiles::none;
};

}  // namespace batchsim
