// batchsim calibration — the paged KV-cache layout shared by the CPU reference and the CUDA
// kernels.
//
// K and V live in fixed-size blocks of `block_size_tokens` token slots (16, vLLM's
// CacheConfig.DEFAULT_BLOCK_SIZE). A sequence's logical block i is stored in physical block
// block_table[i]; token t of the sequence sits in logical block t / block_size, slot
// t % block_size. Within a block the layout is [slot][kv_head][head_dim], i.e. the whole cache
// is [num_blocks, block_size, num_kv_heads, head_dim] for K and, separately, for V — the layout
// of vLLM's FlashAttention backend (vllm/v1/attention/backends/flash_attn.py, cache shape
// (2, num_blocks, block_size, num_kv_heads, head_size)). It is simpler than vLLM's v1/v2 paged
// kernels' split-x key layout and still gives one contiguous head_dim row per (token, kv head).
//
// GQA: query head h reads KV head h / (num_heads / num_kv_heads), as in vLLM
// csrc/attention/attention_kernels.cuh (`kv_head_idx = head_idx / num_queries_per_kv`).
//
// Everything here is usable from host and device code, so the index arithmetic exists once.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BATCHSIM_HOST_DEVICE __host__ __device__
#else
#define BATCHSIM_HOST_DEVICE
#endif

namespace batchsim::calibration {

inline constexpr int kDefaultBlockSizeTokens = 16;

struct PagedKvLayout {
  int block_size_tokens = kDefaultBlockSizeTokens;
  int num_kv_heads = 0;
  int head_dim = 0;

  // Elements (not bytes) in one physical block of K (or of V).
  BATCHSIM_HOST_DEVICE int64_t block_stride_elems() const {
    return static_cast<int64_t>(block_size_tokens) * num_kv_heads * head_dim;
  }
  // Element offset of (physical block, slot, kv head, dimension 0). The physical block id is
  // widened before multiplying, as vLLM does, so caches past 2^31 elements index correctly.
  BATCHSIM_HOST_DEVICE int64_t row_offset(int32_t physical_block, int slot, int kv_head) const {
    return static_cast<int64_t>(physical_block) * block_stride_elems() +
           (static_cast<int64_t>(slot) * num_kv_heads + kv_head) * head_dim;
  }
  // Offset of the K (or V) row of token `token` of a sequence with this block table.
  BATCHSIM_HOST_DEVICE int64_t token_row_offset(const int32_t* block_table, int token, int kv_head) const {
    return row_offset(block_table[token / block_size_tokens], token % block_size_tokens, kv_head);
  }
};

BATCHSIM_HOST_DEVICE inline int kv_head_for(int head, int num_heads, int num_kv_heads) {
  return head / (num_heads / num_kv_heads);
}

BATCHSIM_HOST_DEVICE inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Decode kernel choice, as vLLM made it (vllm/attention/ops/paged_attn.py): the single-pass
// kernel (one CTA per (sequence, head), all logits in shared memory) unless contexts are long
// (> 8192 tokens) or there are too few (sequence, head) pairs to fill the GPU, in which case
// the context is split into partitions of 512 tokens (one CTA each) plus a reduce kernel.
inline constexpr int kDecodePartitionSizeTokens = 512;
inline constexpr int kSinglePassMaxContextTokens = 8192;

inline bool use_single_pass_decode(int num_seqs, int num_heads, int max_context_tokens) {
  const int max_num_partitions = ceil_div(max_context_tokens, kDecodePartitionSizeTokens);
  return max_context_tokens <= kSinglePassMaxContextTokens && (max_num_partitions == 1 || num_seqs * num_heads > 512);
}

// Launch geometry of the decode kernel (cuda_attention.cu), here so that the CPU tests can
// check it for every measured point: a wrong size here fails only at launch on a GPU.
// partition_size_tokens == 0 means single pass: one partition spanning the longest context.
inline int decode_partition_tokens(int max_context_tokens, int partition_size_tokens) {
  return partition_size_tokens > 0 ? partition_size_tokens : max_context_tokens;
}
inline int decode_num_partitions(int max_context_tokens, int partition_size_tokens) {
  return ceil_div(max_context_tokens, decode_partition_tokens(max_context_tokens, partition_size_tokens));
}
// Dynamic shared memory: one fp32 logit per token of the CTA's partition.
inline int64_t decode_dynamic_smem_bytes(int max_context_tokens, int partition_size_tokens) {
  return static_cast<int64_t>(decode_partition_tokens(max_context_tokens, partition_size_tokens)) *
         static_cast<int64_t>(sizeof(float));
}
// Above this the launcher raises cudaFuncAttributeMaxDynamicSharedMemorySize (the kernel's
// static shared memory is ~4.6 KiB: q, the reduction slots and the P·V partial sums, ptxas -v;
// 48 KiB of static + dynamic is the limit without opting in).
inline constexpr int64_t kDecodeSmemOptInBytes = 32 * 1024;
// What one CTA may opt in to on sm_90 (227 KiB), less the decode kernel's static part.
inline constexpr int64_t kDecodeMaxDynamicSmemBytes = 227 * 1024 - 8 * 1024;
// CUDA's limit on gridDim.y and gridDim.z (sequences and partitions of the decode grid).
inline constexpr int64_t kMaxGridYZ = 65535;

}  // namespace batchsim::calibration
