#include "calibration/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "calibration/bf16.h"

namespace batchsim::calibration {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("attention reference: ") + what);
}

float dot(const float* a, const float* b, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

struct RangeResult {
  float max_logit = kNegInf;
  float exp_sum = 0;
};

// Softmax-attention of one query row over tokens [begin, end) of one sequence, the way one
// CTA of vLLM's paged kernel does it: logits first, then their max, then exp and sums.
// Writes the output normalised by the range's own exp-sum; an empty range writes zeros.
RangeResult attend_token_range(const PagedKvCache& cache, const int32_t* block_table, int kv_head, const float* q_row,
                               float scale, int begin, int end, std::vector<float>& logits, float* out_row) {
  const int head_dim = cache.layout.head_dim;
  RangeResult result;
  std::fill(out_row, out_row + head_dim, 0.0f);
  if (begin >= end) return result;
  logits.resize(static_cast<size_t>(end - begin));
  for (int t = begin; t < end; ++t) {
    const float* k_row = cache.k.data() + cache.layout.token_row_offset(block_table, t, kv_head);
    logits[static_cast<size_t>(t - begin)] = dot(q_row, k_row, head_dim) * scale;
    result.max_logit = std::max(result.max_logit, logits[static_cast<size_t>(t - begin)]);
  }
  for (int t = begin; t < end; ++t) {
    const float p = std::exp(logits[static_cast<size_t>(t - begin)] - result.max_logit);
    result.exp_sum += p;
    const float* v_row = cache.v.data() + cache.layout.token_row_offset(block_table, t, kv_head);
    for (int d = 0; d < head_dim; ++d) out_row[d] += p * v_row[d];
  }
  for (int d = 0; d < head_dim; ++d) out_row[d] /= result.exp_sum;
  return result;
}

void check_decode_inputs(const AttentionShape& shape, const PagedKvCache& cache, const DecodeBatch& batch,
                         std::span<const float> q, std::span<const float> out) {
  shape.validate();
  require(cache.layout.num_kv_heads == shape.num_kv_heads && cache.layout.head_dim == shape.head_dim,
          "cache layout does not match the attention shape");
  const size_t rows = static_cast<size_t>(batch.num_seqs()) * shape.num_heads * shape.head_dim;
  require(q.size() == rows && out.size() == rows, "q/out size is not num_seqs*num_heads*head_dim");
  for (int s = 0; s < batch.num_seqs(); ++s) {
    require(batch.seq_lens_tokens[static_cast<size_t>(s)] >= 1, "decode sequence with no context");
    require(ceil_div(batch.seq_lens_tokens[static_cast<size_t>(s)], cache.layout.block_size_tokens) <=
                batch.max_blocks_per_seq,
            "sequence longer than its block table");
  }
}

void fill_uniform(std::vector<float>& values, float lo, float hi, bool round_bf16, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& x : values) x = round_bf16 ? round_to_bf16(dist(rng)) : dist(rng);
}

PagedKvCache make_random_cache(const AttentionShape& shape, int block_size_tokens, int num_blocks, bool round_bf16,
                               std::mt19937_64& rng) {
  PagedKvCache cache;
  cache.layout = PagedKvLayout{block_size_tokens, shape.num_kv_heads, shape.head_dim};
  cache.num_blocks = num_blocks;
  cache.k.resize(static_cast<size_t>(num_blocks * cache.layout.block_stride_elems()));
  cache.v.resize(cache.k.size());
  fill_uniform(cache.k, -1.0f, 1.0f, round_bf16, rng);
  fill_uniform(cache.v, -1.0f, 1.0f, round_bf16, rng);
  return cache;
}

// A few spare blocks that no sequence owns: reading one of them is a detectable bug.
constexpr int kSpareBlocks = 3;
// Queries drawn wider than K so softmax is peaked enough for max-rescaling errors to show.
constexpr float kQueryRange = 2.0f;

}  // namespace

float AttentionShape::softmax_scale() const {
  return scale != 0 ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

void AttentionShape::validate() const {
  require(num_heads > 0 && num_kv_heads > 0 && head_dim > 0, "sizes must be positive");
  require(num_heads % num_kv_heads == 0, "num_kv_heads must divide num_heads (GQA)");
}

void decode_attention_reference(const AttentionShape& shape, const PagedKvCache& cache, const DecodeBatch& batch,
                                std::span<const float> q, std::span<float> out) {
  check_decode_inputs(shape, cache, batch, q, out);
  std::vector<float> logits;
  const int d = shape.head_dim;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    for (int h = 0; h < shape.num_heads; ++h) {
      const size_t row = (static_cast<size_t>(s) * shape.num_heads + h) * d;
      attend_token_range(cache, batch.block_table(s), kv_head_for(h, shape.num_heads, shape.num_kv_heads),
                         q.data() + row, shape.softmax_scale(), 0, batch.seq_lens_tokens[static_cast<size_t>(s)],
                         logits, out.data() + row);
    }
  }
}

DecodePartials decode_attention_partials(const AttentionShape& shape, const PagedKvCache& cache,
                                         const DecodeBatch& batch, std::span<const float> q,
                                         int partition_size_tokens) {
  require(partition_size_tokens > 0, "partition size must be positive");
  const int d = shape.head_dim;
  DecodePartials partials;
  const int max_len = *std::max_element(batch.seq_lens_tokens.begin(), batch.seq_lens_tokens.end());
  partials.max_num_partitions = ceil_div(max_len, partition_size_tokens);
  const size_t slots = static_cast<size_t>(batch.num_seqs()) * shape.num_heads * partials.max_num_partitions;
  partials.max_logits.assign(slots, kNegInf);
  partials.exp_sums.assign(slots, 0.0f);
  partials.tmp_out.assign(slots * d, 0.0f);
  std::vector<float> logits;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    const int len = batch.seq_lens_tokens[static_cast<size_t>(s)];
    for (int h = 0; h < shape.num_heads; ++h) {
      const size_t q_row = (static_cast<size_t>(s) * shape.num_heads + h) * d;
      for (int p = 0; p * partition_size_tokens < len; ++p) {
        const size_t slot = (static_cast<size_t>(s) * shape.num_heads + h) * partials.max_num_partitions + p;
        const RangeResult r = attend_token_range(
            cache, batch.block_table(s), kv_head_for(h, shape.num_heads, shape.num_kv_heads), q.data() + q_row,
            shape.softmax_scale(), p * partition_size_tokens, std::min(len, (p + 1) * partition_size_tokens), logits,
            partials.tmp_out.data() + slot * d);
        partials.max_logits[slot] = r.max_logit;
        partials.exp_sums[slot] = r.exp_sum;
      }
    }
  }
  return partials;
}

void combine_decode_partials(const AttentionShape& shape, const DecodeBatch& batch, const DecodePartials& partials,
                             int partition_size_tokens, std::span<float> out) {
  const int d = shape.head_dim;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    const int num_partitions = ceil_div(batch.seq_lens_tokens[static_cast<size_t>(s)], partition_size_tokens);
    for (int h = 0; h < shape.num_heads; ++h) {
      const size_t base = (static_cast<size_t>(s) * shape.num_heads + h) * partials.max_num_partitions;
      float global_max = kNegInf;
      for (int p = 0; p < num_partitions; ++p) global_max = std::max(global_max, partials.max_logits[base + p]);
      // Partition p's exp-sum was taken relative to its own max; exp(m_p − M) moves it to the
      // common reference M, which keeps every exponent ≤ 0 (no overflow).
      float total_weight = 0;
      float* out_row = out.data() + (static_cast<size_t>(s) * shape.num_heads + h) * d;
      std::fill(out_row, out_row + d, 0.0f);
      for (int p = 0; p < num_partitions; ++p) {
        const float w = partials.exp_sums[base + p] * std::exp(partials.max_logits[base + p] - global_max);
        total_weight += w;
        const float* part = partials.tmp_out.data() + (base + p) * d;
        for (int i = 0; i < d; ++i) out_row[i] += w * part[i];
      }
      for (int i = 0; i < d; ++i) out_row[i] /= total_weight;
    }
  }
}

void decode_attention_partitioned_reference(const AttentionShape& shape, const PagedKvCache& cache,
                                            const DecodeBatch& batch, std::span<const float> q,
                                            int partition_size_tokens, std::span<float> out) {
  check_decode_inputs(shape, cache, batch, q, out);
  const DecodePartials partials = decode_attention_partials(shape, cache, batch, q, partition_size_tokens);
  combine_decode_partials(shape, batch, partials, partition_size_tokens, out);
}

void prefill_attention_reference(const AttentionShape& shape, const PagedKvCache& cache,
                                 std::span<const int32_t> block_table, int prior_tokens, int chunk_tokens,
                                 std::span<const float> q, std::span<float> out) {
  shape.validate();
  const int d = shape.head_dim;
  const size_t rows = static_cast<size_t>(chunk_tokens) * shape.num_heads * d;
  require(prior_tokens >= 0 && chunk_tokens >= 1, "prefill needs prior >= 0 and chunk >= 1");
  require(q.size() == rows && out.size() == rows, "q/out size is not chunk*num_heads*head_dim");
  require(static_cast<int64_t>(block_table.size()) * cache.layout.block_size_tokens >= prior_tokens + chunk_tokens,
          "block table too short for prior + chunk tokens");
  const float scale = shape.softmax_scale();
  std::vector<float> acc(static_cast<size_t>(d));
  for (int i = 0; i < chunk_tokens; ++i) {
    const int position = prior_tokens + i;
    for (int h = 0; h < shape.num_heads; ++h) {
      const int kv_head = kv_head_for(h, shape.num_heads, shape.num_kv_heads);
      const float* q_row = q.data() + (static_cast<size_t>(i) * shape.num_heads + h) * d;
      // Online softmax: running max m and sum l; when m grows, the old terms are rescaled by
      // exp(m_old − m_new), so one pass over the keys suffices and no scores are stored.
      float m = kNegInf, l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int t = 0; t <= position; ++t) {
        const float* k_row = cache.k.data() + cache.layout.token_row_offset(block_table.data(), t, kv_head);
        const float* v_row = cache.v.data() + cache.layout.token_row_offset(block_table.data(), t, kv_head);
        const float s = dot(q_row, k_row, d) * scale;
        const float m_new = std::max(m, s);
        const float correction = std::exp(m - m_new);  // exp(-inf) = 0 on the first key
        const float p = std::exp(s - m_new);
        l = l * correction + p;
        for (int j = 0; j < d; ++j)
          acc[static_cast<size_t>(j)] = acc[static_cast<size_t>(j)] * correction + p * v_row[j];
        m = m_new;
      }
      float* out_row = out.data() + (static_cast<size_t>(i) * shape.num_heads + h) * d;
      for (int j = 0; j < d; ++j) out_row[j] = acc[static_cast<size_t>(j)] / l;
    }
  }
}

void naive_attention(const AttentionShape& shape, std::span<const float> q, std::span<const int> query_positions,
                     std::span<const float> k, std::span<const float> v, bool causal, std::span<float> out) {
  shape.validate();
  const int d = shape.head_dim;
  const size_t num_queries = query_positions.size();
  const size_t num_keys = k.size() / (static_cast<size_t>(shape.num_kv_heads) * d);
  require(q.size() == num_queries * shape.num_heads * d && out.size() == q.size(), "naive: q/out size");
  require(v.size() == k.size(), "naive: k and v sizes differ");
  std::vector<float> scores(num_queries * num_keys);  // the matrix FlashAttention avoids
  for (int h = 0; h < shape.num_heads; ++h) {
    const int kv_head = kv_head_for(h, shape.num_heads, shape.num_kv_heads);
    for (size_t r = 0; r < num_queries; ++r) {
      const float* q_row = q.data() + (r * shape.num_heads + h) * d;
      for (size_t j = 0; j < num_keys; ++j) {
        const bool visible = !causal || static_cast<int>(j) <= query_positions[r];
        scores[r * num_keys + j] =
            visible ? dot(q_row, k.data() + (j * shape.num_kv_heads + kv_head) * d, d) * shape.softmax_scale()
                    : kNegInf;
      }
    }
    for (size_t r = 0; r < num_queries; ++r) {
      float* row = scores.data() + r * num_keys;
      const float row_max = *std::max_element(row, row + num_keys);
      float sum = 0;
      for (size_t j = 0; j < num_keys; ++j) sum += (row[j] = std::exp(row[j] - row_max));
      for (size_t j = 0; j < num_keys; ++j) row[j] /= sum;
      float* out_row = out.data() + (r * shape.num_heads + h) * d;
      for (int i = 0; i < d; ++i) {
        float value = 0;
        for (size_t j = 0; j < num_keys; ++j) value += row[j] * v[(j * shape.num_kv_heads + kv_head) * d + i];
        out_row[i] = value;
      }
    }
  }
}

void gather_sequence_kv(const PagedKvCache& cache, std::span<const int32_t> block_table, int num_tokens,
                        std::vector<float>& k, std::vector<float>& v) {
  const int row = cache.layout.num_kv_heads * cache.layout.head_dim;
  k.resize(static_cast<size_t>(num_tokens) * row);
  v.resize(k.size());
  for (int t = 0; t < num_tokens; ++t) {
    // All KV heads of one token are adjacent in a block slot, so one copy per token.
    const int64_t src = cache.layout.token_row_offset(block_table.data(), t, 0);
    std::copy_n(cache.k.begin() + src, row, k.begin() + static_cast<int64_t>(t) * row);
    std::copy_n(cache.v.begin() + src, row, v.begin() + static_cast<int64_t>(t) * row);
  }
}

namespace {

// `used` marks token slots (physical block · block_size + slot); everything else becomes NaN.
int64_t poison_slots_except(PagedKvCache& cache, const std::vector<char>& used) {
  const int64_t row = static_cast<int64_t>(cache.layout.num_kv_heads) * cache.layout.head_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int64_t poisoned = 0;
  for (size_t slot = 0; slot < used.size(); ++slot) {
    if (used[slot]) continue;
    const int64_t begin = static_cast<int64_t>(slot) * row;
    std::fill_n(cache.k.begin() + begin, row, nan);
    std::fill_n(cache.v.begin() + begin, row, nan);
    ++poisoned;
  }
  return poisoned;
}

void mark_sequence_slots(const PagedKvCache& cache, const int32_t* block_table, int num_tokens,
                         std::vector<char>& used) {
  const int block = cache.layout.block_size_tokens;
  for (int t = 0; t < num_tokens; ++t) {
    const int32_t physical = block_table[t / block];
    require(physical >= 0 && physical < cache.num_blocks, "block table entry outside the cache");
    used[static_cast<size_t>(physical) * block + t % block] = 1;
  }
}

}  // namespace

int64_t poison_unused_kv_slots(PagedKvCache& cache, const DecodeBatch& batch) {
  std::vector<char> used(static_cast<size_t>(cache.num_blocks) * cache.layout.block_size_tokens, 0);
  for (int s = 0; s < batch.num_seqs(); ++s) {
    mark_sequence_slots(cache, batch.block_table(s), batch.seq_lens_tokens[static_cast<size_t>(s)], used);
  }
  return poison_slots_except(cache, used);
}

int64_t poison_unused_kv_slots(PagedKvCache& cache, std::span<const int32_t> block_table, int num_tokens) {
  require(static_cast<int64_t>(block_table.size()) * cache.layout.block_size_tokens >= num_tokens,
          "block table too short for the tokens to keep");
  std::vector<char> used(static_cast<size_t>(cache.num_blocks) * cache.layout.block_size_tokens, 0);
  mark_sequence_slots(cache, block_table.data(), num_tokens, used);
  return poison_slots_except(cache, used);
}

DecodeCase make_random_decode_case(const AttentionShape& shape, std::span<const int> seq_lens_tokens,
                                   int block_size_tokens, bool round_bf16, std::mt19937_64& rng) {
  shape.validate();
  require(!seq_lens_tokens.empty(), "decode case needs at least one sequence");
  DecodeCase c;
  c.shape = shape;
  int total_blocks = 0;
  for (int len : seq_lens_tokens) {
    require(len >= 1, "decode sequence with no context");
    c.batch.max_blocks_per_seq = std::max(c.batch.max_blocks_per_seq, ceil_div(len, block_size_tokens));
    total_blocks += ceil_div(len, block_size_tokens);
    c.batch.seq_lens_tokens.push_back(len);
  }
  const int num_blocks = total_blocks + kSpareBlocks;
  std::vector<int32_t> physical(static_cast<size_t>(num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  c.batch.block_tables.assign(static_cast<size_t>(c.batch.num_seqs()) * c.batch.max_blocks_per_seq, 0);
  size_t next = 0;
  for (int s = 0; s < c.batch.num_seqs(); ++s) {
    for (int b = 0; b < ceil_div(c.batch.seq_lens_tokens[static_cast<size_t>(s)], block_size_tokens); ++b) {
      c.batch.block_tables[static_cast<size_t>(s) * c.batch.max_blocks_per_seq + b] = physical[next++];
    }
  }
  c.cache = make_random_cache(shape, block_size_tokens, num_blocks, round_bf16, rng);
  poison_unused_kv_slots(c.cache, c.batch);
  c.q.resize(static_cast<size_t>(c.batch.num_seqs()) * shape.num_heads * shape.head_dim);
  fill_uniform(c.q, -kQueryRange, kQueryRange, round_bf16, rng);
  return c;
}

PrefillCase make_random_prefill_case(const AttentionShape& shape, int prior_tokens, int chunk_tokens,
                                     int block_size_tokens, bool round_bf16, std::mt19937_64& rng) {
  shape.validate();
  require(prior_tokens >= 0 && chunk_tokens >= 1, "prefill needs prior >= 0 and chunk >= 1");
  PrefillCase c;
  c.shape = shape;
  c.prior_tokens = prior_tokens;
  c.chunk_tokens = chunk_tokens;
  const int blocks = ceil_div(prior_tokens + chunk_tokens, block_size_tokens);
  const int num_blocks = blocks + kSpareBlocks;
  std::vector<int32_t> physical(static_cast<size_t>(num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  c.block_table.assign(physical.begin(), physical.begin() + blocks);
  c.cache = make_random_cache(shape, block_size_tokens, num_blocks, round_bf16, rng);
  poison_unused_kv_slots(c.cache, c.block_table, prior_tokens + chunk_tokens);
  c.q.resize(static_cast<size_t>(chunk_tokens) * shape.num_heads * shape.head_dim);
  fill_uniform(c.q, -kQueryRange, kQueryRange, round_bf16, rng);
  return c;
}

double max_scaled_error(std::span<const float> actual, std::span<const float> expected, double atol, double rtol) {
  require(actual.size() == expected.size(), "compared arrays differ in size");
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(static_cast<double>(actual[i]) - expected[i]) /
                       (atol + rtol * std::abs(static_cast<double>(expected[i])));
    if (std::isnan(err)) return std::numeric_limits<double>::infinity();  // NaN never passes
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace batchsim::calibration
