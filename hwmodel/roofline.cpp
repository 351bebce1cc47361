// batchsim — per-operator work and roofline time (see roofline.h).
#include "hwmodel/roofline.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace batchsim {

const char* layer_gemm_name(LayerGemm gemm) {
  switch (gemm) {
    case LayerGemm::qkv:
      return "qkv";
    case LayerGemm::o:
      return "o";
    case LayerGemm::mlp_up:
      return "mlp_up";
    case LayerGemm::mlp_down:
      return "mlp_down";
  }
  throw std::logic_error("layer_gemm_name: bad LayerGemm");
}

int64_t kv_bytes_per_token_per_gpu(const ModelSpec& model, int tp) {
  if (model.is_mla()) return model.kv_bytes_per_token();  // the latent, whole on every GPU
  return 2 * int64_t{model.num_layers} * kv_heads_per_gpu(model, tp) * model.head_dim * model.kv_dtype_bytes;
}

MlaGemmShapes mla_gemm_shapes(const ModelSpec& model, int tp) {
  if (!model.is_mla()) return {};
  MlaGemmShapes s;
  const int64_t d = model.hidden_size;
  const int64_t heads = q_heads_per_gpu(model, tp);
  const int64_t qk = int64_t{model.qk_nope_head_dim} + model.qk_rope_head_dim;
  const int64_t latent = int64_t{model.kv_lora_rank} + model.qk_rope_head_dim;
  s.heads_per_gpu = heads;
  s.qkv_a = {d, (model.q_lora_rank > 0 ? model.q_lora_rank : 0) + latent};
  s.q_b = {model.q_lora_rank > 0 ? model.q_lora_rank : d, heads * qk};
  s.kv_b = {model.kv_lora_rank, heads * (int64_t{model.qk_nope_head_dim} + model.v_head_dim)};
  s.uk = {model.qk_nope_head_dim, model.kv_lora_rank};
  s.uv = {model.kv_lora_rank, model.v_head_dim};
  return s;
}

std::array<GemmShape, kNumLayerGemms> layer_gemm_shapes(const ModelSpec& model, int tp) {
  const int64_t d = model.hidden_size;
  const int64_t q_cols = q_heads_per_gpu(model, tp) * model.head_dim;
  const int64_t kv_cols = kv_heads_per_gpu(model, tp) * model.head_dim;
  const int64_t ffn = model.ffn_size / tp;
  std::array<GemmShape, kNumLayerGemms> shapes;
  shapes[static_cast<int>(LayerGemm::qkv)] = {d, q_cols + 2 * kv_cols};
  shapes[static_cast<int>(LayerGemm::o)] = {q_cols, d};
  if (model.is_mla()) {
    const MlaGemmShapes mla = mla_gemm_shapes(model, tp);
    shapes[static_cast<int>(LayerGemm::qkv)] = mla.qkv_a;
    shapes[static_cast<int>(LayerGemm::o)] = {mla.heads_per_gpu * model.v_head_dim, d};
  }
  shapes[static_cast<int>(LayerGemm::mlp_up)] = {d, ffn * (model.gated_mlp ? 2 : 1)};
  shapes[static_cast<int>(LayerGemm::mlp_down)] = {ffn, d};
  return shapes;
}

GemmShape lm_head_shape(const ModelSpec& model, int tp) { return {model.hidden_size, model.vocab_size / tp}; }

MoeGemmShapes moe_gemm_shapes(const ModelSpec& model, int tp) {
  if (!model.is_moe()) return {};
  const int64_t d = model.hidden_size;
  const int64_t shared = model.shared_expert_ffn_size / tp;
  return {{d, model.num_experts}, {d, shared * (model.gated_mlp ? 2 : 1)}, {shared, d}};
}

ExpertLoad expected_expert_load(const ModelSpec& model, int64_t tokens) {
  const double t = static_cast<double>(tokens);
  if (!model.is_moe()) return {1, t};
  if (tokens <= 0) return {};
  const double e = model.num_experts;
  const double k = model.experts_per_token;
  const double touched = e * (1 - std::pow(1 - k / e, t));
  return {touched, t * k / touched};
}

OperatorWork grouped_gemm_work(GemmShape shape, double rows_per_group, double groups, WeightFormat format) {
  const double m = groups * rows_per_group;
  const double k = static_cast<double>(shape.k);
  const double n = static_cast<double>(shape.n);
  // For 16-bit weights this is 2 (MK + KN + MN): every term is an integer below 2^53 for real
  // shapes, so the split sum is exact and dense costs are unchanged bit for bit.
  return {2 * m * k * n, kActivationBytes * (m * k + m * n) + weight_format_bytes(format) * groups * k * n};
}

OperatorWork gemm_work(GemmShape shape, int64_t m_tokens, WeightFormat format) {
  return grouped_gemm_work(shape, static_cast<double>(m_tokens), 1, format);
}

namespace {
// The sum of min(v, w) over the integers v = a .. b (1 <= a <= b, w > 0): the keys the queries at
// positions a - 1 .. b - 1 see under a sliding window of w keys.
double sum_min(double a, double b, double w) {
  if (b <= w) return (a + b) * (b - a + 1) / 2;
  if (a >= w) return (b - a + 1) * w;
  return (a + w) * (w - a + 1) / 2 + (b - w) * w;
}

AttentionShape attention_shape(const ModelSpec& model, int tp, int64_t window_tokens) {
  return {q_heads_per_gpu(model, tp), kv_heads_per_gpu(model, tp), model.head_dim, model.kv_dtype_bytes, window_tokens};
}
}  // namespace

OperatorWork prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens, int64_t context_before,
                                    bool fa3_tiles, int64_t window_tokens) {
  return prefill_attention_work(model, tp, new_tokens, context_before,
                                fa3_tiles ? AttentionTiles::fa3 : AttentionTiles::none, window_tokens);
}

OperatorWork prefill_attention_work(const ModelSpec& model, int tp, int64_t new_tokens, int64_t context_before,
                                    AttentionTiles tiles, int64_t window_tokens) {
  const double c = static_cast<double>(new_tokens);
  const double p = static_cast<double>(context_before);
  const double hq = static_cast<double>(q_heads_per_gpu(model, tp));
  const double hkv = static_cast<double>(kv_heads_per_gpu(model, tp));
  const double dh = model.head_dim;
  // A window that covers every key of the sequence is no window (FA3 drops it).
  const int64_t window = window_tokens > 0 && window_tokens < context_before + new_tokens ? window_tokens : 0;
  double causal_pairs = c * (c + 1) / 2;
  double pairs = c * p + causal_pairs;
  double keys_read = p + c;
  if (window > 0) {
    const double wt = static_cast<double>(window);
    pairs = sum_min(p + 1, p + c, wt);
    causal_pairs = sum_min(1, c, wt);  // queries against keys of their own chunk
    keys_read = p + c - std::max(0.0, p - wt + 1);
  }
  // Q and O are 16-bit activations; K and V are read at the cache's dtype.
  const double qo_bytes = kActivationBytes * (2 * c * hq * dh);
  const double kv_bytes = model.kv_dtype_bytes * (2 * keys_read * hkv * dh);
  OperatorWork w{4 * hq * dh * pairs, qo_bytes + kv_bytes, c * hq, 4 * hq * dh * causal_pairs};
  w.shape = attention_shape(model, tp, window_tokens);
  if (new_tokens > 0) {
    const double tiles_fa2 =
        static_cast<double>((new_tokens + kFlashPrefillBlockTokens - 1) / kFlashPrefillBlockTokens);
    w.ctas = tiles_fa2 * hq;
    const double cta_keys = window > 0 ? std::min(p + c / 2, static_cast<double>(window)) : p + c / 2;
    w.cta_kv_bytes = w.ctas * cta_keys * 2 * dh * model.kv_dtype_bytes / (hq / hkv);
    w.sequences = 1;
    w.kv_write_tokens = c;
    w.kv_write_bytes = c * hkv * dh * 2 * (kActivationBytes + model.kv_dtype_bytes);
    w.new_tokens_max = c;
    w.key_sum = keys_read;
    w.context_sum = p + c;
    w.context_max = context_before + new_tokens;
    if (tiles == AttentionTiles::none) return w;
    // Counted with the two-warp-group tile: a sequence of at most 64 packed rows is one tile
    // over the same K/V blocks under either height (both have kBlockN 128 at head_dim 128).
    const Fa3Tile tile = attention_tile(tiles, model.head_dim, model.kv_dtype_bytes, false, window > 0);
    const Fa3Tile small = attention_tile(tiles, model.head_dim, model.kv_dtype_bytes, true, window > 0);
    const int64_t group = std::max<int64_t>(1, q_heads_per_gpu(model, tp) / kv_heads_per_gpu(model, tp));
    w.fa3 = fa3_prefill_tiles(new_tokens, context_before, group, tile, window);
    w.fa3.tiles *= hkv;
    w.fa3.iterations *= hkv;
    w.fa3.iteration_flops = 4.0 * static_cast<double>(tile.m * tile.n) * dh;
    w.fa3.small_iteration_flops = 4.0 * static_cast<double>(small.m * small.n) * dh;
    w.fa3.iteration_bytes = static_cast<double>(tile.n) * 2 * dh * model.kv_dtype_bytes;
    w.fa3.small_iteration_bytes = static_cast<double>(small.n) * 2 * dh * model.kv_dtype_bytes;
    w.fa3.tiling = tiles;
  }
  return w;
}

int64_t floor_sum(int64_t n, int64_t m, int64_t a, int64_t b) {
  int64_t sum = 0;
  while (n > 0) {
    // Take the whole multiples of m out of a and b, then count the lattice points under the
    // remaining line with the axes swapped (a < m and b < m from here on).
    sum += (n * (n - 1) / 2) * (a / m) + n * (b / m);
    a %= m;
    b %= m;
    const int64_t y_max = a * n + b;
    if (y_max < m) break;
    n = y_max / m;
    b = y_max % m;
    std::swap(m, a);
  }
  return sum;
}

Fa3Tile fa3_prefill_tile(int head_dim, int kv_dtype_bytes, bool one_mma_warp_group, bool local, bool causal) {
  // A window makes the call local, not causal (hopper/flash_api.cpp: is_causal needs
  // window_size_left < 0); a one-query decode is neither (seqlen_q 1 clears is_causal).
  causal = causal && !local;
  if (kv_dtype_bytes == 1) {
    if (head_dim <= 64) return {192, 160};
    if (head_dim <= 96) return {192, 128};
    if (head_dim <= 128) return {128, 160};
    if (head_dim <= 192) return {128, local ? 128 : 160};
    return {128, local ? 64 : 128};
  }
  const bool one = one_mma_warp_group && (head_dim == 64 || head_dim == 128) && !local;
  if (head_dim <= 64) return one ? Fa3Tile{64, 192} : Fa3Tile{192, causal ? 128 : 160};
  if (head_dim <= 96) return {192, 128};
  if (head_dim <= 128) return {one ? 64 : 128, 128};
  if (head_dim <= 192) return {128, 96};
  return {128, local ? 64 : 80};
}

Fa3Tile attention_tile(AttentionTiles tiles, int head_dim, int kv_dtype_bytes, bool one_mma_warp_group, bool local,
                       bool causal) {
  switch (tiles) {
    case AttentionTiles::fa3:
      return fa3_prefill_tile(head_dim, kv_dtype_bytes, one_mma_warp_group, local, causal);
    case AttentionTiles::generic:
      return {one_mma_warp_group ? 64 : 128, 128};
    case AttentionTiles::none:
      break;
  }
  return {};
}

Fa3PrefillTiles fa3_prefill_tiles(int64_t new_tokens, int64_t context_before, int64_t group, Fa3Tile tile,
                                  int64_t window_tokens) {
  Fa3PrefillTiles t;
  if (new_tokens <= 0) return t;
  const int64_t c = new_tokens, p = context_before, g = group, m = tile.m, n = tile.n;
  const int64_t rows = c * g;
  const int64_t tiles = (rows + m - 1) / m;
  // Before the last tile, last_i = floor(((i + 1) m - 1) / g) < c - 1, and the nested floors
  // fold into one: ceil((p + last_i + 1) / n) = floor(((i + 1) m - 1 + g (p + n)) / (g n)).
  const int64_t last_blocks = (p + c + n - 1) / n;
  int64_t iterations = floor_sum(tiles - 1, g * n, m, m - 1 + g * (p + n)) + last_blocks;
  t.tiles = static_cast<double>(tiles);
  t.iterations_max = static_cast<double>(last_blocks);
  t.packed_rows_max = static_cast<double>(rows);
  const int64_t w = window_tokens;
  if (w > 0 && w < p + c) {
    // Tile i starts its blocks at n_min_i = floor((p + first_i - w + 1) / n) once that is
    // positive, i.e. from tile i0 = ceil(g (w - p) / m) on; there, with first_i = floor(i m / g),
    // n_min_i = floor((i m + g (p - w + 1)) / (g n)), a floor_sum.
    auto n_min = [&](int64_t i) {
      const int64_t a = p + i * m / g - w + 1;
      return a > 0 ? a / n : int64_t{0};
    };
    auto n_max = [&](int64_t i) { return (p + std::min(c - 1, ((i + 1) * m - 1) / g) + n) / n; };
    const int64_t i0 = w > p ? (g * (w - p) + m - 1) / m : 0;
    if (i0 < tiles) iterations -= floor_sum(tiles - i0, g * n, m, i0 * m + g * (p - w + 1));
    // The longest tile: the last; the last before the window engages (n_min 0, n_max rising);
    // and among the tiles in between, whose n_max - n_min depends on i m mod g n only, one
    // period of that pattern.
    int64_t longest = n_max(tiles - 1) - n_min(tiles - 1);
    if (i0 > 0) longest = std::max(longest, n_max(std::min(i0, tiles) - 1) - n_min(std::min(i0, tiles) - 1));
    const int64_t period = g * n / std::gcd(m, g * n);
    for (int64_t i = i0; i < std::min(tiles - 1, i0 + period); ++i) longest = std::max(longest, n_max(i) - n_min(i));
    t.iterations_max = static_cast<double>(longest);
  }
  t.iterations = static_cast<double>(iterations);
  return t;
}

OperatorWork decode_attention_work(const ModelSpec& model, int tp, int64_t num_decodes, int64_t context_sum,
                                   int64_t context_max, int64_t window_tokens, int64_t windowed_context_sum) {
  const double n = static_cast<double>(num_decodes);
  const double ctx = static_cast<double>(context_sum);
  const double hq = static_cast<double>(q_heads_per_gpu(model, tp));
  const double hkv = static_cast<double>(kv_heads_per_gpu(model, tp));
  const double dh = model.head_dim;
  if (context_max <= 0 && num_decodes > 0) {
    context_max = (context_sum + num_decodes - 1) / num_decodes;  // equal contexts
  }
  // With a window shorter than the longest context each sequence reads its last `window`
  // keys only (vLLM's sliding_window; FA3 n_block_min).
  const bool windowed = window_tokens > 0 && window_tokens < context_max;
  double read = ctx;
  if (windowed) {
    read = windowed_context_sum >= 0 ? static_cast<double>(windowed_context_sum)
                                     : std::min(ctx, n * static_cast<double>(window_tokens));
  }
  const double kv_bytes = model.kv_dtype_bytes * (2 * read * hkv * dh);
  const double qo_bytes = kActivationBytes * (2 * n * hq * dh);
  OperatorWork w{4 * hq * dh * read, kv_bytes + qo_bytes, n * hkv};
  w.unit_bytes_max = model.kv_dtype_bytes * 2.0 * static_cast<double>(windowed ? window_tokens : context_max) * dh;
  w.context_max = context_max;
  w.shape = attention_shape(model, tp, window_tokens);
  w.key_sum = read;
  w.context_sum = ctx;
  return w;
}

int64_t flash_decode_num_splits(int64_t ctas, int64_t context_tokens, int64_t sm_count) {
  if (sm_count <= 0 || ctas <= 0) return 1;
  // "If we have enough to almost fill the SMs, then just use 1 split."
  if (static_cast<double>(ctas) >= 0.8 * static_cast<double>(sm_count)) return 1;
  const int64_t n_blocks =
      std::max<int64_t>(1, (context_tokens + kFlashDecodeBlockTokens - 1) / kFlashDecodeBlockTokens);
  const int64_t max_splits = std::min({int64_t{128}, sm_count, n_blocks});
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  // A split count is eligible when it changes the blocks per split (else it is the previous one).
  auto eligible = [&](int64_t s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); };
  auto wave_efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(ctas * s) / static_cast<double>(sm_count);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (eligible(s)) best = std::max(best, wave_efficiency(s));
  }
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (eligible(s) && wave_efficiency(s) >= 0.85 * best) return s;
  }
  return 1;
}

double allreduce_message_bytes(const ModelSpec& model, int64_t tokens) {
  return static_cast<double>(tokens) * model.hidden_size * kActivationBytes;
}

double elementwise_bytes(const ModelSpec& model, int tp, ElementwiseOp op, int64_t tokens) {
  const double m = static_cast<double>(tokens) * kActivationBytes;
  const double d = model.hidden_size;
  switch (op) {
    case ElementwiseOp::norm:
      return 2 * m * d;
    case ElementwiseOp::rope:
      return 2 * m * static_cast<double>(q_heads_per_gpu(model, tp) + kv_heads_per_gpu(model, tp)) * model.head_dim;
    case ElementwiseOp::activation: {
      const double per_row = model.gated_mlp ? 3 : 2;  // elements moved per intermediate column
      const double ffn = static_cast<double>(model.ffn_size / tp);
      if (!model.is_moe()) return m * ffn * per_row;
      const double k = model.experts_per_token;
      const double shared = static_cast<double>(model.shared_expert_ffn_size / tp);
      return m * (k * ffn * per_row + shared * per_row + (k + 1) * d);
    }
    case ElementwiseOp::residual_add:
      return 3 * m * d;
    case ElementwiseOp::embedding:
      return 2 * m * d;
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

double gemm_compute_efficiency(const HardwareProfile& gpu, double m_rows) {
  return gpu.gemm_eta_max * m_rows / (m_rows + gpu.gemm_m_half);
}

double gemm_peak_flops(const HardwareProfile& gpu, WeightFormat format) {
  switch (format) {
    case WeightFormat::fp8:
    case WeightFormat::fp8_block:
      return gpu.peak_fp8_flops > 0 ? gpu.peak_fp8_flops : gpu.peak_flops;
    case WeightFormat::mxfp4:
    case WeightFormat::nvfp4:
      return gpu.peak_fp4_flops > 0 ? gpu.peak_fp4_flops : gpu.peak_flops;
    case WeightFormat::bf16:
      break;
  }
  return gpu.peak_flops;
}

namespace {
double gemm_compute_s(const HardwareProfile& gpu, const OperatorWork& w, double m_rows, WeightFormat format) {
  return w.flops / (gemm_peak_flops(gpu, format) * gemm_compute_efficiency(gpu, m_rows));
}
double streaming_s(const HardwareProfile& gpu, double bytes, double efficiency) {
  return bytes / (gpu.hbm_bytes_per_s * efficiency);
}
}  // namespace

double grouped_gemm_time_s(const HardwareProfile& gpu, GemmShape shape, double rows_per_group, double groups,
                           WeightFormat format) {
  if (!(rows_per_group > 0 && groups > 0) || shape.k <= 0 || shape.n <= 0) return 0;
  const OperatorWork w = grouped_gemm_work(shape, rows_per_group, groups, format);
  return gpu.kernel_launch_s + roofline_combine(gemm_compute_s(gpu, w, rows_per_group, format),
                                                streaming_s(gpu, w.bytes, gpu.hbm_efficiency),
                                                gpu.gemm_roofline_exponent);
}

double gemm_roofline_time_s(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, WeightFormat format) {
  return grouped_gemm_time_s(gpu, shape, static_cast<double>(m_tokens), 1, format);
}

double gemm_time_s(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, WeightFormat format) {
  if (m_tokens <= 0 || shape.k <= 0 || shape.n <= 0) return 0;
  if (format == WeightFormat::fp8_block && !gpu.gemm_tables[static_cast<size_t>(WeightFormat::fp8_block)] &&
      gpu.gemm_table(WeightFormat::fp8) != nullptr) {
    // Block FP8 as the per-tensor FP8 GEMM of the same shape, scaled as the kernel measured
    // (HardwareProfile::fp8_block_gemms; the collector's per-call floor is not the kernel's).
    return gpu.fp8_block_gemm_scale() * gemm_time_s(gpu, shape, m_tokens, WeightFormat::fp8);
  }
  if (const GemmTable* table = gpu.gemm_table(format)) {
    if (const auto s = table->seconds(static_cast<double>(m_tokens), shape.n, shape.k)) return *s;
  }
  return gemm_roofline_time_s(gpu, shape, m_tokens, format);
}

bool grouped_gemm_compute_bound(const HardwareProfile& gpu, GemmShape shape, double rows_per_group, double groups,
                                WeightFormat format) {
  if (!(rows_per_group > 0 && groups > 0)) return false;
  const OperatorWork w = grouped_gemm_work(shape, rows_per_group, groups, format);
  return gemm_compute_s(gpu, w, rows_per_group, format) >= streaming_s(gpu, w.bytes, gpu.hbm_efficiency);
}

bool gemm_compute_bound(const HardwareProfile& gpu, GemmShape shape, int64_t m_tokens, WeightFormat format) {
  return grouped_gemm_compute_bound(gpu, shape, static_cast<double>(m_tokens), 1, format);
}

namespace {
// The FlashAttention-3 part of prefill_attention_time_s: the busiest SM's tiles.
double fa3_prefill_sm_s(const HardwareProfile& gpu, const Fa3PrefillTiles& t) {
  const double flops = t.packed_rows_max <= 64 ? t.small_iteration_flops : t.iteration_flops;
  const double iteration_s = flops / (gpu.peak_flops / gpu.sm_count * gpu.prefill_attention_efficiency);
  const double all_s = t.tiles * gpu.prefill_attention_per_tile_s + t.iterations * iteration_s;
  const double longest_s = gpu.prefill_attention_per_tile_s + t.iterations_max * iteration_s;
  return std::max(all_s / gpu.sm_count, longest_s);
}
}  // namespace

bool costs_fa3_prefill_tiles(const HardwareProfile& gpu) {
  return gpu.prefill_attention_kernel == PrefillAttentionKernel::flash_attention_3 && gpu.sm_count > 0;
}

AttentionTiles prefill_attention_tiles(const HardwareProfile& gpu, const ModelSpec& model) {
  if (const AttentionKernelFit* k =
          find_attention_kernel(gpu.attention_kernels, true, model.head_dim, model.kv_dtype_bytes)) {
    return k->tiles;
  }
  return costs_fa3_prefill_tiles(gpu) ? AttentionTiles::fa3 : AttentionTiles::none;
}

namespace {
// hopper/heuristics.h num_splits_heuristic, as vllm-flash-attn 0.24 has it (fa3_decode_num_splits).
int64_t fa3_num_splits_heuristic(int64_t total_mblocks, int64_t num_sms, int64_t num_n_blocks, int64_t num_m_blocks,
                                 double size_one_kv_head, bool causal_or_local, int64_t max_splits) {
  if (static_cast<double>(total_mblocks) >= 0.8 * static_cast<double>(num_sms)) {
    // Enough blocks to fill the SMs: one split, unless one KV head overflows a 50 MB L2 and
    // enough queries go over it twice (never for a causal or local call).
    const double l2_bytes = 50.0 * 1024 * 1024;
    if (size_one_kv_head > l2_bytes && num_m_blocks >= num_sms * 2 && !causal_or_local) {
      return std::min(static_cast<int64_t>(std::ceil(size_one_kv_head / l2_bytes)), max_splits);
    }
    return 1;
  }
  if (num_n_blocks <= 4) return 1;
  if (num_n_blocks <= 8 && total_mblocks >= 32) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(total_mblocks * s) / static_cast<double>(num_sms);
    double e = waves / std::ceil(waves);
    if (num_n_blocks / s < 4) e *= 0.85;  // fewer than 4 K/V blocks per split
    return e;
  };
  double best = 0;
  for (int64_t s = 1; s <= max_splits; ++s) best = std::max(best, efficiency(s));
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (efficiency(s) >= 0.95 * best) return s;
  }
  return 1;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t fa3_decode_num_splits(int64_t batch, int64_t kv_heads, int64_t group, int64_t context, int64_t window_tokens,
                              int head_dim, int kv_dtype_bytes, Fa3Tile tile, int64_t sm_count) {
  if (sm_count <= 0 || batch <= 0 || context <= 0 || tile.m <= 0 || tile.n <= 0) return 1;
  const int64_t m_blocks = ceil_div(group, tile.m);
  // The static bound sees the blocks a window can load (flash_api.cpp: seqlen_k limited to
  // window + 1 + kBlockM when local).
  const int64_t loaded = window_tokens == 0 ? context : std::min(context, window_tokens + 1 + tile.m);
  const double size_one_kv_head = static_cast<double>(context) * 2 * head_dim * kv_dtype_bytes;
  const int64_t bound = fa3_num_splits_heuristic(kv_heads * m_blocks, sm_count, ceil_div(loaded, tile.n), m_blocks,
                                                 size_one_kv_head, window_tokens > 0, 128);
  if (batch > 992 || bound == 1) return 1;
  // The dynamic pass counts the whole of seqlen_k, window or not.
  const int64_t n_blocks = ceil_div(context, tile.n);
  const double total_blocks = static_cast<double>(batch * m_blocks * n_blocks);
  const auto blocks_per_sm = static_cast<int64_t>(
      std::ceil(total_blocks * 1.1 * static_cast<double>(kv_heads) / static_cast<double>(sm_count)));
  return std::max<int64_t>(std::min(ceil_div(n_blocks, std::max<int64_t>(1, blocks_per_sm)), bound), 1);
}

AttentionDecodeStructure attention_decode_structure(const OperatorWork& work, int64_t num_decodes, AttentionTiles tiles,
                                                    double sm_count) {
  AttentionDecodeStructure s;
  if (num_decodes <= 0) return s;
  const AttentionShape& a = work.shape;
  const auto b = static_cast<double>(num_decodes);
  const int64_t group = std::max<int64_t>(1, a.q_heads / std::max<int64_t>(1, a.kv_heads));
  const int64_t longest = std::max<int64_t>(1, work.context_max);
  const double mean = std::max(1.0, work.context_sum / b);
  const int64_t w = a.window_tokens > 0 && a.window_tokens < longest ? a.window_tokens : 0;
  // One query per sequence: not causal; the padded query rows are the GQA group (PackGQA).
  const Fa3Tile tile = attention_tile(tiles == AttentionTiles::none ? AttentionTiles::generic : tiles, a.head_dim,
                                      a.kv_dtype_bytes, group <= 64, w > 0, false);
  const double n = static_cast<double>(tile.n);
  // The first K/V block a windowed sequence of `keys` keys reads (hopper/block.h n_block_min).
  auto first_block = [&](double keys) {
    return w > 0 ? std::floor(std::max(0.0, keys - static_cast<double>(w)) / n) : 0.0;
  };
  auto blocks = [&](double keys) { return std::ceil(keys / n) - first_block(keys); };
  const auto sms = static_cast<int64_t>(sm_count);
  const int64_t splits =
      fa3_decode_num_splits(num_decodes, a.kv_heads, group, longest, w, a.head_dim, a.kv_dtype_bytes, tile, sms);
  const double m_blocks = std::ceil(static_cast<double>(group) / static_cast<double>(tile.m));
  const double ctas = b * static_cast<double>(a.kv_heads) * m_blocks * static_cast<double>(splits);
  s.sequences = b;
  s.units = b * static_cast<double>(a.kv_heads);
  // A windowed sequence reads from its first block's start: up to a block more than its window.
  double tokens = work.key_sum;
  if (w > 0) tokens += b * std::max(0.0, mean - first_block(mean) * n - std::min(mean, static_cast<double>(w)));
  s.kv_bytes = a.kv_dtype_bytes * 2.0 * static_cast<double>(a.kv_heads) * a.head_dim * tokens +
               kActivationBytes * 2.0 * b * static_cast<double>(a.q_heads) * a.head_dim;
  s.block_bytes = n * 2 * a.head_dim * a.kv_dtype_bytes;
  s.block_flops = 4.0 * static_cast<double>(tile.m) * n * a.head_dim;
  if (sms > 0) {
    // The busiest SM: `waves` blocks of the mean sequence's share, and never less than the
    // longest sequence's share (the convention of the flat model for mixed contexts).
    const double waves = std::ceil(ctas / sm_count);
    const double per_split = static_cast<double>(splits);
    s.sm_blocks = std::max(waves * std::ceil(blocks(mean) / per_split),
                           std::ceil(blocks(static_cast<double>(longest)) / per_split));
  }
  s.split = splits > 1;
  s.window = w > 0;
  s.head_dim = a.head_dim;
  s.kv_dtype_bytes = a.kv_dtype_bytes;
  return s;
}

double attention_kernel_decode_time_s(const HardwareProfile& gpu, const AttentionKernelFit& k,
                                      const AttentionDecodeStructure& s) {
  if (s.sequences <= 0) return 0;
  double kv_s = s.kv_bytes / (gpu.hbm_bytes_per_s * k.efficiency_at(s.head_dim));
  double block_s = k.sm_bytes_per_s > 0 ? s.block_bytes / k.sm_bytes_per_s : 0;
  if (k.mma_efficiency > 0 && gpu.sm_count > 0) {
    // FA3's FP8 path multiplies e4m3 Q and K/V on the FP8 tensor cores.
    const double peak = s.kv_dtype_bytes == 1 && gpu.peak_fp8_flops > 0 ? gpu.peak_fp8_flops : gpu.peak_flops;
    block_s = std::max(block_s, s.block_flops / (peak / gpu.sm_count * k.mma_efficiency));
  }
  kv_s = std::max(kv_s, s.sm_blocks * block_s);
  double t = k.launch_s;
  if (s.split) t += k.combine_s;
  if (s.window) t += k.window_s + s.units * k.window_per_unit_s;
  // FA4's scheduler on Hopper at head_dim 512: a cost per sequence while the batch is in the
  // prepare-scheduler's dynamic range (at most 992 sequences).
  if (s.sequences <= 992) t += s.sequences * k.per_seq_dynamic_s;
  return t + roofline_combine(s.units * (k.per_unit_s + k.per_unit_head_dim_s * s.head_dim), kv_s, k.exponent);
}

double attention_kernel_prefill_time_s(const HardwareProfile& gpu, const AttentionKernelFit& k,
                                       const OperatorWork& work) {
  if (work.flops <= 0 || gpu.sm_count <= 0) return 0;
  const Fa3PrefillTiles& t = work.fa3;
  const bool small = t.packed_rows_max <= 64;
  const double iteration_flops = small ? t.small_iteration_flops : t.iteration_flops;
  const double iteration_bytes = small ? t.small_iteration_bytes : t.iteration_bytes;
  const double iteration_s = iteration_flops / (gpu.peak_flops / gpu.sm_count * k.efficiency_at(work.shape.head_dim));
  double sm_s = std::max((t.tiles * k.per_tile_s + t.iterations * iteration_s) / gpu.sm_count,
                         k.per_tile_s + t.iterations_max * iteration_s);
  if (k.kv_reread_bytes_per_s > 0) sm_s = std::max(sm_s, t.iterations * iteration_bytes / k.kv_reread_bytes_per_s);
  double kv_write_s = work.kv_write_tokens * k.kv_write_per_token_s;
  if (k.kv_write_efficiency > 0) kv_write_s += work.kv_write_bytes / (gpu.hbm_bytes_per_s * k.kv_write_efficiency);
  return k.launch_s + work.sequences * k.per_seq_s + kv_write_s +
         roofline_combine(sm_s, work.bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency), k.exponent);
}

double prefill_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work) {
  if (work.flops <= 0) return 0;
  if (!gpu.attention_kernels.empty() && work.shape.head_dim > 0) {
    const AttentionShape& a = work.shape;
    const AttentionKernelFit* decode =
        work.new_tokens_max == 1 ? find_attention_kernel(gpu.attention_kernels, false, a.head_dim, a.kv_dtype_bytes)
                                 : nullptr;
    if (decode != nullptr) {
      // One new token per sequence: the decode kernel's call over each sequence's keys.
      return attention_kernel_decode_time_s(
          gpu, *decode,
          attention_decode_structure(work, static_cast<int64_t>(work.sequences), decode->tiles, gpu.sm_count));
    }
    const AttentionKernelFit* k = find_attention_kernel(gpu.attention_kernels, true, a.head_dim, a.kv_dtype_bytes);
    if (k != nullptr && work.fa3.tiling == k->tiles) return attention_kernel_prefill_time_s(gpu, *k, work);
  }
  double kv_write_s = work.kv_write_tokens * gpu.attention_kv_write_per_token_s;
  if (gpu.attention_kv_write_efficiency > 0) {
    kv_write_s += streaming_s(gpu, work.kv_write_bytes, gpu.attention_kv_write_efficiency);
  }
  if (costs_fa3_prefill_tiles(gpu)) {
    return gpu.attention_launch_s + work.sequences * gpu.prefill_attention_per_seq_s + kv_write_s +
           roofline_combine(fa3_prefill_sm_s(gpu, work.fa3), streaming_s(gpu, work.bytes, gpu.hbm_efficiency),
                            gpu.prefill_attention_roofline_exponent);
  }
  const double compute_s = (work.flops - work.causal_flops) / (gpu.peak_flops * gpu.prefill_attention_efficiency) +
                           work.causal_flops / (gpu.peak_flops * gpu.prefill_attention_causal_efficiency);
  double memory_s = streaming_s(gpu, work.bytes, gpu.hbm_efficiency);
  if (gpu.sm_count > 0 && gpu.prefill_attention_sm_bytes_per_s > 0 && work.ctas > 0) {
    const double waves = std::ceil(work.ctas / gpu.sm_count);
    memory_s = std::max(memory_s, waves * (work.cta_kv_bytes / work.ctas) / gpu.prefill_attention_sm_bytes_per_s);
  }
  return gpu.attention_launch_s + work.units * gpu.prefill_attention_per_head_token_s +
         work.sequences * gpu.prefill_attention_per_seq_s + kv_write_s +
         roofline_combine(compute_s, memory_s, gpu.prefill_attention_roofline_exponent);
}

double decode_attention_time_s(const HardwareProfile& gpu, const OperatorWork& work, int64_t num_decodes) {
  if (num_decodes <= 0) return 0;
  if (!gpu.attention_kernels.empty() && work.shape.head_dim > 0) {
    const AttentionShape& a = work.shape;
    if (const AttentionKernelFit* k =
            find_attention_kernel(gpu.attention_kernels, false, a.head_dim, a.kv_dtype_bytes)) {
      return attention_kernel_decode_time_s(gpu, *k,
                                            attention_decode_structure(work, num_decodes, k->tiles, gpu.sm_count));
    }
  }
  double kv_s = std::max(work.flops / (gpu.peak_flops * gpu.prefill_attention_efficiency),
                         streaming_s(gpu, work.bytes, gpu.decode_attention_efficiency));
  const double fixed_s = work.units * gpu.decode_attention_per_seq_kv_head_s;
  const auto sm_count = static_cast<int64_t>(gpu.sm_count);
  if (sm_count > 0 && work.units > 0 && gpu.decode_attention_sm_bytes_per_s > 0) {
    const auto ctas = static_cast<int64_t>(work.units);
    const int64_t splits = flash_decode_num_splits(ctas, work.context_max, sm_count);
    const double waves = std::ceil(static_cast<double>(ctas * splits) / static_cast<double>(sm_count));
    // The busiest SM streams `waves` blocks of the mean unit's share, and no SM finishes
    // before the longest unit's share is read.
    const double unit_bytes = work.bytes / work.units;
    const double sm_bytes = std::max(waves * unit_bytes, work.unit_bytes_max) / static_cast<double>(splits);
    kv_s = std::max(kv_s, sm_bytes / gpu.decode_attention_sm_bytes_per_s);
  }
  return gpu.attention_launch_s + static_cast<double>(num_decodes) * gpu.decode_attention_per_seq_s +
         roofline_combine(fixed_s, kv_s, gpu.decode_attention_roofline_exponent);
}

double elementwise_time_s(const HardwareProfile& gpu, ElementwiseOp op, double bytes) {
  if (bytes <= 0) return 0;
  const StreamingKernel& k = gpu.elementwise[static_cast<int>(op)];
  return k.launch_s + streaming_s(gpu, bytes, k.efficiency);
}

double ring_allreduce_wire_bytes(double message_bytes, int tp) { return message_bytes * 2.0 * (tp - 1) / tp; }

double allreduce_time_s(const HardwareProfile& gpu, double message_bytes, int tp) {
  if (tp <= 1) return 0;
  const double wire_bytes = ring_allreduce_wire_bytes(message_bytes, tp);
  for (const AllReduceFit& fit : gpu.allreduce) {
    if (fit.tp == tp) return fit.latency_s + wire_bytes / fit.bytes_per_s;
  }
  const int node = gpu.node_gpus();
  if (tp > node && gpu.internode_bytes_per_s > 0) {
    // Over several nodes the ring leaves each node through a NIC, and the ring runs no faster
    // than its slowest link: each GPU's 2 (tp-1)/tp of the message passes at one NIC's rate,
    // not NVLink's (aiconfigurator prices TP 16 the same way, the ring's wire bytes at
    // h100_sxm.yaml's inter_node_bw). The latency is one node's all-reduce plus a hop between
    // nodes. Vidur's all-reduces over two 8-GPU A100 nodes reach about 0.7 of that rate on
    // large messages and less on mid-sized ones, so this is a lower bound (hwmodel/README.md,
    // "All-reduce over several nodes").
    return allreduce_time_s(gpu, 0, node) + gpu.internode_latency_s + wire_bytes / gpu.internode_bytes_per_s;
  }
  return gpu.interconnect_latency_s + wire_bytes / gpu.interconnect_bytes_per_s;
}

std::optional<double> custom_allreduce_time_s(const HardwareProfile& gpu, double message_bytes, int tp) {
  if (tp <= 1) return 0.0;
  for (const AllReduceFit& fit : gpu.custom_allreduce) {
    if (fit.tp == tp) return fit.latency_s + message_bytes / fit.bytes_per_s;
  }
  return std::nullopt;
}

}  // namespace batchsim
