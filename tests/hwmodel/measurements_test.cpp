// Reading Vidur-schema measurement CSVs: the shipped Vidur tables and calibration-style directories.
#include "hwmodel/fit/measurements.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "hwmodel/fit/predict.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::user_error_of;
using testing::write_text_file;

std::filesystem::path vidur_dir() { return testing::measured_dir() / "vidur"; }

TEST(Measurements, ReadsTheSharedA100Tree) {
  const Measurements m = read_measurements(vidur_dir(), "a100");
  EXPECT_EQ(m.device, "a100");
  // Eight models' mlp.csv: five of 1,044 rows, Llama-3 8B and 70B of 1,824, Phi-2 of 261.
  EXPECT_EQ(m.token_ops.size(), 5u * 1044 + 2u * 1824 + 261);
  // The Llama-2-7B subset (1,810 rows) and the 70B-shape TP-2 profile (14,658 rows).
  EXPECT_EQ(m.attention.size(), 1810u + 14658u);
  // network/a100_dgx, single-node rows only: 994 sizes for each of 2, 4 and 8 GPUs.
  EXPECT_EQ(m.all_reduce.size(), 3u * 994);
  for (const AllReduceRow& r : m.all_reduce) EXPECT_LE(r.num_workers, 8);
  EXPECT_EQ(m.cpu_overheads.size(), 78u);
  // The raw-samples file has no shape columns: skipped, not misread.
  ASSERT_EQ(m.files_skipped.size(), 1u);
  EXPECT_THAT(m.files_skipped[0], HasSubstr("attention_SUBSET_raw_samples.csv"));

  // The first data row of Llama-2-7B's mlp.csv (hwmodel/measured/vidur): 4096 tokens,
  // TP 1, QKV median 1.911 ms; its shape columns 32, 32, 4096, 11008, gated.
  const auto it = std::find_if(m.token_ops.begin(), m.token_ops.end(),
                               [](const TokenOpRow& r) { return r.model == "meta-llama/Llama-2-7b-hf"; });
  ASSERT_NE(it, m.token_ops.end());
  EXPECT_EQ(it->num_tokens, 4096);
  EXPECT_EQ(it->tp, 1);
  EXPECT_NEAR(it->median_s[static_cast<int>(TokenOp::attn_pre_proj)], 1.911e-3, 1e-12);
  EXPECT_EQ(it->shape.ffn_size, 11008);
  EXPECT_TRUE(it->shape.gated_mlp);
  EXPECT_TRUE(it->shape.same_layer_shape(resolve_model("llama-2-7b")));
}

TEST(Measurements, TheA40TreeHasNoAttentionOrNetwork) {
  const Measurements m = read_measurements(vidur_dir(), "a40");
  EXPECT_EQ(m.token_ops.size(), 5u * 1044 + 261);
  EXPECT_TRUE(m.attention.empty());
  EXPECT_TRUE(m.all_reduce.empty());
  EXPECT_FALSE(m.cpu_overheads.empty());
}

TEST(Measurements, ATreeOfSeveralGpusNeedsADevice) {
  EXPECT_THAT(user_error_of([] { read_measurements(vidur_dir()); }),
              AllOf(HasSubstr("a100"), HasSubstr("a40"), HasSubstr("several GPUs")));
  EXPECT_THAT(user_error_of([] { read_measurements(vidur_dir(), "h100"); }),
              AllOf(HasSubstr("h100"), HasSubstr("a100")));
  EXPECT_THAT(user_error_of([] { read_measurements("/nonexistent/measurements"); }),
              HasSubstr("/nonexistent/measurements"));
}

// What calibration/ writes: a flat folder of Vidur-schema CSVs.
TEST(Measurements, ReadsAFlatCalibrationFolder) {
  const auto dir = testing::scratch_dir("measurements_flat");
  write_text_file(dir / "my-model", "mlp.csv",
                  "time_stats.attn_pre_proj.median,time_stats.add.median,n_head,n_kv_head,n_embd,"
                  "n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n"
                  "0.5,,32,8,4096,14336,128256,True,64,2\n");
  write_text_file(dir, "attention.csv",
                  "time_stats.attn_decode.median,time_stats.attn_prefill.median,n_embd,n_q_head,"
                  "n_kv_head,num_tensor_parallel_workers,batch_size,prefill_chunk_size,kv_cache_size,"
                  "is_prefill\n"
                  "0.02,,4096,32,8,1,4,0,512,False\n"
                  ",0.3,4096,32,8,1,1,256,0,True\n");
  // Compressed tables read as plain ones (the repository ships its tables as .csv.gz).
  testing::write_gzip_file(dir, "all_reduce.csv.gz", "time_stats.all_reduce.median,num_workers,size\n0.05,2,4096\n");
  write_text_file(dir, "notes.csv", "something,else\n1,2\n");
  const Measurements m = read_measurements(dir);
  ASSERT_EQ(m.token_ops.size(), 1u);
  const TokenOpRow& row = m.token_ops[0];
  EXPECT_EQ(row.model, "my-model");
  EXPECT_EQ(row.tp, 2);
  EXPECT_DOUBLE_EQ(row.median_s[static_cast<int>(TokenOp::attn_pre_proj)], 0.5e-3);
  EXPECT_TRUE(std::isnan(row.median_s[static_cast<int>(TokenOp::add)]));      // empty field
  EXPECT_TRUE(std::isnan(row.median_s[static_cast<int>(TokenOp::mlp_act)]));  // no column
  ASSERT_EQ(m.attention.size(), 2u);
  EXPECT_FALSE(m.attention[0].is_prefill);
  EXPECT_DOUBLE_EQ(m.attention[0].median_s, 0.02e-3);
  EXPECT_EQ(m.attention[1].prefill_chunk_size, 256);
  ASSERT_EQ(m.all_reduce.size(), 1u);
  EXPECT_DOUBLE_EQ(m.all_reduce[0].size_bytes, 4096);
  EXPECT_EQ(m.files_skipped, std::vector<std::string>{"notes.csv"});
  EXPECT_THAT(m.files_read, ::testing::Contains("all_reduce.csv.gz"));
}

TEST(Measurements, MalformedRowsNameFileAndLine) {
  const auto dir = testing::scratch_dir("measurements_bad");
  write_text_file(dir, "all_reduce.csv", "time_stats.all_reduce.median,num_workers,size\n0.05,2,4096\n0.07,two,8192\n");
  EXPECT_THAT(user_error_of([&] { read_measurements(dir); }),
              AllOf(HasSubstr("all_reduce.csv:3"), HasSubstr("num_workers"), HasSubstr("'two'")));
  write_text_file(dir, "all_reduce.csv", "time_stats.all_reduce.median,num_workers,size\n0.05,2\n");
  EXPECT_THAT(user_error_of([&] { read_measurements(dir); }),
              AllOf(HasSubstr("all_reduce.csv:2"), HasSubstr("2 fields")));
  const auto empty = testing::scratch_dir("measurements_empty");
  EXPECT_THAT(user_error_of([&] { read_measurements(empty); }), HasSubstr("no measurement CSVs"));
}

TEST(Measurements, CanonicalNamesMatchBuiltins) {
  EXPECT_EQ(canonical_model_name("meta-llama/Llama-2-7b-hf"), "llama-2-7b");
  EXPECT_EQ(canonical_model_name("meta-llama/Meta-Llama-3-70B"), "llama-3-70b");
  EXPECT_EQ(canonical_model_name("codellama/CodeLlama-34b-Instruct-hf"), "codellama-34b");
  EXPECT_EQ(canonical_model_name("Qwen/Qwen-72B"), "qwen-72b");
  EXPECT_EQ(canonical_model_name("llama-2-7b"), "llama-2-7b");
  // Every Vidur model of the shipped tables is a built-in (so whole iterations know its layers).
  const Measurements m = read_measurements(vidur_dir(), "a100");
  for (const TokenOpRow& row : m.token_ops) {
    const std::string name = canonical_model_name(row.model);
    const ModelSpec spec = resolve_model(name);
    EXPECT_TRUE(row.shape.same_layer_shape(spec)) << row.model;
  }
}

}  // namespace
}  // namespace batchsim
