// batchsim calibration — CPU reference of the attention maths the CUDA microkernels compute.
//
// Three computations, each over the paged KV layout of paged_kv_layout.h:
//  * decode attention: one new query token per sequence against its whole context, read
//    through the sequence's block table (vLLM paged_attention_v1);
//  * partitioned ("split-K") decode: the context is cut into partitions of
//    `partition_size_tokens`; each partition yields (max logit m_p, exp-sum l_p, normalised
//    output o_p) and the partials are combined by rescaling with exp(m_p − max_p m_p)
//    (vLLM paged_attention_v2 + paged_attention_v2_reduce_kernel; FlashDecoding);
//  * prefill attention of a chunk of `chunk_tokens` new tokens whose K/V are already in the
//    cache after `prior_tokens` of earlier context: causal (query i of the chunk sees keys
//    0 … prior_tokens + i), single pass with an online softmax and no score matrix
//    (FlashAttention, Dao et al. 2022, Algorithm 1; Milakov & Gimelshein 2018).
// `naive_attention` materialises the full score matrix; tests use it to check the three above.
//
// Tensors are row-major float vectors: q and out [tokens][num_heads][head_dim]. Scores are
// q·k × scale with scale = 1/sqrt(head_dim) unless set otherwise.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "calibration/paged_kv_layout.h"

namespace batchsim::calibration {

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;  // divides num_heads (GQA); == num_heads for MHA
  int head_dim = 0;
  float scale = 0;  // softmax scale; 0 means 1/sqrt(head_dim)

  float softmax_scale() const;
  // Throws std::invalid_argument when heads do not divide or a size is not positive.
  void validate() const;
};

// A host copy of one layer's paged K and V caches.
struct PagedKvCache {
  PagedKvLayout layout;
  int num_blocks = 0;
  std::vector<float> k;  // [num_blocks][block_size][num_kv_heads][head_dim]
  std::vector<float> v;  // same layout
};

// The sequences of a decode step: their context lengths and block tables.
struct DecodeBatch {
  std::vector<int32_t> seq_lens_tokens;
  int max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;  // [num_seqs][max_blocks_per_seq]; unused entries are 0

  int num_seqs() const { return static_cast<int>(seq_lens_tokens.size()); }
  const int32_t* block_table(int seq) const {
    return block_tables.data() + static_cast<int64_t>(seq) * max_blocks_per_seq;
  }
};

// out[seq][head][:] = softmax(q·Kᵀ·scale)·V over the sequence's whole context.
void decode_attention_reference(const AttentionShape& shape, const PagedKvCache& cache, const DecodeBatch& batch,
                                std::span<const float> q, std::span<float> out);

// Per-partition results, laid out as vLLM's v2 kernel writes them.
struct DecodePartials {
  int max_num_partitions = 0;
  std::vector<float> max_logits;  // [seq][head][partition]; -inf for empty partitions
  std::vector<float> exp_sums;    // [seq][head][partition]; 0 for empty partitions
  std::vector<float> tmp_out;     // [seq][head][partition][head_dim], normalised per partition
};
DecodePartials decode_attention_partials(const AttentionShape& shape, const PagedKvCache& cache,
                                         const DecodeBatch& batch, std::span<const float> q, int partition_size_tokens);
// The reduce step: rescales partition p by exp(m_p − max m) · l_p and normalises.
void combine_decode_partials(const AttentionShape& shape, const DecodeBatch& batch, const DecodePartials& partials,
                             int partition_size_tokens, std::span<float> out);
void decode_attention_partitioned_reference(const AttentionShape& shape, const PagedKvCache& cache,
                                            const DecodeBatch& batch, std::span<const float> q,
                                            int partition_size_tokens, std::span<float> out);

// Chunked prefill of one sequence: q and out are [chunk_tokens][num_heads][head_dim]; the
// chunk's own K/V occupy tokens prior_tokens … prior_tokens + chunk_tokens − 1 of the cache.
void prefill_attention_reference(const AttentionShape& shape, const PagedKvCache& cache,
                                 std::span<const int32_t> block_table, int prior_tokens, int chunk_tokens,
                                 std::span<const float> q, std::span<float> out);

// The textbook computation with an explicit [queries × keys] score matrix per head.
// k and v are contiguous [num_keys][num_kv_heads][head_dim]; query r sits at absolute position
// query_positions[r] and, when causal, sees keys 0 … query_positions[r].
void naive_attention(const AttentionShape& shape, std::span<const float> q, std::span<const int> query_positions,
                     std::span<const float> k, std::span<const float> v, bool causal, std::span<float> out);

// Copies a sequence's first `num_tokens` K and V rows out of the paged cache into contiguous
// [num_tokens][num_kv_heads][head_dim] arrays (for naive_attention).
void gather_sequence_kv(const PagedKvCache& cache, std::span<const int32_t> block_table, int num_tokens,
                        std::vector<float>& k, std::vector<float>& v);

// Random test cases, shared by the CPU tests and `batchsim-calibrate check`. Physical blocks
// are a random permutation, so a wrong block-table lookup reads another sequence's data.
// With `round_bf16` every value is representable in BF16, so GPU and CPU see the same inputs.
// Every K/V slot that holds no token of the case — the tail of each sequence's last block and
// the spare blocks — is a quiet NaN (poison_unused_kv_slots), as a real cache's tail may hold
// anything (vLLM issue 641): a kernel that reads past a sequence's end, or applies a zero
// softmax weight to such a V row (0 · NaN = NaN), or follows a wrong block-table entry into a
// spare block, then produces NaN, which max_scaled_error never passes.
struct DecodeCase {
  AttentionShape shape;
  PagedKvCache cache;
  DecodeBatch batch;
  std::vector<float> q;  // [num_seqs][num_heads][head_dim]
};
DecodeCase make_random_decode_case(const AttentionShape& shape, std::span<const int> seq_lens_tokens,
                                   int block_size_tokens, bool round_bf16, std::mt19937_64& rng);

struct PrefillCase {
  AttentionShape shape;
  PagedKvCache cache;
  std::vector<int32_t> block_table;
  int prior_tokens = 0;
  int chunk_tokens = 0;
  std::vector<float> q;  // [chunk_tokens][num_heads][head_dim]
};
PrefillCase make_random_prefill_case(const AttentionShape& shape, int prior_tokens, int chunk_tokens,
                                     int block_size_tokens, bool round_bf16, std::mt19937_64& rng);

// Sets every K and V element of `cache` to a quiet NaN except those of the tokens in use:
// tokens 0 … seq_lens[s] − 1 of each sequence s, through its block table. Returns the number
// of token slots poisoned.
int64_t poison_unused_kv_slots(PagedKvCache& cache, const DecodeBatch& batch);
int64_t poison_unused_kv_slots(PagedKvCache& cache, std::span<const int32_t> block_table, int num_tokens);

// Largest |a − b| / (atol + rtol·|b|) over the elements; ≤ 1 means "within tolerance".
double max_scaled_error(std::span<const float> actual, std::span<const float> expected, double atol, double rtol);

}  // namespace batchsim::calibration
