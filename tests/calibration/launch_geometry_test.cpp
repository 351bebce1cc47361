// Launch geometry of the CUDA kernels over every point `measure` and `check` launch, checked
// on the CPU: shared memory and grid sizes that are wrong fail only at launch on a GPU
// (cudaErrorInvalidValue / "too many resources requested"), where each try is expensive.
#include <gtest/gtest.h>

#include <vector>

#include "calibration/paged_kv_layout.h"
#include "calibration/shape_grid.h"

namespace batchsim::calibration {
namespace {

// The decode variant `measure` picks for a point, and what that launch needs.
void expect_decode_launch_fits(int batch, int heads, int max_context) {
  const int partition = use_single_pass_decode(batch, heads, max_context) ? 0 : kDecodePartitionSizeTokens;
  const int64_t smem = decode_dynamic_smem_bytes(max_context, partition);
  // Single pass keeps all logits in shared memory: within the no-opt-in budget for every
  // context vLLM's rule sends there (<= 8192 tokens, 32 KiB), so the opt-in is never needed
  // for a measured point (check's 9000-token single pass exercises it).
  EXPECT_LE(smem, kDecodeSmemOptInBytes) << batch << " x " << max_context << ", " << heads << " heads";
  EXPECT_LE(decode_num_partitions(max_context, partition), kMaxGridYZ);
  EXPECT_LE(batch, kMaxGridYZ);
  // Every partition holds at least one token of the longest sequence.
  EXPECT_LT(static_cast<int64_t>(decode_num_partitions(max_context, partition) - 1) *
                decode_partition_tokens(max_context, partition),
            max_context);
}

TEST(LaunchGeometry, EveryMeasuredDecodePointFitsItsLaunchLimits) {
  for (const AttentionGridOptions& grid : {AttentionGridOptions::quick(16384), AttentionGridOptions::full(16384)}) {
    for (const DecodeAttentionPoint& p : decode_attention_grid(grid)) {
      for (const CalibrationModel& model : calibration_models()) {
        for (int tp : {1, 2, 4, 8}) {
          expect_decode_launch_fits(p.batch_size, heads_per_gpu(model, tp), p.max_context_tokens());
        }
      }
    }
  }
}

TEST(LaunchGeometry, DecodeSharedMemoryAndPartitions) {
  EXPECT_EQ(decode_dynamic_smem_bytes(8192, 0), 32 * 1024);  // the largest single pass
  EXPECT_EQ(decode_dynamic_smem_bytes(9000, 0), 36000);      // check's case: needs the opt-in
  EXPECT_GT(decode_dynamic_smem_bytes(9000, 0), kDecodeSmemOptInBytes);
  EXPECT_LE(decode_dynamic_smem_bytes(9000, 0), kDecodeMaxDynamicSmemBytes);
  EXPECT_EQ(decode_dynamic_smem_bytes(30720, 512), 2048);
  EXPECT_EQ(decode_num_partitions(9000, 512), 18);
  EXPECT_EQ(decode_num_partitions(512, 512), 1);
  EXPECT_EQ(decode_num_partitions(513, 512), 2);
  EXPECT_EQ(decode_num_partitions(9000, 0), 1);
  // A single pass over a context this long cannot be launched at all: the launcher refuses it.
  EXPECT_GT(decode_dynamic_smem_bytes(65536, 0), kDecodeMaxDynamicSmemBytes);
}

TEST(LaunchGeometry, CacheOffsetsOfTheLargestMeasuredBatchDoNotOverflow) {
  // The largest quick decode batch holds 2^19 tokens of 32 KV heads × 128 dims: 2^31 elements
  // per cache, one past INT32_MAX. Offsets are 64-bit: the last element is 2^31 − 1.
  const PagedKvLayout layout{16, 32, 128};
  const int32_t blocks = (1 << 19) / 16;
  EXPECT_EQ(layout.row_offset(blocks - 1, 15, 31) + 127, (int64_t{1} << 31) - 1);
  const std::vector<int32_t> table{blocks - 1};
  EXPECT_EQ(layout.token_row_offset(table.data(), 15, 31), layout.row_offset(blocks - 1, 15, 31));
  // Rows tile a block exactly: [slot][kv_head][head_dim].
  EXPECT_EQ(layout.row_offset(1, 0, 0), layout.block_stride_elems());
  EXPECT_EQ(layout.row_offset(0, 1, 0), 32 * 128);
  EXPECT_EQ(layout.row_offset(0, 0, 1), 128);
}

}  // namespace
}  // namespace batchsim::calibration
