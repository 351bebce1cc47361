// batchsim — the roofline's pieces: per-operator work (FLOPs, HBM bytes) and time.
//
// CostModel::iteration is the sum of these over one iteration's operators; the fit
// (hwmodel/fit/) and `batchsim validate` call the same functions on single operators, so the
// model that is fitted is exactly the model that is simulated. Everything here is per GPU:
// with tensor parallelism `tp`, query heads, KV heads, the QKV/up output columns and the O/down
// input rows are divided by tp (Megatron-LM column/row parallel layers, as in vLLM's
// QKVParallelLinear / RowParallelLinear). An MoE layer's experts are split the same way, each
// expert's intermediate dimension over the tp GPUs (vLLM FusedMoE's default tensor parallelism);
// expert parallelism (whole experts per GPU) is not modelled.
//
// Units: FLOPs and bytes are plain counts (double, since they exceed 2^53 only for absurd
// batches); times are seconds.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"

namespace batchsim {

// Y[M, N] = X[M, K] * W[K, N] on one GPU; M is the number of tokens.
struct GemmShape {
  int64_t k = 0;
  int64_t n = 0;
};

// FlashAttention-3's forward tiles for a prefill call (see fa3_prefill_tiles): how many, their
// K/V-block iterations in all, the iterations of the longest, the most packed query rows (new
// tokens x GQA group) of any sequence, which picks the tile height of the whole call, and the
// FLOPs of one iteration (QK^T and PV over kBlockM x kBlockN x head_dim) of the two-warp-group
// tile and of the one-warp-group tile the call runs when packed_rows_max <= 64, with the K/V
// bytes one iteration loads (kBlockN keys x head_dim, K and V). `tiling` says whose tiles they
// are (AttentionTiles: FA3's table, or the generic 128 x 128 of the other kernels; none when
// uncounted).
struct Fa3PrefillTiles {
  double tiles = 0;
  double iterations = 0;
  double iterations_max = 0;
  double packed_rows_max = 0;
  double iteration_flops = 0;
  double small_iteration_flops = 0;
  double iteration_bytes = 0;
  double small_iteration_bytes = 0;
  AttentionTiles tiling = AttentionTiles::none;

  Fa3PrefillTiles& operator+=(const Fa3PrefillTiles& o) {
    tiles += o.tiles;
    iterations += o.iterations;
    iterations_max = std::max(iterations_max, o.iterations_max);
    packed_rows_max = std::max(packed_rows_max, o.packed_rows_max);
    iteration_flops = std::max(iteration_flops, o.iteration_flops);
    small_iteration_flops = std::max(small_iteration_flops, o.small_iteration_flops);
    iteration_bytes = std::max(iteration_bytes, o.iteration_bytes);
    small_iteration_bytes = std::max(small_iteration_bytes, o.small_iteration_bytes);
    if (tiling == AttentionTiles::none) tiling = o.tiling;
    return *this;
  }
};

// What every call of one attention operator shares (one model on one GPU): the heads per GPU,
// head_dim, the KV cache's bytes per element and the sliding window (0: full attention). The
// regime time functions pick the profile's kernel by it (attention_kernel.h).
struct AttentionShape {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int head_dim = 0;
  int kv_dtype_bytes = 0;
  int64_t window_tokens = 0;
};

// FLOPs and HBM bytes moved by one operator call, and for attention the count of work units
// that carry a fixed cost each (prefill: query tokens x query heads; decode: sequences x KV
// heads), all per GPU.
struct OperatorWork {
  double flops = 0;
  double bytes = 0;
  double units = 0;
  double causal_flops = 0;  // prefill: the part of `flops` in the chunk's own causal triangle
  // Decode: K and V bytes of the largest work unit (the longest sequence's context for one KV
  // head), and the context length FlashAttention's split-KV heuristic sees (the longest).
  double unit_bytes_max = 0;
  int64_t context_max = 0;
  // Prefill: thread blocks of the FlashAttention call (query tiles x query heads) and the K/V
  // bytes they read from HBM, summed over blocks (see prefill_attention_work).
  double ctas = 0;
  double cta_kv_bytes = 0;
  double sequences = 0;  // prefill: the chunks (sequences) of the call
  // Prefill under FlashAttention-3 (fa3_prefill_tiles), all sequences of the call.
  Fa3PrefillTiles fa3{};
  // Prefill: writing the new tokens' K and V into the paged cache, a kernel of its own before
  // attention (vLLM's reshape_and_cache_flash, csrc/cache_kernels.cu: one thread block per
  // token): the tokens and the bytes (K and V read as 16-bit activations, written at the
  // cache's dtype).
  double kv_write_tokens = 0;
  double kv_write_bytes = 0;
  // Attention: the shape of the call (AttentionShape); the most new tokens of any sequence
  // (prefill: a call of one-token chunks is costed as the decode it is); the keys the call
  // reads, summed over its sequences (a window's last keys only); and the sequences' whole
  // contexts (context_before + new tokens) summed, before any window, whose longest is
  // `context_max` (prefill too).
  AttentionShape shape{};
  double new_tokens_max = 0;
  double key_sum = 0;
  double context_sum = 0;

  OperatorWork& operator+=(const OperatorWork& o) {
    flops += o.flops;
    bytes += o.bytes;
    units += o.units;
    causal_flops += o.causal_flops;
    ctas += o.ctas;
    cta_kv_bytes += o.cta_kv_bytes;
    sequences += o.sequences;
    fa3 += o.fa3;
    kv_write_tokens += o.kv_write_tokens;
    kv_write_bytes += o.kv_write_bytes;
    unit_bytes_max = unit_bytes_max > o.unit_bytes_max ? unit_bytes_max : o.unit_bytes_max;
    context_max = context_max > o.context_max ? context_max : o.context_max;
    if (shape.head_dim == 0) shape = o.shape;
    new_tokens_max = std::max(new_tokens_max, o.new_tokens_max);
    key_sum += o.key_sum;
    context_sum += o.context_sum;
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
// Inline: the cost model asks for both on every iteration.
inline int64_t q_heads_per_gpu(const ModelSpec& model, int tp) { return std::max<int64_t>(1, model.num_heads / tp); }
inline int64_t kv_heads_per_gpu(const ModelSpec& model, int tp) {
  return std::max<int64_t>(1, model.num_kv_heads / tp);
}
// K and V of one token across all layers, on one GPU. MLA's latent cannot be split by heads:
// every GPU of an attention rank holds all of it (vLLM MLAAttentionSpec; "MLA KV cache is
// replicated across TP workers", docs/features/nixl_connector_compatibility.md).
int64_t kv_bytes_per_token_per_gpu(const ModelSpec& model, int tp);

// Per-GPU weight shapes. QKV: (hidden, (q + 2 kv) * head_dim / tp) (MLA: the down-projection
// of mla_gemm_shapes); O: (q * head_dim / tp, hidden) (MLA: q * v_head_dim / tp); up: (hidden, ffn * (gated ? 2 : 1) /
// tp); down: (ffn / tp, hidden). LM head: (hidden, vocab / tp), vocabulary-parallel as in vLLM's ParallelLMHead. For an
// MoE model up and down are those of ONE routed expert (ffn_size is per expert).
std::array<GemmShape, kNumLayerGemms> layer_gemm_shapes(const ModelSpec& model, int tp);
GemmShape lm_head_shape(const ModelSpec& model, int tp);

// The rest of an MoE layer's MLP, per GPU: the router (hidden, experts), whole on every GPU
// (vLLM's MixtralMoE / Qwen2MoeSparseMoeBlock gate is a ReplicatedLinear), and the shared
// expert's up[/gate] and down, split by tp like a dense MLP (zero shapes when there is none).
struct MoeGemmShapes {
  GemmShape router;
  GemmShape shared_up;
  GemmShape shared_down;
};
MoeGemmShapes moe_gemm_shapes(const ModelSpec& model, int tp);

// Multi-head latent attention's projections on one GPU (vLLM DeepseekV2MLAAttention, and
// MLACommonImpl for the absorbed decode; local-inference-lab/vllm@28be48f
// model_executor/models/deepseek_v2.py, layers/attention/mla_attention.py):
//   qkv_a  the fused down-projection of the query (q_lora_rank) and of the latent with its RoPE
//          key (kv_lora_rank + qk_rope_head_dim), replicated on every GPU (disable_tp); without
//          q_lora_rank, the latent's alone;
//   q_b    the query's up-projection, (q_lora_rank or hidden) -> heads/tp x (nope + rope);
//   kv_b   the latent's up-projection to each head's K (nope) and V, kv_lora_rank -> heads/tp x
//          (nope + v): prefill's decompression, over every token the chunk attends to;
//   uk, uv decode's absorbed halves of kv_b, one matrix per head (a batched GEMM of heads/tp
//          groups): the query's nope part into the latent (nope -> kv_lora_rank), and the
//          attention output out of it (kv_lora_rank -> v).
// The output projection is layer_gemm_shapes' o (heads/tp x v_head_dim -> hidden).
struct MlaGemmShapes {
  GemmShape qkv_a, q_b, kv_b, uk, uv;
  int64_t heads_per_gpu = 0;
};
MlaGemmShapes mla_gemm_shapes(const ModelSpec& model, int tp);

// How the tokens of one iteration spread over a layer's routed experts.
struct ExpertLoad {
  double experts = 0;            // distinct experts that receive a token: their weights are read
  double tokens_per_expert = 0;  // rows each of them multiplies (the M of its GEMM)
};
// Dense model: one "expert" of all T tokens. MoE with top-k routing over E experts, T > 0:
// under uniform, independent routing a token leaves a given expert out with probability
// 1 - k/E, so the expected number of distinct experts touched is E (1 - (1 - k/E)^T) (the
// occupancy expectation; the balanced-routing estimate of MoE serving analyses), and the T k
// token-expert rows split evenly over them: T k / touched each, which is T k / E once T is large
// (1 token: k experts of 1 row). Real routers are not uniform (expert load imbalance); that,
// and its effect on the slowest expert, is not modelled.
ExpertLoad expected_expert_load(const ModelSpec& model, int64_t tokens);

// 2*M*K*N FLOPs; bytes = kActivationBytes * (M*K + M*N) for the activations in and out, plus
// weight_format_bytes(format) * K*N for the weights.
OperatorWork gemm_work(GemmShape shape, int64_t m_tokens, WeightFormat format);
// A grouped GEMM: `groups` weight matrices of `shape`, each multiplying `rows_per_group` rows,
// in one kernel (vLLM's fused_moe Triton kernel over the touched experts, tokens sorted by
// expert: vllm/model_executor/layers/fused_moe/fused_moe.py). FLOPs and activation bytes of
// groups x rows_per_group rows, weight bytes of `groups` matrices; counts may be fractional
// (expectations). gemm_work is one group of m_tokens rows.
OperatorWork grouped_gemm_work(GemmShape shape, double rows_per_group, double groups, WeightFormat format);

// Causal attention of `new_tokens` queries over `context_before + new_tokens` keys, flash style
// (FlashAttention, Dao et al. 2022: the score matrix never reaches HBM). Query i of the chunk
// sees context_before + i + 1 keys, so the (query, key) pairs are
//   new_tokens * context_before + new_tokens * (new_tokens + 1) / 2,
// each costing 2*head_dim FLOPs for QK^T and 2*head_dim for PV, per query head.
// Bytes: Q read and O written (new_tokens * q_heads * head_dim each, kActivationBytes) plus K
// and V of all keys read once at kv_dtype_bytes (re-reads of K/V tiles by later query tiles are
// served from L2 and not counted). FP8 K/V halve the K/V bytes but not the FLOPs: the
// attention kernels dequantise K/V and multiply at the 16-bit rate.
// Thread blocks: one per kFlashPrefillBlockTokens query tile and query head; each reads the K/V
// of the keys its tile sees, on average context_before + new_tokens / 2 (causal), and with
// grouped-query attention the q_heads / kv_heads blocks of a KV group share those reads (one
// goes to HBM, the others hit L2), so cta_kv_bytes counts K/V bytes / group size per block.
// Those are FlashAttention-2's; a kernel's tiles are counted too (`fa3`, per KV head:
// fa3_prefill_tiles) when `tiles` names them, and the KV-cache write of the new tokens
// (kv_write_*). The profile picks which tiles prefill_attention_time_s costs
// (prefill_attention_tiles); with AttentionTiles::none no tiles are counted, for a profile that
// costs FlashAttention-2's (the cost model's iterations: counting them took a fifth of a
// prefill's attention cost, for nothing). `fa3_tiles` true is AttentionTiles::fa3.
//
// Sliding window (`window_tokens` W > 0; vLLM's sliding_window: the query at position t sees
// keys max(0, t - W + 1) .. t, FA3's window_size_left = W - 1): query t pairs with min(t + 1, W)
// keys, and the K/V read are those of positions max(0, context_before - W + 1) onwards. A
// window that covers every key of the sequence (W >= context_before + new_tokens) is no window
// (FA3 drops it: flash_api.cpp, window_size_left >= max_seqlen_k - 1), tiles included. Chunked
// local attention (Llama 4's attention_chunk_size C) is not a window: vLLM runs it as
// independent "virtual" sequences of at most C keys (make_local_attention_virtual_batches in
// vllm/v1/attention/backends/utils.py), so cost it as full attention of the pieces of the chunk
// that fall in each attention chunk, each with context_before = its start - the attention
// chunk's start.
inline constexpr int64_t kFlashPrefillBlockTokens = 64;  // kBlockM of FlashAttention-2's
                                                         // paged-KV (split-KV) kernel
OperatorWork prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens, int64_t context_before,
                                    bool fa3_tiles = true, int64_t window_tokens = 0);
OperatorWork prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens, int64_t context_before,
                                    AttentionTiles tiles, int64_t window_tokens = 0);

// Whether `gpu` costs prefill attention by FlashAttention-3's tiles (prefill_attention_time_s).
bool costs_fa3_prefill_tiles(const HardwareProfile& gpu);
// The tiles prefill_attention_time_s needs counted for `model`'s attention on `gpu`: those of
// the profile's prefill kernel for the model's head_dim and KV dtype (attention_kernels), else
// FA3's for an `fa3` profile, else none. A call whose work counted other tiles is costed by the
// profile's flat (pre-regime) parameters.
AttentionTiles prefill_attention_tiles(const HardwareProfile& gpu, const ModelSpec& model);

// FlashAttention-3's forward tile on Hopper (kBlockM query rows x kBlockN keys) as vLLM runs it:
// paged K/V whose pages (16 or 64 tokens) are no multiple of kBlockN, and a window turns paged
// TMA off too, so loaded without TMA (vllm-project/flash-attention hopper/tile_size.h,
// tile_size_fwd_sm90, and flash_api.cpp, get_pagedkv_tma; vLLM 0.24's vllm-flash-attn).
// 16-bit Q/K/V by head_dim: <= 64: 192 x 128 (192 x 160 when not causal: a window, or a
// decode), <= 96: 192 x 128, <= 128: 128 x 128, <= 192: 128 x 96, else 128 x 80 (128 x 64 with a
// window); FP8 (an FP8 KV cache: vLLM quantises the query too): 192 x 160, 192 x 128, 128 x 160,
// 128 x 160 (128 x 128 with a window), 128 x 128 (128 x 64 with a window). When the call packs
// at most 64 query rows, a 16-bit head_dim 64 or 128 without a window runs one MMA warp group,
// kBlockM 64 (heuristics.h, use_one_mma_wg): 64 x 192 and 64 x 128.
struct Fa3Tile {
  int64_t m = 0;
  int64_t n = 0;
};
Fa3Tile fa3_prefill_tile(int head_dim, int kv_dtype_bytes, bool one_mma_warp_group = false, bool local = false,
                         bool causal = true);
// The tile of `tiles` (fa3: the table above, causal unless `local`; generic: 128 x 128, 64 x 128
// for a call of at most 64 packed rows) for a call with or without a window.
Fa3Tile attention_tile(AttentionTiles tiles, int head_dim, int kv_dtype_bytes, bool one_mma_warp_group, bool local,
                       bool causal = true);
// The tiles of one sequence of `new_tokens` queries after `context_before` cached tokens, for
// one KV head, as FlashAttention-3 schedules them in vLLM's build. PackGQA is always on there
// (FLASHATTENTION_PACKGQA_ONLY in vllm-flash-attn's CMakeLists.txt), so the `group` query heads
// of a KV head share the M dimension, query token t of head h at row t * group + h (hopper/
// pack_gqa.h): ceil(new_tokens x group / m) tiles per (sequence, KV head), not per query head.
// Tile i (rows i m .. (i + 1) m - 1, tokens first_i = floor(i m / group) .. last_i =
// min(new_tokens - 1, floor(((i + 1) m - 1) / group))) runs over the K/V blocks of n keys from
// n_min_i to its last token's causal limit n_max_i = ceil((context_before + last_i + 1) / n),
// n_min_i = 0 without a window and max(0, floor((context_before + first_i - W + 1) / n)) with
// one (hopper/block.h, get_n_block_min_max). Summed in closed form (floor_sum), not tile by
// tile; the longest tile (iterations_max) is the last one without a window, and with one the
// longest of a period of the tiles' pattern (at most g n / gcd(m, g n) tiles).
Fa3PrefillTiles fa3_prefill_tiles(int64_t new_tokens, int64_t context_before, int64_t group, Fa3Tile tile,
                                  int64_t window_tokens = 0);
// sum_{i=0}^{n-1} floor((a i + b) / m) for n, a, b >= 0 and m > 0, in O(log m) steps (the
// Euclid-like reduction of AtCoder Library's floor_sum, atcoder/math.hpp).
int64_t floor_sum(int64_t n, int64_t m, int64_t a, int64_t b);
// Decode attention: one query per sequence over its context (context_sum = sum of the
// sequences' context lengths including the new token). Bytes: K and V of every context token
// (kv_dtype_bytes) plus Q and O (kActivationBytes); FLOPs as above with one query.
// Memory-bound for every real shape (arithmetic intensity ~ q_heads / kv_heads FLOP/byte).
// `context_max` is the longest context (0: all equal, context_sum / num_decodes).
// With a sliding window of `window_tokens` W > 0 a sequence reads min(context, W) keys; pass
// their sum as `windowed_context_sum` (sum of min(context_i, W) over the decodes; BatchShape can
// keep it beside decode_context_sum). Left at -1 it is derived from context_sum and
// context_max: exact when every context is at least W or none exceeds it (equal contexts), an
// upper bound otherwise. context_sum and context_max stay the unwindowed ones (FA3's split
// heuristic sees the whole context).
OperatorWork decode_attention_work(const ModelSpec& model, int tp, int64_t num_decodes, int64_t context_sum,
                                   int64_t context_max = 0, int64_t window_tokens = 0,
                                   int64_t windowed_context_sum = -1);

// FlashAttention-2's split-KV choice for a decode call (flash-attention csrc/flash_attn/
// flash_api.cpp, num_splits_heuristic): with `ctas` = sequences x KV heads thread blocks and
// fewer than 0.8 x sm_count of them, the KV sequence of `context_tokens` (in blocks of
// kFlashDecodeBlockTokens) is split over several blocks so that the waves fill the SMs; the
// smallest split count whose wave efficiency is within 85% of the best is taken. 1 otherwise.
// A bounded loop (at most 128 candidates), no allocation.
inline constexpr int64_t kFlashDecodeBlockTokens = 128;  // kBlockN of the split-KV kernel, d=128
int64_t flash_decode_num_splits(int64_t ctas, int64_t context_tokens, int64_t sm_count);

// FlashAttention-3's split-KV choice for `batch` decodes of `context` keys (the new one
// included) as vLLM runs it, varlen with scheduler metadata computed ahead of time: the static
// bound of hopper/flash_api.cpp get_num_splits, computed as if the batch were one sequence
// because the dynamic split is on (hopper/heuristics.h num_splits_heuristic: 1 split at >= 0.8
// x SMs of blocks, at <= 4 K/V blocks, or at <= 8 blocks and >= 32 of them; else the smallest
// count within 95% of the best wave efficiency, x 0.85 below 4 blocks per split), then the
// per-batch choice of hopper/flash_prepare_scheduler.cu (prepare_varlen_num_blocks_kernel: 1
// above 992 sequences; else ceil(n_blocks / ceil(1.1 x total blocks x kv_heads / SMs)), within
// 1 .. the bound). The tile is (m, n); `window_tokens` 0 or an engaged window (< context).
int64_t fa3_decode_num_splits(int64_t batch, int64_t kv_heads, int64_t group, int64_t context, int64_t window_tokens,
                              int head_dim, int kv_dtype_bytes, Fa3Tile tile, int64_t sm_count);

// What a decode call's time under an attention-kernel regime depends on besides its fitted
// constants (decode_attention_time_s), computed once per call: the tile, the split count, the
// thread-block waves, the K/V blocks the busiest SM streams, the K/V tokens read (a window's
// start aligned down to a block), the (sequence, KV head) units.
struct AttentionDecodeStructure {
  double sequences = 0;
  double units = 0;
  double kv_bytes = 0;     // K/V read and Q/O, bytes
  double block_bytes = 0;  // one K/V block: n keys x head_dim, K and V
  double block_flops = 0;  // one block's padded-tile MMA: 4 m n head_dim
  double sm_blocks = 0;    // blocks on the busiest SM: max(waves x mean blocks per split, longest's)
  bool split = false;      // the call splits K/V (and runs the combine kernel)
  bool window = false;     // an engaged sliding window
  int head_dim = 0;
  int kv_dtype_bytes = 2;
};
AttentionDecodeStructure attention_decode_structure(const OperatorWork& work, int64_t num_decodes, AttentionTiles tiles,
                                                    double sm_count);
// A decode call's time under `kernel` (attention_kernel.h), from its structure:
//   launch + [split] combine + [window] (window + units x window_per_unit)
//   + [sequences <= 992] sequences x per_seq_dynamic
//   + roofline_combine(units x (per_unit + per_unit_head_dim x head_dim),
//                      max(kv_bytes / (hbm x efficiency(head_dim)), sm_blocks x t_block), exponent),
//   t_block = max(block_bytes / sm_bytes_per_s, block_flops / (peak / SMs x mma_efficiency)),
// peak the FP8 one for an FP8 cache (FA3's e4m3 path), the 16-bit one otherwise.
double attention_kernel_decode_time_s(const HardwareProfile& gpu, const AttentionKernelFit& kernel,
                                      const AttentionDecodeStructure& s);
// A prefill call's time under `kernel`, on work whose tiles are the kernel's:
//   launch + sequences x per_seq + kv_write
//   + roofline_combine(max(tiles_s / SMs, per_tile + iterations_max x it_s,
//                          iterations x iteration_bytes / kv_reread_bytes_per_s),
//                      bytes / (hbm x hbm_efficiency), exponent),
//   tiles_s = tiles x per_tile + iterations x it_s, it_s = iteration_flops / (peak / SMs x
//   efficiency(head_dim)) (the one-warp-group tile's FLOPs and bytes when no sequence packs more
//   than 64 rows; peak the 16-bit one, FP8 caches too: their efficiency is fitted against it),
//   kv_write = kv_write_tokens x kv_write_per_token + kv_write_bytes / (hbm x kv_write_efficiency).
double attention_kernel_prefill_time_s(const HardwareProfile& gpu, const AttentionKernelFit& kernel,
                                       const OperatorWork& work);

// Bytes of the activation tensor one tensor-parallel all-reduce sums:
// tokens * hidden * kActivationBytes.
double allreduce_message_bytes(const ModelSpec& model, int64_t tokens);

// HBM bytes of one elementwise kernel over `tokens` tokens on one GPU (reads + writes):
//   norm (RMSNorm/LayerNorm): read and write tokens x hidden;
//   rope: read and write the query and key heads of the GPU;
//   activation: gated reads gate and up (2 x ffn/tp) and writes ffn/tp, else reads and writes
//     ffn/tp; in an MoE layer, for each of the tokens x top-k routed rows (fused_moe runs
//     silu_and_mul on its intermediate cache) and for each token's shared expert, plus the
//     top-k combine (moe_sum: reads the k expert outputs of hidden per token, writes one);
//   residual_add: reads two tokens x hidden tensors and writes one;
//   embedding: gathers tokens rows of hidden and writes them.
// Norm, residual add and embedding work on the whole hidden state on every GPU.
double elementwise_bytes(const ModelSpec& model, int tp, ElementwiseOp op, int64_t tokens);

// ---- time: the roofline with a profile's efficiencies ----

// Combines a compute time and a memory time: (a^p + b^p)^(1/p), or max(a, b) for p <= 0.
// p = 1 is the sum (no overlap), p -> infinity the hard roofline.
double roofline_combine(double a_s, double b_s, double exponent);

// GEMM efficiency at M rows: eta_max * M / (M + m_half). Small M cannot fill the tensor
// cores' tiles (cuBLAS tiles are 64..256 rows), so achieved FLOP/s rises with M and saturates.
// A grouped (MoE) GEMM is evaluated at its rows per expert: each expert's tiles hold only its
// own tokens.
double gemm_compute_efficiency(const HardwareProfile& gpu, double m_rows);
// The FLOP ceiling of a GEMM on weights of `format`: peak_fp8_flops for FP8 weights (per tensor
// or block-scaled) on a GPU with FP8 tensor cores (vLLM's fp8 W8A8 path quantises the
// activations too and runs an FP8 GEMM, cutlass_scaled_mm; DeepGEMM for the block-scaled ones),
// peak_fp4_flops for FP4 weights (MXFP4, NVFP4) on a GPU with FP4 tensor cores (Blackwell),
// else peak_flops: 16-bit weights, or low-bit weights on a GPU without their tensor cores
// (A100 FP8: vLLM's fp8_marlin; Hopper MXFP4: the Marlin / Triton weight-only kernels dequantise
// to 16-bit in registers and multiply at the 16-bit rate, saving only the weight bytes;
// aiconfigurator's nvfp4_wo on Hopper likewise).
double gemm_peak_flops(const HardwareProfile& gpu, WeightFormat format);
// The measured time of the profile's GEMM table for the weights' dtype (gemm_table.h) where
// the shape lies in its span; elsewhere, and without a table, gemm_roofline_time_s.
double gemm_time_s(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, WeightFormat format);
// kernel_launch_s + roofline_combine(flops / (gemm_peak_flops * eta_c(M)),
//                                  bytes / (hbm * hbm_efficiency), gemm_roofline_exponent).
// The efficiencies, fitted on 16-bit GEMMs, are applied to the FP8 ceiling unchanged. (What a
// profile's GEMM table falls back to; the fit fits this.)
double gemm_roofline_time_s(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, WeightFormat format);
// The same for a grouped GEMM (one launch; eta_c at rows_per_group). Zero without rows.
double grouped_gemm_time_s(const HardwareProfile& gpu, GemmShape shape, double rows_per_group, double groups,
                           WeightFormat format);
// Whether the FLOP roof, not the bandwidth roof, binds this GEMM.
bool gemm_compute_bound(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, WeightFormat format);
bool grouped_gemm_compute_bound(const HardwareProfile& gpu, GemmShape shape, double rows_per_group, double groups,
                                WeightFormat format);
// One variable-length prefill attention call (all chunks of an iteration summed in `work`).
// A profile with attention-kernel regimes (HardwareProfile::attention_kernels) costs it by the
// regime of the call's head_dim and KV dtype (find_attention_kernel): a call whose sequences
// each bring one new token as the decode it is (attention_kernel_decode_time_s over
// key_sum / sequences keys, NVIDIA's isl = 1 context rows time as step = 1 decode rows), else
// attention_kernel_prefill_time_s when the work counted that regime's tiles. Otherwise the
// profile's flat parameters, as follows.
// Under a FlashAttention-2 profile (prefill_attention_kernel fa2, the default):
//   attention_launch_s + units * prefill_attention_per_head_token_s
//   + roofline_combine((flops - causal_flops) / (peak * prefill_attention_efficiency)
//                        + causal_flops / (peak * prefill_attention_causal_efficiency),
//                      max(bytes / (hbm * hbm_efficiency),
//                          waves * (cta_kv_bytes / ctas) / prefill_attention_sm_bytes_per_s),
//                      prefill_attention_roofline_exponent),
// waves = ceil(ctas / sm_count). The second memory term is the decode one (an SM streams K/V
// at a bounded rate) for the query tiles: small chunks over long contexts have few blocks,
// each reading the whole context. Fitted on Llama-2-7B (MHA, group 1) only, it predicts the
// GQA (group 8) file's prefill without a fitted term for the group (hwmodel/README.md).
// Without sm_count or a per-SM rate (datasheet profiles) the term is left out.
// Queries against the prior context run as full tiles; the chunk's own triangle runs as
// causal-masked tiles, which FlashAttention executes at a lower rate (in Vidur's A100 profiles,
// both the Llama-2-7B and the 70B-shape files, about half of the unmasked rate).
// Under a FlashAttention-3 profile (fa3, with sm_count) the FLOP and per-SM terms are its tiles':
//   attention_launch_s + sequences * prefill_attention_per_seq_s + kv_write
//   + roofline_combine(max(tiles_s / sm_count, longest tile's time),
//                      bytes / (hbm * hbm_efficiency), prefill_attention_roofline_exponent),
//   tiles_s = tiles * prefill_attention_per_tile_s + iterations * iteration_flops
//             / (peak / sm_count * prefill_attention_efficiency)
// (fa3_prefill_tiles; the one-warp-group tile's FLOPs when no sequence packs more than 64
// rows). The kernel is persistent: one CTA per SM takes tiles from a queue, longest first for
// causal attention (VarlenDynamicPersistentTileScheduler with LPT, hopper/
// flash_fwd_launch_template.h), so the busiest SM holds the mean share, or the longest tile
// when there are few. Why tiles per KV head: in NVIDIA's H100 tables one-token prompts cost
// ~25 ns per (sequence, KV head) whatever the query heads (batch 64: 113.6 us at 64/64 heads,
// 24.1 us at 64/8), and at equal FLOPs the GQA groups cost about the same (32 query heads,
// batch 8 x 4,096 tokens: 1.98 / 1.96 / 1.91 / 1.90 ms at groups 4 / 8 / 16 / 32; MHA's 2.34 ms
// is its KV-cache write, below).
// Both forms add the KV-cache write when the profile charges it (attention_kv_write_*):
//   kv_write = kv_write_tokens * attention_kv_write_per_token_s
//              + kv_write_bytes / (hbm * attention_kv_write_efficiency),
// what an MHA layer costs beyond a GQA one of the same FLOPs (64 heads, batch 8 x 4,096
// tokens: 4.59 ms at 64 KV heads, 3.80 ms at 8).
double prefill_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work);
// One decode attention call over num_decodes sequences. A profile with a decode regime for the
// call's head_dim and KV dtype costs it by attention_kernel_decode_time_s; otherwise:
//   attention_launch_s + num_decodes * decode_attention_per_seq_s
//   + roofline_combine(units * decode_attention_per_seq_kv_head_s,
//                      max(flops / (peak * prefill_attention_efficiency),
//                          bytes / (hbm * decode_attention_efficiency),
//                          max(waves * unit_bytes / splits, unit_bytes_max / splits)
//                            / decode_attention_sm_bytes_per_s),
//                      decode_attention_roofline_exponent),
// with units = sequences x KV heads (one thread block each, the kernel's grid), splits =
// flash_decode_num_splits and waves = ceil(units * splits / sm_count).
// Why waves: in Vidur's A100 profiles decode time is a function of units and context alone
// (above 0.8 x 108 units the 64/8-head file at batch b matches Llama-2-7B's 32/32 heads at
// batch b/8 within 2% on average), and it steps where units cross multiples of the SM count
// (most at 2 x 108: Llama-2-7B at batch 7, 14, 21, 28) because one SM streams K/V at a bounded
// rate: an SM holding one more block than the others finishes a whole block later. The longest
// sequence's block bounds the call the same way (the heterogeneous-context effect; Vidur
// profiles only equal contexts, so this floor uses the per-SM rate fitted on those and is not a
// fitted correction). Profiles without sm_count or a per-SM
// rate (datasheet ones) leave the wave term out.
double decode_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work, int64_t num_decodes);
// launch + elementwise_bytes / (hbm * efficiency) of the op's StreamingKernel.
double elementwise_time_s(const HardwareProfile& gpu, ElementwiseOp op, double bytes);
// All-reduce over tp GPUs: latency + wire bytes / bandwidth, wire bytes = message * 2 (tp-1)/tp
// (a ring all-reduce sends and receives that much per GPU; NCCL's "bus bandwidth"). The
// profile's `allreduce` entry for tp if there is one; else, over more GPUs than a node holds,
// one node's all-reduce latency + internode_latency_s + wire bytes / internode_bytes_per_s (the
// rings cross the NICs); else interconnect_latency_s and interconnect_bytes_per_s. Zero for
// tp == 1.
double allreduce_time_s(const HardwareProfile& gpu, double message_bytes, int tp);
// The bytes a ring all-reduce of `message_bytes` sends per GPU over tp GPUs: 2 (tp-1)/tp of it.
double ring_allreduce_wire_bytes(double message_bytes, int tp);
// The framework's custom all-reduce over tp GPUs (HardwareProfile::custom_allreduce): latency +
// message bytes / bandwidth; nullopt when the profile has no fit for tp. Zero for tp == 1.
std::optional<double> custom_allreduce_time_s(const HardwareProfile& gpu, double message_bytes, int tp);

}  // namespace batchsim
