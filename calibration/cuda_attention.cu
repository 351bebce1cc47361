// CUDA attention microkernels: paged decode (single pass and partitioned + reduce) and chunked
// prefill over prior context. See cuda_kernels.h for the contracts; the maths is the CPU
// reference's (attention_reference.h), which `batchsim-calibrate check` compares against.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "calibration/cuda_check.h"
#include "calibration/cuda_kernels.h"
#include "calibration/paged_kv_layout.h"

namespace batchsim::calibration {
namespace {

constexpr int kThreads = 128;  // 4 warps per CTA, as vLLM's paged kernels use
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Reduction over the CTA; every thread gets the result. Starts with a barrier so `scratch`
// and any shared memory written before the call are safe to use.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(v) : warp_sum(v);
}

// Raw storage for VEC consecutive bf16 values, so a load is one 4/8/16-byte access.
template <int VEC>
struct Bf16Raw;
template <>
struct Bf16Raw<2> {
  using type = unsigned int;
};
template <>
struct Bf16Raw<4> {
  using type = uint2;
};
template <>
struct Bf16Raw<8> {
  using type = uint4;
};

template <int VEC>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* p, float (&out)[VEC]) {
  const typename Bf16Raw<VEC>::type raw = *reinterpret_cast<const typename Bf16Raw<VEC>::type*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// One CTA per (head, sequence, partition). `partition_tokens` is the whole (longest) context
// for the single-pass kernel. Dynamic shared memory holds the partition's logits.
template <int HEAD_DIM>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(DecodeAttentionArgs a, int partition_tokens, bool write_partials) {
  constexpr int kKVec = HEAD_DIM / 32;  // q·k: one warp covers one K row
  constexpr int kVVec = 8;              // P·V: one thread covers 8 dims (16 bytes)
  constexpr int kThreadsPerVRow = HEAD_DIM / kVVec;
  constexpr int kVGroups = kThreads / kThreadsPerVRow;
  constexpr int kUnroll = 4;  // K rows in flight per warp
  extern __shared__ float logits[];
  __shared__ float q_s[HEAD_DIM];
  __shared__ float red[kWarps];
  __shared__ float acc_s[kVGroups][HEAD_DIM];

  const int head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  const int len = a.seq_lens[seq];
  const int begin = part * partition_tokens;
  if (begin >= len) return;  // past this sequence's end; the reduce reads only valid partitions
  const int end = min(len, begin + partition_tokens);
  const int kv_head = kv_head_for(head, a.num_heads, a.num_kv_heads);
  const PagedKvLayout layout{a.block_size_tokens, a.num_kv_heads, HEAD_DIM};
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const auto* q =
      reinterpret_cast<const __nv_bfloat16*>(a.q) + (static_cast<int64_t>(seq) * a.num_heads + head) * HEAD_DIM;
  const auto* k_cache = reinterpret_cast<const __nv_bfloat16*>(a.k_cache);
  const auto* v_cache = reinterpret_cast<const __nv_bfloat16*>(a.v_cache);

  for (int i = threadIdx.x; i < HEAD_DIM; i += kThreads) q_s[i] = __bfloat162float(q[i]) * a.scale;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float q_r[kKVec];
#pragma unroll
  for (int i = 0; i < kKVec; ++i) q_r[i] = q_s[lane * kKVec + i];

  // 1. Logits. Warp w takes tokens [begin + w·U, +U), then strides by kWarps·U.
  float local_max = -INFINITY;
  for (int t0 = begin + warp * kUnroll; t0 < end; t0 += kWarps * kUnroll) {
    float k_r[kUnroll][kKVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (t0 + u < end) {
        load_bf16<kKVec>(k_cache + layout.token_row_offset(table, t0 + u, kv_head) + lane * kKVec, k_r[u]);
      } else {
#pragma unroll
        for (int i = 0; i < kKVec; ++i) k_r[u][i] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kKVec; ++i) dot += q_r[i] * k_r[u][i];
      dot = warp_sum(dot);
      if (t0 + u < end) {
        if (lane == 0) logits[t0 + u - begin] = dot;
        local_max = fmaxf(local_max, dot);
      }
    }
  }
  const float max_logit = block_reduce<true>(local_max, red);

  // 2. Softmax numerators in place; their sum.
  float local_sum = 0.0f;
  for (int i = threadIdx.x; i < end - begin; i += kThreads) {
    const float p = __expf(logits[i] - max_logit);
    logits[i] = p;
    local_sum += p;
  }
  const float exp_sum = block_reduce<false>(local_sum, red);

  // 3. P·V. Thread group g takes tokens begin+g, begin+g+kVGroups, …; 8 dims per thread. Only
  // tokens < len are read: the tail of the last block may hold stale data (vLLM issue 641).
  const int group = threadIdx.x / kThreadsPerVRow;
  const int dim0 = (threadIdx.x % kThreadsPerVRow) * kVVec;
  float acc[kVVec] = {};
#pragma unroll 4
  for (int t = begin + group; t < end; t += kVGroups) {
    float v_r[kVVec];
    load_bf16<kVVec>(v_cache + layout.token_row_offset(table, t, kv_head) + dim0, v_r);
    const float p = logits[t - begin];
#pragma unroll
    for (int i = 0; i < kVVec; ++i) acc[i] += p * v_r[i];
  }
#pragma unroll
  for (int i = 0; i < kVVec; ++i) acc_s[group][dim0 + i] = acc[i];
  __syncthreads();

  for (int i = threadIdx.x; i < HEAD_DIM; i += kThreads) {
    float v = 0.0f;
#pragma unroll
    for (int g = 0; g < kVGroups; ++g) v += acc_s[g][i];
    v /= exp_sum;
    if (write_partials) {
      const int64_t slot = (static_cast<int64_t>(seq) * a.num_heads + head) * gridDim.z + part;
      a.tmp_out[slot * HEAD_DIM + i] = v;
      if (i == 0) {
        a.max_logits[slot] = max_logit;
        a.exp_sums[slot] = exp_sum;
      }
    } else {
      reinterpret_cast<__nv_bfloat16*>(a.out)[(static_cast<int64_t>(seq) * a.num_heads + head) * HEAD_DIM + i] =
          __float2bfloat16(v);
    }
  }
}

// Combines the partitions of one (sequence, head): weights exp_sum_p · exp(m_p − max m).
template <int HEAD_DIM>
__global__ void __launch_bounds__(kThreads)
    paged_decode_reduce_kernel(DecodeAttentionArgs a, int partition_tokens, int max_num_partitions) {
  const int head = blockIdx.x, seq = blockIdx.y;
  const int num_partitions = ceil_div(a.seq_lens[seq], partition_tokens);
  const int64_t base = (static_cast<int64_t>(seq) * a.num_heads + head) * max_num_partitions;
  float global_max = -INFINITY;
  for (int p = 0; p < num_partitions; ++p) global_max = fmaxf(global_max, a.max_logits[base + p]);
  float total = 0.0f;
  for (int p = 0; p < num_partitions; ++p) total += a.exp_sums[base + p] * __expf(a.max_logits[base + p] - global_max);
  for (int i = threadIdx.x; i < HEAD_DIM; i += kThreads) {
    float v = 0.0f;
    for (int p = 0; p < num_partitions; ++p) {
      const float w = a.exp_sums[base + p] * __expf(a.max_logits[base + p] - global_max);
      v += w * a.tmp_out[(base + p) * HEAD_DIM + i];
    }
    reinterpret_cast<__nv_bfloat16*>(a.out)[(static_cast<int64_t>(seq) * a.num_heads + head) * HEAD_DIM + i] =
        __float2bfloat16(v / total);
  }
}

// Stages keys t0 … t0 + TILE - 1 of one KV head from the paged cache into shared-memory tiles,
// 16 bytes per thread per step; keys past `last_position` are zero-filled, never read. Both
// prefill kernels (CUDA-core and tensor-core) stage K/V this way.
template <int TILE, int HEAD_DIM>
__device__ void stage_kv_tile(const PagedKvLayout& layout, const int32_t* block_table, int kv_head, int t0,
                              int last_position, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                              __nv_bfloat16 (&k_tile)[TILE][HEAD_DIM], __nv_bfloat16 (&v_tile)[TILE][HEAD_DIM]) {
  constexpr int kChunksPerRow = HEAD_DIM / 8;  // 16-byte chunks of a BF16 row
  for (int c = threadIdx.x; c < TILE * kChunksPerRow; c += kThreads) {
    const int j = c / kChunksPerRow, off = (c % kChunksPerRow) * 8;
    uint4 k_raw = make_uint4(0, 0, 0, 0), v_raw = make_uint4(0, 0, 0, 0);
    if (t0 + j <= last_position) {
      const int64_t g = layout.token_row_offset(block_table, t0 + j, kv_head) + off;
      k_raw = *reinterpret_cast<const uint4*>(k_cache + g);
      v_raw = *reinterpret_cast<const uint4*>(v_cache + g);
    }
    *reinterpret_cast<uint4*>(&k_tile[j][off]) = k_raw;
    *reinterpret_cast<uint4*>(&v_tile[j][off]) = v_raw;
  }
}

// Chunked prefill: CTA (row tile, head) owns kRowsPerCta query rows; each warp kRowsPerWarp of
// them with head_dim split across lanes. KV tiles of kTileTokens tokens pass through shared
// memory; each row keeps a running max m, sum l and unnormalised output (online softmax).
constexpr int kRowsPerWarp = 8;
constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
constexpr int kTileTokens = 32;

template <int HEAD_DIM>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(PrefillAttentionArgs a) {
  constexpr int kVec = HEAD_DIM / 32;
  __shared__ __align__(16) __nv_bfloat16 k_s[kTileTokens][HEAD_DIM];
  __shared__ __align__(16) __nv_bfloat16 v_s[kTileTokens][HEAD_DIM];

  const int head = blockIdx.y;
  const int row0 = blockIdx.x * kRowsPerCta;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = kv_head_for(head, a.num_heads, a.num_kv_heads);
  const PagedKvLayout layout{a.block_size_tokens, a.num_kv_heads, HEAD_DIM};
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(a.q);
  const auto* k_cache = reinterpret_cast<const __nv_bfloat16*>(a.k_cache);
  const auto* v_cache = reinterpret_cast<const __nv_bfloat16*>(a.v_cache);

  float q_r[kRowsPerWarp][kVec], acc[kRowsPerWarp][kVec], m[kRowsPerWarp], l[kRowsPerWarp];
  int position[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + warp * kRowsPerWarp + r;
    position[r] = a.prior_tokens + row;  // absolute position; sees keys 0 … position
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[r][i] = 0.0f;
    if (row < a.chunk_tokens) {
      load_bf16<kVec>(q + (static_cast<int64_t>(row) * a.num_heads + head) * HEAD_DIM + lane * kVec, q_r[r]);
#pragma unroll
      for (int i = 0; i < kVec; ++i) q_r[r][i] *= a.scale;
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) q_r[r][i] = 0.0f;
    }
  }
  const int last_position = a.prior_tokens + min(row0 + kRowsPerCta, a.chunk_tokens) - 1;

  for (int t0 = 0; t0 <= last_position; t0 += kTileTokens) {
    __syncthreads();  // the previous tile is no longer read
    stage_kv_tile(layout, a.block_table, kv_head, t0, last_position, k_cache, v_cache, k_s, v_s);
    __syncthreads();
    const int tile_end = min(kTileTokens, last_position - t0 + 1);
    for (int j = 0; j < tile_end; ++j) {
      const int t = t0 + j;
      float k_r[kVec], v_r[kVec];
      load_bf16<kVec>(&k_s[j][lane * kVec], k_r);
      load_bf16<kVec>(&v_s[j][lane * kVec], v_r);
      float s[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot += q_r[r][i] * k_r[i];
        s[r] = warp_sum(dot);
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (t > position[r]) continue;  // causal mask; uniform across the warp
        const float m_new = fmaxf(m[r], s[r]);
        const float correction = __expf(m[r] - m_new);  // 0 for the first key (m = -inf)
        const float p = __expf(s[r] - m_new);
        l[r] = l[r] * correction + p;
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[r][i] = acc[r][i] * correction + p * v_r[i];
        m[r] = m_new;
      }
    }
  }

  auto* out = reinterpret_cast<__nv_bfloat16*>(a.out);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + warp * kRowsPerWarp + r;
    if (row >= a.chunk_tokens) continue;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      out[(static_cast<int64_t>(row) * a.num_heads + head) * HEAD_DIM + lane * kVec + i] =
          __float2bfloat16(acc[r][i] / l[r]);
    }
  }
}

// Chunked prefill on tensor cores (FlashAttention-2's loop, Dao 2023, with WMMA 16×16×16 BF16
// tiles and FP32 accumulation). A CTA owns kTcRows = 64 query rows of one head, 16 per warp;
// it walks the keys in tiles of kTcKeys = 64 tokens through shared memory. Per tile, each warp:
//   S = Q·Kᵀ (16×64, tensor cores) → shared memory; online softmax on S row by row (two lanes a
//   row): new max m, correction exp(m_old − m_new), P = exp(S − m) as BF16, running sum l;
//   O = O·correction + P·V, with O kept in shared memory in FP32 (WMMA accumulator fragments
//   have no per-row layout to rescale in registers).
// No score matrix beyond one 16×64 tile per warp is ever stored; out = O / l at the end.
namespace tc {
namespace wmma = nvcuda::wmma;
constexpr int kRows = 64;         // query rows per CTA
constexpr int kRowsPerWarp = 16;  // one WMMA tile of rows per warp
constexpr int kKeys = 64;         // keys per tile
constexpr int kFrag = 16;         // WMMA M = N = K

template <int HEAD_DIM>
struct Smem {
  __nv_bfloat16 q[kRows][HEAD_DIM];
  __nv_bfloat16 k[kKeys][HEAD_DIM];
  __nv_bfloat16 v[kKeys][HEAD_DIM];
  float s[kWarps][kRowsPerWarp][kKeys];  // scores, then scratch for P·V chunks
  __nv_bfloat16 p[kWarps][kRowsPerWarp][kKeys];
  float o[kWarps][kRowsPerWarp][HEAD_DIM];
  float correction[kWarps][kRowsPerWarp];
};

template <int HEAD_DIM>
__global__ void __launch_bounds__(kThreads) prefill_attention_tc_kernel(PrefillAttentionArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];  // WMMA needs 32-byte aligned tiles
  Smem<HEAD_DIM>& sm = *reinterpret_cast<Smem<HEAD_DIM>*>(smem_raw);
  constexpr int kChunksPerRow = HEAD_DIM / 8;  // 16-byte chunks of a BF16 row
  const int head = blockIdx.y;
  const int row0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = kv_head_for(head, a.num_heads, a.num_kv_heads);
  const PagedKvLayout layout{a.block_size_tokens, a.num_kv_heads, HEAD_DIM};
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(a.q);
  const auto* k_cache = reinterpret_cast<const __nv_bfloat16*>(a.k_cache);
  const auto* v_cache = reinterpret_cast<const __nv_bfloat16*>(a.v_cache);

  // Q tile (zeros past the chunk) and O = 0.
  for (int c = threadIdx.x; c < kRows * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, off = (c % kChunksPerRow) * 8;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (row0 + r < a.chunk_tokens) {
      raw = *reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(row0 + r) * a.num_heads + head) * HEAD_DIM + off);
    }
    *reinterpret_cast<uint4*>(&sm.q[r][off]) = raw;
  }
  for (int i = lane; i < kRowsPerWarp * HEAD_DIM; i += 32) sm.o[warp][i / HEAD_DIM][i % HEAD_DIM] = 0.0f;

  // Lanes 2r and 2r+1 own row r of this warp's 16, each half of the 64 key columns.
  const int my_row = lane / 2, col0 = (lane % 2) * (kKeys / 2);
  const int my_position = a.prior_tokens + row0 + warp * kRowsPerWarp + my_row;  // sees keys 0 … this
  float m = -INFINITY, l = 0.0f;
  const int last_position = a.prior_tokens + min(row0 + kRows, a.chunk_tokens) - 1;
  const float scale = a.scale;

  for (int t0 = 0; t0 <= last_position; t0 += kKeys) {
    __syncthreads();  // previous K/V tile no longer read
    stage_kv_tile(layout, a.block_table, kv_head, t0, last_position, k_cache, v_cache, sm.k, sm.v);
    __syncthreads();

    // S = Q·Kᵀ for this warp's 16 rows: K stored [key][d] is Kᵀ in column-major order.
    for (int n = 0; n < kKeys / kFrag; ++n) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < HEAD_DIM / kFrag; ++kk) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __nv_bfloat16, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __nv_bfloat16, wmma::col_major> kb;
        wmma::load_matrix_sync(qa, &sm.q[warp * kRowsPerWarp][kk * kFrag], HEAD_DIM);
        wmma::load_matrix_sync(kb, &sm.k[n * kFrag][kk * kFrag], HEAD_DIM);
        wmma::mma_sync(acc, qa, kb, acc);
      }
      wmma::store_matrix_sync(&sm.s[warp][0][n * kFrag], acc, kKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over this tile, causal mask by absolute position.
    float tile_max = -INFINITY;
    for (int j = col0; j < col0 + kKeys / 2; ++j) {
      const float x = (t0 + j <= my_position) ? sm.s[warp][my_row][j] * scale : -INFINITY;
      sm.s[warp][my_row][j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);  // finite: key 0 is visible to every row in tile 0
    const float correction = __expf(m - m_new);
    float sum = 0.0f;
    for (int j = col0; j < col0 + kKeys / 2; ++j) {
      const float p = __expf(sm.s[warp][my_row][j] - m_new);  // exp(-inf) = 0 for masked keys
      sm.p[warp][my_row][j] = __float2bfloat16(p);
      sum += p;
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    l = l * correction + sum;
    m = m_new;
    if (lane % 2 == 0) sm.correction[warp][my_row] = correction;
    __syncwarp();

    // O = O·correction + P·V, one 16-wide slice of head_dim at a time (scratch: sm.s).
    for (int dc = 0; dc < HEAD_DIM / kFrag; ++dc) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> pv;
      wmma::fill_fragment(pv, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kKeys / kFrag; ++kk) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __nv_bfloat16, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __nv_bfloat16, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, &sm.p[warp][0][kk * kFrag], kKeys);
        wmma::load_matrix_sync(vb, &sm.v[kk * kFrag][dc * kFrag], HEAD_DIM);
        wmma::mma_sync(pv, pa, vb, pv);
      }
      float* scratch = &sm.s[warp][0][0];  // 16×16 floats, ld 16
      wmma::store_matrix_sync(scratch, pv, kFrag, wmma::mem_row_major);
      __syncwarp();
      for (int i = lane; i < kFrag * kFrag; i += 32) {
        const int r = i / kFrag, c = i % kFrag;
        float& o = sm.o[warp][r][dc * kFrag + c];
        o = o * sm.correction[warp][r] + scratch[i];
      }
      __syncwarp();
    }
  }

  // out = O / l; lanes 2r, 2r+1 hold l of row r, so share it through the correction slots.
  if (lane % 2 == 0) sm.correction[warp][my_row] = l;
  __syncwarp();
  auto* out = reinterpret_cast<__nv_bfloat16*>(a.out);
  for (int i = lane; i < kRowsPerWarp * HEAD_DIM; i += 32) {
    const int r = i / HEAD_DIM, d = i % HEAD_DIM;
    const int row = row0 + warp * kRowsPerWarp + r;
    if (row < a.chunk_tokens) {
      out[(static_cast<int64_t>(row) * a.num_heads + head) * HEAD_DIM + d] =
          __float2bfloat16(sm.o[warp][r][d] / sm.correction[warp][r]);
    }
  }
}

template <int HEAD_DIM>
void launch(const PrefillAttentionArgs& args, cudaStream_t stream) {
  const size_t smem_bytes = sizeof(Smem<HEAD_DIM>);
  BATCHSIM_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_tc_kernel<HEAD_DIM>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
  const dim3 grid(ceil_div(args.chunk_tokens, kRows), args.num_heads);
  prefill_attention_tc_kernel<HEAD_DIM><<<grid, kThreads, smem_bytes, stream>>>(args);
}
}  // namespace tc

void require_head_dim(int head_dim) {
  if (head_dim != 64 && head_dim != 128) {
    throw std::invalid_argument("attention kernels are compiled for head_dim 64 and 128, not " +
                                std::to_string(head_dim));
  }
}

template <int HEAD_DIM>
void launch_decode(const DecodeAttentionArgs& a, int partition_size_tokens, cudaStream_t stream) {
  const bool partitioned = partition_size_tokens > 0;
  const int partition_tokens = decode_partition_tokens(a.max_seq_len_tokens, partition_size_tokens);
  const int max_num_partitions = decode_num_partitions(a.max_seq_len_tokens, partition_size_tokens);
  const auto smem_bytes = static_cast<size_t>(decode_dynamic_smem_bytes(a.max_seq_len_tokens, partition_size_tokens));
  if (static_cast<int64_t>(smem_bytes) > kDecodeMaxDynamicSmemBytes || a.num_seqs > kMaxGridYZ ||
      max_num_partitions > kMaxGridYZ) {
    throw std::invalid_argument("decode attention: " + std::to_string(a.num_seqs) + " sequences of up to " +
                                std::to_string(a.max_seq_len_tokens) + " tokens exceed the launch limits" +
                                (partitioned ? "" : " (use the partitioned variant)"));
  }
  // Past 48 KiB of static + dynamic shared memory a kernel must opt in; the static part is
  // ~4.6 KiB, so opt in well before that (the call is cheap and happens outside timed work
  // for both timers: CUPTI times kernels only, the event timer's stream is held meanwhile).
  if (static_cast<int64_t>(smem_bytes) > kDecodeSmemOptInBytes) {
    BATCHSIM_CUDA_CHECK(cudaFuncSetAttribute(paged_decode_kernel<HEAD_DIM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem_bytes)));
  }
  const dim3 grid(a.num_heads, a.num_seqs, max_num_partitions);
  paged_decode_kernel<HEAD_DIM><<<grid, kThreads, smem_bytes, stream>>>(a, partition_tokens, partitioned);
  BATCHSIM_CUDA_CHECK(cudaGetLastError());
  if (partitioned) {
    paged_decode_reduce_kernel<HEAD_DIM>
        <<<dim3(a.num_heads, a.num_seqs), kThreads, 0, stream>>>(a, partition_tokens, max_num_partitions);
    BATCHSIM_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void launch_paged_decode_attention(const DecodeAttentionArgs& args, int partition_size_tokens, cudaStream_t stream) {
  require_head_dim(args.head_dim);
  if (args.num_seqs < 1 || args.max_seq_len_tokens < 1 || args.num_heads % args.num_kv_heads != 0) {
    throw std::invalid_argument("decode attention: need sequences, context, and kv heads dividing heads");
  }
  if (partition_size_tokens > 0 &&
      (args.tmp_out == nullptr || args.max_logits == nullptr || args.exp_sums == nullptr)) {
    throw std::invalid_argument("partitioned decode attention needs its scratch buffers");
  }
  if (args.head_dim == 64) {
    launch_decode<64>(args, partition_size_tokens, stream);
  } else {
    launch_decode<128>(args, partition_size_tokens, stream);
  }
}

void launch_prefill_attention(const PrefillAttentionArgs& args, PrefillKernel kernel, cudaStream_t stream) {
  require_head_dim(args.head_dim);
  if (args.chunk_tokens < 1 || args.prior_tokens < 0 || args.num_heads % args.num_kv_heads != 0) {
    throw std::invalid_argument("prefill attention: need chunk >= 1, prior >= 0, kv heads dividing heads");
  }
  if (kernel == PrefillKernel::kTensorCore) {
    if (args.head_dim == 64) {
      tc::launch<64>(args, stream);
    } else {
      tc::launch<128>(args, stream);
    }
  } else {
    const dim3 grid(ceil_div(args.chunk_tokens, kRowsPerCta), args.num_heads);
    if (args.head_dim == 64) {
      prefill_attention_kernel<64><<<grid, kThreads, 0, stream>>>(args);
    } else {
      prefill_attention_kernel<128><<<grid, kThreads, 0, stream>>>(args);
    }
  }
  BATCHSIM_CUDA_CHECK(cudaGetLastError());
}

const char* prefill_kernel_name(PrefillKernel kernel) {
  return kernel == PrefillKernel::kTensorCore ? "batchsim_prefill_wmma" : "batchsim_prefill_simt";
}

}  // namespace batchsim::calibration
