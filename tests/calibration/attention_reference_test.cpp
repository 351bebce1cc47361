// The CPU reference attention (decode over a paged block table, its partitioned form, and
// chunked prefill over prior context) against the textbook computation with a full score
// matrix. These references are what the CUDA kernels are checked against on a GPU, so they
// must be right on their own first.
#include "calibration/attention_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "calibration/bf16.h"

namespace batchsim::calibration {
namespace {

// float sums in different orders: relative differences of ~1e-6 are expected.
constexpr double kAtol = 1e-5, kRtol = 1e-4;

struct GqaShape {
  int heads, kv_heads, head_dim;
};
const GqaShape kShapes[] = {{8, 8, 16}, {8, 2, 32}, {4, 1, 64}, {6, 3, 8}, {32, 8, 128}};

std::vector<float> naive_decode(const DecodeCase& c) {
  const int d = c.shape.head_dim, h = c.shape.num_heads;
  std::vector<float> out(c.q.size());
  std::vector<float> k, v;
  for (int s = 0; s < c.batch.num_seqs(); ++s) {
    const int len = c.batch.seq_lens_tokens[static_cast<size_t>(s)];
    gather_sequence_kv(c.cache, std::span(c.batch.block_table(s), static_cast<size_t>(c.batch.max_blocks_per_seq)), len,
                       k, v);
    const int position = len - 1;  // the new token is the last one of its context
    const size_t row = static_cast<size_t>(s) * h * d;
    naive_attention(c.shape, std::span(c.q).subspan(row, static_cast<size_t>(h * d)), std::span(&position, 1), k, v,
                    /*causal=*/true, std::span(out).subspan(row, static_cast<size_t>(h * d)));
  }
  return out;
}

std::vector<int> random_lens(std::mt19937_64& rng, int count, int max_len) {
  std::uniform_int_distribution<int> dist(1, max_len);
  std::vector<int> lens(static_cast<size_t>(count));
  for (int& len : lens) len = dist(rng);
  // Always include the block-boundary cases: one token, exactly one block, one past a block.
  lens.push_back(1);
  lens.push_back(16);
  lens.push_back(17);
  return lens;
}

TEST(DecodeAttentionReference, MatchesNaiveOnRandomPagedGqaBatches) {
  std::mt19937_64 rng(1);
  for (const GqaShape& g : kShapes) {
    const AttentionShape shape{g.heads, g.kv_heads, g.head_dim, 0};
    const std::vector<int> lens = random_lens(rng, 5, 150);
    const DecodeCase c = make_random_decode_case(shape, lens, 16, false, rng);
    std::vector<float> out(c.q.size());
    decode_attention_reference(c.shape, c.cache, c.batch, c.q, out);
    EXPECT_LE(max_scaled_error(out, naive_decode(c), kAtol, kRtol), 1.0)
        << "heads " << g.heads << " kv_heads " << g.kv_heads << " head_dim " << g.head_dim;
  }
}

TEST(DecodeAttentionReference, ReadsThroughTheBlockTable) {
  // Swapping two block-table entries must change the answer: the reference really reads
  // physical blocks through the table (the naive side gathers with the original table).
  std::mt19937_64 rng(2);
  const AttentionShape shape{4, 2, 16, 0};
  const std::vector<int> lens{40};
  DecodeCase c = make_random_decode_case(shape, lens, 16, false, rng);
  const std::vector<float> expected = naive_decode(c);
  std::swap(c.batch.block_tables[0], c.batch.block_tables[2]);
  std::vector<float> out(c.q.size());
  decode_attention_reference(c.shape, c.cache, c.batch, c.q, out);
  EXPECT_GT(max_scaled_error(out, expected, kAtol, kRtol), 10.0);
}

TEST(DecodeAttentionReference, PartitionedEqualsUnpartitioned) {
  std::mt19937_64 rng(3);
  for (const GqaShape& g : kShapes) {
    const AttentionShape shape{g.heads, g.kv_heads, g.head_dim, 0};
    const std::vector<int> lens = random_lens(rng, 6, 700);
    const DecodeCase c = make_random_decode_case(shape, lens, 16, false, rng);
    std::vector<float> whole(c.q.size());
    decode_attention_reference(c.shape, c.cache, c.batch, c.q, whole);
    // 512 is vLLM v2's PARTITION_SIZE; 16 makes one partition per block; 48 is not a power of 2.
    for (int partition : {16, 48, 64, 512}) {
      std::vector<float> split(c.q.size());
      decode_attention_partitioned_reference(c.shape, c.cache, c.batch, c.q, partition, split);
      EXPECT_LE(max_scaled_error(split, whole, kAtol, kRtol), 1.0) << "partition " << partition;
    }
  }
}

TEST(DecodeAttentionReference, PartialsHoldPerPartitionMaxAndSum) {
  // A sequence of 40 tokens in partitions of 16: partitions 0..2 are used, the third holds 8
  // tokens, and a shorter sequence leaves its later partitions empty (-inf max, zero sum).
  std::mt19937_64 rng(4);
  const AttentionShape shape{2, 1, 8, 0};
  const std::vector<int> lens{40, 5};
  const DecodeCase c = make_random_decode_case(shape, lens, 16, false, rng);
  const DecodePartials p = decode_attention_partials(c.shape, c.cache, c.batch, c.q, 16);
  ASSERT_EQ(p.max_num_partitions, 3);
  for (int part = 0; part < 3; ++part) {
    EXPECT_TRUE(std::isfinite(p.max_logits[static_cast<size_t>(part)]));
    // Each exp-sum is relative to the partition max, so it lies in [1, tokens in partition].
    EXPECT_GE(p.exp_sums[static_cast<size_t>(part)], 1.0f);
    EXPECT_LE(p.exp_sums[static_cast<size_t>(part)], part < 2 ? 16.0f : 8.0f);
  }
  const size_t seq1_head0 = 2 * 3;  // [seq 1][head 0][partition 0]
  EXPECT_TRUE(std::isfinite(p.max_logits[seq1_head0]));
  EXPECT_TRUE(std::isinf(p.max_logits[seq1_head0 + 1]));
  EXPECT_EQ(p.exp_sums[seq1_head0 + 1], 0.0f);
}

TEST(DecodeAttentionReference, LargeLogitsStayFiniteAndMatchNaive) {
  // With scale 20 logits reach the hundreds: exp() overflows unless every path subtracts a
  // max first. Partials from different partitions then differ by huge factors.
  std::mt19937_64 rng(5);
  const AttentionShape shape{4, 2, 32, 20.0f};
  const std::vector<int> lens{300, 77};
  const DecodeCase c = make_random_decode_case(shape, lens, 16, false, rng);
  std::vector<float> whole(c.q.size()), split(c.q.size());
  decode_attention_reference(c.shape, c.cache, c.batch, c.q, whole);
  decode_attention_partitioned_reference(c.shape, c.cache, c.batch, c.q, 64, split);
  const std::vector<float> expected = naive_decode(c);
  EXPECT_LE(max_scaled_error(whole, expected, kAtol, kRtol), 1.0);
  EXPECT_LE(max_scaled_error(split, expected, kAtol, kRtol), 1.0);
}

TEST(PrefillAttentionReference, ChunkAfterPriorContextEqualsNaiveCausalOverTheWholeSequence) {
  // Prefilling tokens [prior, prior + chunk) over prior context must give exactly the rows
  // prior … prior + chunk − 1 of full causal attention over the whole sequence.
  std::mt19937_64 rng(6);
  for (const GqaShape& g : kShapes) {
    const AttentionShape shape{g.heads, g.kv_heads, g.head_dim, 0};
    for (const auto& [prior, chunk] : {std::pair{0, 1}, {0, 23}, {5, 7}, {16, 16}, {37, 33}, {64, 1}}) {
      const int total = prior + chunk;
      const PrefillCase c = make_random_prefill_case(shape, prior, chunk, 16, false, rng);
      const size_t row = static_cast<size_t>(g.heads) * g.head_dim;
      // Queries of the whole sequence: random for the prior rows, the case's q for the chunk.
      std::vector<float> q_all(static_cast<size_t>(total) * row);
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      for (float& x : q_all) x = dist(rng);
      std::copy(c.q.begin(), c.q.end(), q_all.begin() + static_cast<int64_t>(prior * row));
      std::vector<int> positions(static_cast<size_t>(total));
      std::iota(positions.begin(), positions.end(), 0);
      std::vector<float> k, v, naive_all(q_all.size());
      gather_sequence_kv(c.cache, c.block_table, total, k, v);
      naive_attention(shape, q_all, positions, k, v, /*causal=*/true, naive_all);

      std::vector<float> out(c.q.size());
      prefill_attention_reference(shape, c.cache, c.block_table, prior, chunk, c.q, out);
      const std::span expected = std::span(naive_all).subspan(static_cast<size_t>(prior) * row);
      EXPECT_LE(max_scaled_error(out, expected, kAtol, kRtol), 1.0)
          << "heads " << g.heads << "/" << g.kv_heads << " d " << g.head_dim << " prior " << prior << " chunk "
          << chunk;
    }
  }
}

TEST(PrefillAttentionReference, IsCausalWithinTheChunk) {
  // Changing the K/V of the chunk's last token must leave every earlier query's output alone
  // and change the last one's.
  std::mt19937_64 rng(7);
  const AttentionShape shape{2, 2, 16, 0};
  PrefillCase c = make_random_prefill_case(shape, 10, 6, 16, false, rng);
  std::vector<float> before(c.q.size()), after(c.q.size());
  prefill_attention_reference(shape, c.cache, c.block_table, 10, 6, c.q, before);
  for (int kv = 0; kv < 2; ++kv) {
    const int64_t off = c.cache.layout.token_row_offset(c.block_table.data(), 15, kv);
    for (int i = 0; i < 16; ++i) c.cache.v[static_cast<size_t>(off + i)] += 5.0f;
  }
  prefill_attention_reference(shape, c.cache, c.block_table, 10, 6, c.q, after);
  const size_t last_row = 5 * 2 * 16;
  EXPECT_EQ(std::vector<float>(before.begin(), before.begin() + last_row),
            std::vector<float>(after.begin(), after.begin() + last_row));
  EXPECT_GT(max_scaled_error(std::span(after).subspan(last_row), std::span(before).subspan(last_row), kAtol, kRtol),
            10.0);
}

TEST(AttentionReference, GqaMapsQueryHeadsToKvHeadsInGroups) {
  // 8 query heads over 2 KV heads: heads 0-3 read KV head 0, heads 4-7 KV head 1.
  for (int h = 0; h < 8; ++h) EXPECT_EQ(kv_head_for(h, 8, 2), h / 4);
  EXPECT_EQ(kv_head_for(7, 8, 8), 7);
  EXPECT_EQ(kv_head_for(7, 8, 1), 0);
  EXPECT_THROW((AttentionShape{6, 4, 8, 0}.validate()), std::invalid_argument);
}

TEST(AttentionReference, RejectsASequenceLongerThanItsBlockTable) {
  std::mt19937_64 rng(8);
  const std::vector<int> lens{20};
  DecodeCase c = make_random_decode_case(AttentionShape{2, 2, 8, 0}, lens, 16, false, rng);
  c.batch.seq_lens_tokens[0] = 33;  // needs 3 blocks, table has 2
  std::vector<float> out(c.q.size());
  EXPECT_THROW(decode_attention_reference(c.shape, c.cache, c.batch, c.q, out), std::invalid_argument);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);                    // tie, to even
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 4 * 0x1p-8f);  // tie, to even (up)
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-12f), 1.0f + 0x1p-7f);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::nanf(""))));
  std::mt19937_64 rng(9);
  const std::vector<int> lens{3};
  const DecodeCase c = make_random_decode_case(AttentionShape{2, 1, 8, 0}, lens, 16, true, rng);
  for (float x : c.cache.k) {
    if (std::isnan(x)) continue;  // an unused, poisoned slot
    ASSERT_EQ(round_to_bf16(x), x);
  }
  for (float x : c.q) ASSERT_EQ(round_to_bf16(x), x);
}

TEST(AttentionReference, UnusedCacheSlotsArePoisonedSoStrayReadsFail) {
  // The generated caches hold NaN wherever no token lives: the tail of each last block and the
  // spare blocks. `check` uploads the same caches, so a GPU kernel that reads V past a
  // sequence's end (even with a zero softmax weight: 0 · NaN = NaN) or a wrong block fails.
  std::mt19937_64 rng(10);
  const AttentionShape shape{4, 2, 16, 0};
  const std::vector<int> lens{20, 16, 1};
  DecodeCase c = make_random_decode_case(shape, lens, 16, false, rng);
  const int64_t slots = static_cast<int64_t>(c.cache.num_blocks) * 16;
  int64_t nan_rows = 0;
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int64_t row = slot * shape.num_kv_heads * shape.head_dim;
    const bool k_nan = std::isnan(c.cache.k[static_cast<size_t>(row)]);
    EXPECT_EQ(k_nan, std::isnan(c.cache.v[static_cast<size_t>(row)])) << "slot " << slot;
    nan_rows += k_nan;
  }
  EXPECT_EQ(nan_rows, slots - (20 + 16 + 1));
  std::vector<float> out(c.q.size());
  decode_attention_reference(c.shape, c.cache, c.batch, c.q, out);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LE(max_scaled_error(out, naive_decode(c), kAtol, kRtol), 1.0);

  // One token past the end of a partial last block (the off-by-one a kernel could make):
  // NaN, which never passes the comparison.
  DecodeCase past = c;
  past.batch.seq_lens_tokens[0] = 21;
  std::vector<float> past_out(c.q.size());
  decode_attention_reference(past.shape, past.cache, past.batch, past.q, past_out);
  EXPECT_TRUE(std::isinf(max_scaled_error(past_out, out, kAtol, kRtol)));

  // A block-table entry pointing at a spare block (no sequence owns it): NaN too.
  std::vector<char> owned(static_cast<size_t>(c.cache.num_blocks), 0);
  for (int s = 0; s < c.batch.num_seqs(); ++s) {
    for (int b = 0; b * 16 < c.batch.seq_lens_tokens[static_cast<size_t>(s)]; ++b) {
      owned[static_cast<size_t>(c.batch.block_table(s)[b])] = 1;
    }
  }
  const auto spare = std::find(owned.begin(), owned.end(), 0);
  ASSERT_NE(spare, owned.end());
  DecodeCase wrong = c;
  wrong.batch.block_tables[0] = static_cast<int32_t>(spare - owned.begin());
  std::vector<float> wrong_out(c.q.size());
  decode_attention_reference(wrong.shape, wrong.cache, wrong.batch, wrong.q, wrong_out);
  EXPECT_TRUE(std::isinf(max_scaled_error(wrong_out, out, kAtol, kRtol)));

  // Prefill: everything past prior + chunk is poisoned, everything before is not.
  const PrefillCase p = make_random_prefill_case(shape, 5, 6, 16, false, rng);
  for (int t = 0; t < 16; ++t) {
    const float k0 = p.cache.k[static_cast<size_t>(p.cache.layout.token_row_offset(p.block_table.data(), t, 0))];
    EXPECT_EQ(std::isnan(k0), t >= 11) << "token " << t;
  }
  std::vector<float> prefill_out(p.q.size());
  prefill_attention_reference(p.shape, p.cache, p.block_table, 5, 6, p.q, prefill_out);
  for (float x : prefill_out) ASSERT_TRUE(std::isfinite(x));
}

TEST(MaxScaledError, NanNeverPasses) {
  const std::vector<float> expected{1.0f, 2.0f}, actual{1.0f, std::nanf("")};
  EXPECT_TRUE(std::isinf(max_scaled_error(actual, expected, 1e-3, 1e-3)));
  EXPECT_DOUBLE_EQ(max_scaled_error(expected, expected, 1e-3, 1e-3), 0.0);
}

}  // namespace
}  // namespace batchsim::calibration

namespace batchsim::calibration {
namespace {

TEST(DecodeKernelChoice, FollowsVllmsV1V2Rule) {
  // vllm/attention/ops/paged_attn.py: v1 when max_seq_len <= 8192 and (one partition or more
  // than 512 (sequence, head) pairs to fill the GPU); otherwise v2 with 512-token partitions.
  EXPECT_TRUE(use_single_pass_decode(1, 32, 512));     // one partition
  EXPECT_FALSE(use_single_pass_decode(1, 32, 513));    // two partitions, only 32 CTAs
  EXPECT_FALSE(use_single_pass_decode(16, 32, 4096));  // exactly 512 pairs: not more than 512
  EXPECT_TRUE(use_single_pass_decode(17, 32, 4096));
  EXPECT_TRUE(use_single_pass_decode(256, 32, 8192));
  EXPECT_FALSE(use_single_pass_decode(256, 32, 8193));  // long contexts always split
}

}  // namespace
}  // namespace batchsim::calibration
