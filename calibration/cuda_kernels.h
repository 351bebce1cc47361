// batchsim calibration — host-side launchers of the CUDA microkernels (cuda_attention.cu,
// cuda_bandwidth.cu). BF16 tensors are passed as uint16_t bit patterns so this header stays
// includable from g++-compiled code; the kernels read them as __nv_bfloat16.
//
// Decode attention (vLLM paged_attention_v1/v2 structure; csrc/attention/attention_kernels.cuh):
//   grid (num_heads, num_seqs, partitions), 128 threads, one CTA per (sequence, head[, partition]);
//   q [num_seqs][num_heads][head_dim]; K/V caches in the PagedKvLayout of paged_kv_layout.h;
//   block_tables [num_seqs][max_blocks_per_seq]; seq_lens [num_seqs]; out like q.
//   Single pass: the CTA's logits live in shared memory, softmax, then P·V.
//   Partitioned: each CTA handles `partition_size_tokens` of context and writes
//   (max logit, exp-sum, normalised partial output) to fp32 scratch; a reduce kernel, one CTA
//   per (sequence, head), combines them with exp(m_p − max m) weights.
// Prefill attention: one sequence's chunk of `chunk_tokens` queries after `prior_tokens` of
//   context, causal; the chunk's own K/V are already in the paged cache. Tiled: a CTA owns a
//   tile of query rows of one head and walks the keys through shared memory with an online
//   softmax; no score matrix is written (FlashAttention's loop). See PrefillKernel below.
// Head dims 64 and 128 are compiled; others throw std::invalid_argument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace batchsim::calibration {

struct DecodeAttentionArgs {
  const uint16_t* q = nullptr;
  const uint16_t* k_cache = nullptr;
  const uint16_t* v_cache = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* seq_lens = nullptr;
  uint16_t* out = nullptr;
  int num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int block_size_tokens = 16;
  int max_blocks_per_seq = 0;
  int max_seq_len_tokens = 0;  // longest context in the batch (sizes grid and shared memory)
  float scale = 0;             // softmax scale (already resolved, not 0)
  // Partitioned variant only: [num_seqs][num_heads][max_num_partitions] (and × head_dim).
  float* tmp_out = nullptr;
  float* max_logits = nullptr;
  float* exp_sums = nullptr;
};

// partition_size_tokens == 0: single pass. Otherwise partitioned + reduce; the scratch
// buffers must hold num_seqs·num_heads·ceil(max_seq_len/partition) (·head_dim) floats.
void launch_paged_decode_attention(const DecodeAttentionArgs& args, int partition_size_tokens, cudaStream_t stream);

struct PrefillAttentionArgs {
  const uint16_t* q = nullptr;  // [chunk_tokens][num_heads][head_dim]
  const uint16_t* k_cache = nullptr;
  const uint16_t* v_cache = nullptr;
  const int32_t* block_table = nullptr;
  uint16_t* out = nullptr;  // like q
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int block_size_tokens = 16;
  int prior_tokens = 0, chunk_tokens = 0;
  float scale = 0;
};
// Two prefill kernels over the same maths: kTensorCore (WMMA BF16 tiles, what the measurement
// uses: engines run FlashAttention/FlashInfer on tensor cores) and kSimt (CUDA cores only,
// simpler; kept as a second implementation `check` compares too).
enum class PrefillKernel { kTensorCore, kSimt };
void launch_prefill_attention(const PrefillAttentionArgs& args, PrefillKernel kernel, cudaStream_t stream);
const char* prefill_kernel_name(PrefillKernel kernel);  // the CSV's attention_backend

// Streaming kernels for achievable HBM bandwidth, 16-byte accesses, grid-stride loops.
// `bytes` must be a multiple of 16. The read kernel folds what it reads into one word per
// thread and stores it only under a data-dependent condition, so loads cannot be elided.
void launch_stream_read(const void* src, size_t bytes, unsigned* sink, int sm_count, cudaStream_t stream);
void launch_copy(const void* src, void* dst, size_t bytes, int sm_count, cudaStream_t stream);

// Spins until *flag becomes non-zero or about `timeout_ms` of GPU time passes (nvbench
// blocking_kernel.cuh): launches queued behind it start back to back, so a CUDA-event timer
// measures kernels, not launch latency.
void launch_blocking_kernel(volatile int* flag, int timeout_ms, cudaStream_t stream);

}  // namespace batchsim::calibration

namespace batchsim::calibration {

// The architectures this binary's kernels were compiled for, from nvcc's __CUDA_ARCH_LIST__:
// "sm_80, sm_90" (the virtual ones; each also has its SASS unless the build asked for PTX only).
const char* compiled_cuda_architectures();
// Why this binary cannot run its kernels on the current device — no kernel image for its
// compute capability (built for other architectures) — or "" when it can. Costs a
// cudaFuncGetAttributes on one kernel; clears the error it may leave.
std::string kernel_image_problem();

// Fills `count` 2-byte elements with deterministic pseudo-random values in [-1, 1) as BF16
// (or FP16): GEMM and attention inputs should not be zeros, which tensor cores and power
// management treat differently from real data.
void launch_fill_random_16bit(void* dst, size_t count, bool bf16, uint32_t seed, cudaStream_t stream);

}  // namespace batchsim::calibration
