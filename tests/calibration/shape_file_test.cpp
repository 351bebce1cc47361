// The shape file: the GEMMs of any model, written on the CPU by `batchsim calibrate shapes`
// (experiments/cli/calibrate_shapes.cpp, hwmodel's shape functions) and read on the GPU by
// batchsim-calibrate (calibration/shape_file.h, standard library only). The reader is checked
// on hand-written files; the writer by running this build's `batchsim` (when it is built) and
// reading its file back, against the shapes of the models' published config.json.
#include "calibration/shape_file.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "calibration/measurement_csv.h"
#include "calibration/shape_grid.h"
#include "hwmodel/fit/measurements.h"
#include "run_command.h"
#include "test_support.h"

namespace batchsim::calibration {
namespace {

using shell::quoted;
using shell::run_command;

std::string error_of(const std::filesystem::path& path) {
  try {
    read_shape_file(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << path;
  return "";
}

TEST(ShapeFile, ReadsColumnsByNameSkipsCommentsAndDefaultsTheLayout) {
  const std::filesystem::path file =
      ::batchsim::testing::write_text_file(::batchsim::testing::scratch_dir("shapes"), "shapes.csv",
                                           "# a comment\n"
                                           "\n"
                                           "op,k,n,model,extra_column,groups\n"
                                           "attn_pre_proj,4096,6144,my-model,ignored,\n"
                                           "   # an indented comment\n"
                                           "mla_uk,128,512,my-model,ignored,16\r\n");
  const std::vector<ShapeFileGemm> rows = read_shape_file(file);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].model, "my-model");
  EXPECT_EQ(rows[0].op, "attn_pre_proj");
  EXPECT_EQ(rows[0].k, 4096);
  EXPECT_EQ(rows[0].n, 6144);
  EXPECT_EQ(rows[0].groups, 1);
  EXPECT_EQ(rows[0].tp, 1);
  EXPECT_EQ(rows[0].ep, 1);
  EXPECT_EQ(rows[0].folder(), "my-model");  // no hf_id: the name is the folder
  EXPECT_EQ(rows[1].groups, 16);
  EXPECT_EQ(rows[1].n, 512);
}

TEST(ShapeFile, RefusesMalformedFilesNamingTheFileAndLine) {
  const std::filesystem::path dir = ::batchsim::testing::scratch_dir("bad-shapes");
  const auto file = [&](const std::string& name, const std::string& text) {
    return ::batchsim::testing::write_text_file(dir, name, text);
  };
  EXPECT_NE(error_of(dir / "missing.csv").find("cannot read the shape file"), std::string::npos);
  EXPECT_NE(error_of(file("empty.csv", "# nothing\n")).find("no header line"), std::string::npos);
  EXPECT_NE(error_of(file("no-rows.csv", "model,op,k,n\n")).find("no GEMM rows"), std::string::npos);
  const std::string no_k = error_of(file("no-k.csv", "model,op,n\nm,qkv,4\n"));
  EXPECT_NE(no_k.find("no-k.csv:1: the header has no 'k' column"), std::string::npos) << no_k;
  const std::string zero = error_of(file("zero.csv", "model,op,k,n\nm,qkv,4096,0\n"));
  EXPECT_NE(zero.find("zero.csv:2: column 'n': '0' is not a positive integer"), std::string::npos) << zero;
  const std::string word = error_of(file("word.csv", "model,op,k,n\nm,qkv,4096,12k\n"));
  EXPECT_NE(word.find("word.csv:2: column 'n': '12k'"), std::string::npos) << word;
  const std::string cells = error_of(file("cells.csv", "model,op,k,n\n# ok\nm,qkv,4096\n"));
  EXPECT_NE(cells.find("cells.csv:3: 3 cells, the header has 4"), std::string::npos) << cells;
}

TEST(ShapeFile, RowsOfOneShapeShareOneMeasurement) {
  const std::filesystem::path file =
      ::batchsim::testing::write_text_file(::batchsim::testing::scratch_dir("shapes"), "shapes.csv",
                                           "model,op,k,n,groups\n"
                                           "a,attn_pre_proj,4096,12288,1\n"
                                           "a,attn_post_proj,4096,4096,1\n"
                                           "b,lm_head,4096,32000,1\n"
                                           "a,mlp_down_proj,4096,4096,1\n"
                                           "a,mla_uk,4096,4096,8\n");
  const std::vector<ShapeFileGemm> rows = read_shape_file(file);
  EXPECT_EQ(shape_file_models(rows), (std::vector<std::string>{"a", "b"}));
  const std::vector<DistinctGemm> a = distinct_gemms(rows, "a");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].n, 12288);
  ASSERT_EQ(a[1].rows.size(), 2u);  // O and down: one (4096, 4096) measurement, two rows
  EXPECT_EQ(a[1].rows[0].op, "attn_post_proj");
  EXPECT_EQ(a[1].rows[1].op, "mlp_down_proj");
  EXPECT_EQ(a[2].groups, 8);  // same (k, n), but batched: a different GEMM
  EXPECT_EQ(distinct_gemms(rows, "b").size(), 1u);
}

TEST(GemmCsv, WritesOneRowPerOpAndHwmodelsReaderPassesOverIt) {
  const std::filesystem::path dir = ::batchsim::testing::scratch_dir("gemm-csv");
  ShapeFileGemm expert{"deepseek-v3", "deepseek-ai/DeepSeek-V3", 8, 1, 8, 1, "expert_up_proj", 7168, 4096, 1, 58,
                       "fp8-block"};
  const std::filesystem::path gemm_csv = model_measurement_dir(dir, "h200", expert) / "gemm.csv";
  EXPECT_EQ(gemm_csv, dir / "compute" / "h200" / "deepseek-ai" / "DeepSeek-V3" / "gemm.csv");
  {
    GemmCsvWriter csv(gemm_csv);
    csv.write({&expert, 64, "bf16", TimerKind::kCupti, summarize(std::vector<double>{2e-5, 3e-5, 4e-5})});
  }
  const std::string text = ::batchsim::testing::read_text_file(gemm_csv);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "model,op,m,n,k,groups,tp,dp,ep,moe_tp,layers,weight_format,dtype,time_stats.gemm.min,"
            "time_stats.gemm.max,time_stats.gemm.mean,time_stats.gemm.median,time_stats.gemm.std,time_stats.gemm.p10,"
            "time_stats.gemm.p90,time_stats.gemm.count,profile_method");
  EXPECT_NE(text.find("\ndeepseek-v3,expert_up_proj,64,4096,7168,1,8,1,8,1,58,fp8-block,bf16,0.02,0.04,"),
            std::string::npos)
      << text;
  // Beside a model's Vidur files, hwmodel's reader reads those and lists gemm.csv as skipped.
  const CalibrationModel& llama = find_calibration_model("llama-2-7b");
  {
    MlpCsvWriter mlp(model_measurement_dir(dir, "h200", llama) / "mlp.csv");
    MlpRow row{&llama, 16, 1, "bf16", TimerKind::kCupti, {}};
    for (const GemmShape& g : layer_gemm_shapes(llama, 1))
      row.ops[static_cast<size_t>(g.op)] = summarize(std::vector<double>{1e-5});
    mlp.write(row);
  }
  const Measurements m = read_measurements(dir);
  EXPECT_EQ(m.token_ops.size(), 1u);
  EXPECT_NE(std::find(m.files_skipped.begin(), m.files_skipped.end(), "compute/h200/deepseek-ai/DeepSeek-V3/gemm.csv"),
            m.files_skipped.end());
}

// --- the writer: `batchsim calibrate shapes` -------------------------------------------------

struct ShapesRun {
  int exit_code = -1;
  std::string output;
  std::vector<ShapeFileGemm> rows;
  std::map<std::string, ShapeFileGemm> by_op;
};

ShapesRun calibrate_shapes(const std::string& args) {
  ShapesRun run;
  const std::filesystem::path file = ::batchsim::testing::scratch_dir("cli") / "shapes.csv";
  const shell::CommandResult r =
      run_command(quoted(shell::built_batchsim()) + " calibrate shapes " + args + " --out " + quoted(file));
  run.exit_code = r.exit_code;
  run.output = r.output;
  if (r.exit_code == 0) {
    run.rows = read_shape_file(file);
    for (const ShapeFileGemm& g : run.rows) run.by_op[g.op] = g;
  }
  return run;
}

void expect_gemm(const ShapesRun& run, const std::string& op, int64_t k, int64_t n, int64_t groups = 1) {
  const auto it = run.by_op.find(op);
  ASSERT_NE(it, run.by_op.end()) << op << " missing:\n" << run.output;
  EXPECT_EQ(it->second.k, k) << op;
  EXPECT_EQ(it->second.n, n) << op;
  EXPECT_EQ(it->second.groups, groups) << op;
}

#define REQUIRE_BATCHSIM()                                                          \
  if (shell::built_batchsim().empty()) {                                            \
    GTEST_SKIP() << "experiments/batchsim is not built in " << BATCHSIM_BINARY_DIR; \
  }

// DeepSeek-V3's config.json (hwmodel/models/deepseek-ai--DeepSeek-V3.json): hidden 7168, 128
// heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 + qk_rope 64, v_head_dim 128; 61 layers
// of which the first 3 dense (intermediate 18432), 256 routed experts of 2048 (top 8) and one
// shared expert of 2048; vocabulary 129280.
TEST(CalibrateShapesCommand, DeepSeekV3AtTp8HasItsMlaAndExpertGemms) {
  REQUIRE_BATCHSIM();
  const ShapesRun tp8 = calibrate_shapes("--model deepseek-v3 --tp 8");
  ASSERT_EQ(tp8.exit_code, 0) << tp8.output;
  const int64_t heads = 128 / 8;
  expect_gemm(tp8, "attn_pre_proj", 7168, 1536 + 512 + 64);  // the fused down-projection, replicated
  expect_gemm(tp8, "mla_q_b_proj", 1536, heads * (128 + 64));
  expect_gemm(tp8, "mla_kv_b_proj", 512, heads * (128 + 128));
  expect_gemm(tp8, "mla_uk", 128, 512, heads);  // per head, batched
  expect_gemm(tp8, "mla_uv", 512, 128, heads);
  expect_gemm(tp8, "attn_post_proj", heads * 128, 7168);
  expect_gemm(tp8, "mlp_up_proj", 7168, 2 * 18432 / 8);  // the 3 dense layers
  expect_gemm(tp8, "mlp_down_proj", 18432 / 8, 7168);
  expect_gemm(tp8, "moe_router", 7168, 256);
  expect_gemm(tp8, "expert_up_proj", 7168, 2 * 2048 / 8);  // without EP each expert is split 8 ways
  expect_gemm(tp8, "expert_down_proj", 2048 / 8, 7168);
  expect_gemm(tp8, "shared_expert_up_proj", 7168, 2 * 2048 / 8);
  expect_gemm(tp8, "shared_expert_down_proj", 2048 / 8, 7168);
  expect_gemm(tp8, "lm_head", 7168, 129280 / 8);
  EXPECT_EQ(tp8.rows.size(), 14u);
  EXPECT_EQ(tp8.by_op.at("mlp_up_proj").layers, 3);
  EXPECT_EQ(tp8.by_op.at("expert_up_proj").layers, 58);
  EXPECT_EQ(tp8.by_op.at("attn_pre_proj").layers, 61);
  EXPECT_EQ(tp8.by_op.at("lm_head").layers, 1);
  EXPECT_EQ(tp8.by_op.at("expert_up_proj").moe_tp, 8);
  EXPECT_EQ(tp8.by_op.at("expert_up_proj").weight_format, "fp8-block");  // the checkpoint's
  EXPECT_EQ(tp8.by_op.at("moe_router").weight_format, "bf16");
  EXPECT_EQ(tp8.rows.front().folder(), "deepseek-ai/DeepSeek-V3");
  EXPECT_NE(tp8.output.find("wrote 14 GEMMs of deepseek-v3 at TP 8"), std::string::npos) << tp8.output;

  // With EP 8 every GPU holds 32 whole experts: an expert's w13 is 7168 x (2 x 2048), its w2
  // 2048 x 7168, and the rest is unchanged.
  const ShapesRun ep8 = calibrate_shapes("--model deepseek-v3 --tp 8 --ep 8");
  ASSERT_EQ(ep8.exit_code, 0) << ep8.output;
  expect_gemm(ep8, "expert_up_proj", 7168, 2 * 2048);
  expect_gemm(ep8, "expert_down_proj", 2048, 7168);
  expect_gemm(ep8, "attn_post_proj", heads * 128, 7168);
  EXPECT_EQ(ep8.by_op.at("expert_up_proj").ep, 8);
  EXPECT_EQ(ep8.by_op.at("expert_up_proj").moe_tp, 1);
  // DP attention: 8 ranks of TP 1 (whole heads), experts over all 8 GPUs.
  const ShapesRun dp8 = calibrate_shapes("--model deepseek-v3 --tp 1 --dp 8 --ep 8");
  ASSERT_EQ(dp8.exit_code, 0) << dp8.output;
  expect_gemm(dp8, "mla_kv_b_proj", 512, 128 * (128 + 128));
  expect_gemm(dp8, "mla_uk", 128, 512, 128);
  expect_gemm(dp8, "expert_down_proj", 2048, 7168);
}

TEST(CalibrateShapesCommand, OtherFamiliesAndTheBuiltInTableAgree) {
  REQUIRE_BATCHSIM();
  // A dense model: exactly the GEMMs batchsim-calibrate's own table gives (shape_grid.h).
  for (int tp : {1, 2, 8}) {
    SCOPED_TRACE("llama-2-7b TP " + std::to_string(tp));
    const ShapesRun llama = calibrate_shapes("--model llama-2-7b --tp " + std::to_string(tp));
    ASSERT_EQ(llama.exit_code, 0) << llama.output;
    EXPECT_EQ(llama.rows.size(), 5u);
    for (const GemmShape& g : layer_gemm_shapes(find_calibration_model("llama-2-7b"), tp)) {
      expect_gemm(llama, std::string(vidur_op_name(g.op)), g.k, g.n);
    }
  }
  // gpt-oss-120b (config.json: hidden 2880, 64 heads of 64, 8 KV heads, 128 experts of 2880,
  // top 4, mxfp4 experts, vocabulary 201088), EP 4 at TP 4.
  const ShapesRun oss = calibrate_shapes("--model gpt-oss-120b --tp 4 --ep 4");
  ASSERT_EQ(oss.exit_code, 0) << oss.output;
  expect_gemm(oss, "attn_pre_proj", 2880, (64 / 4 + 2 * 8 / 4) * 64);
  expect_gemm(oss, "attn_post_proj", 64 / 4 * 64, 2880);
  expect_gemm(oss, "moe_router", 2880, 128);
  expect_gemm(oss, "expert_up_proj", 2880, 2 * 2880);
  expect_gemm(oss, "expert_down_proj", 2880, 2880);
  EXPECT_EQ(oss.by_op.count("mlp_up_proj"), 0u);  // no dense layers
  EXPECT_EQ(oss.by_op.count("shared_expert_up_proj"), 0u);
  EXPECT_EQ(oss.by_op.at("expert_up_proj").weight_format, "mxfp4");
  EXPECT_EQ(oss.by_op.at("attn_pre_proj").weight_format, "bf16");
}

TEST(CalibrateShapesCommand, RefusesWhatBatchsimRunRefuses) {
  REQUIRE_BATCHSIM();
  const ShapesRun unknown = calibrate_shapes("--model no-such-model");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown model 'no-such-model'"), std::string::npos) << unknown.output;
  const ShapesRun tp3 = calibrate_shapes("--model llama-2-7b --tp 3");
  EXPECT_EQ(tp3.exit_code, 2);
  EXPECT_NE(tp3.output.find("not divisible by --tp 3"), std::string::npos) << tp3.output;
  const ShapesRun ep_dense = calibrate_shapes("--model llama-2-7b --ep 2");
  EXPECT_EQ(ep_dense.exit_code, 2) << ep_dense.output;
  const ShapesRun ep3 = calibrate_shapes("--model deepseek-v3 --tp 8 --ep 3");
  EXPECT_EQ(ep3.exit_code, 2) << ep3.output;
}

}  // namespace
}  // namespace batchsim::calibration
