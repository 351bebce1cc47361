// Engine profiles (hwmodel/engine_profile.h): the reader and writer, the shipped engines and the
// provenance of their numbers, and each thing an engine changes in an iteration's cost.
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/roofline.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using testing::round_profile;
using testing::user_error_of;

EngineProfile odd_engine() {
  EngineProfile e;
  e.name = "odd";
  e.description = "every field away from its default";
  e.sources = "a test\nover two lines\n";
  e.cpu = {1.25e-3, 3.5e-5, 7.5e-4};
  e.cpu_overlaps_gpu = true;
  e.launch_per_kernel_s = 6.5e-6;
  e.kernels_per_layer = 13;
  e.kernels_per_iteration = 7;
  e.cuda_graph_max_tokens = 96;
  e.cuda_graph_launch_s = 2.5e-5;
  e.allreduce = AllReduceImpl::custom;
  e.custom_allreduce_max_bytes = 4194304;
  e.kv_cache_write = KvCacheWrite::concat;
  e.residual = {9.5e-4, 2.25e-5, 1.5e-4};
  return e;
}

void expect_same(const EngineProfile& a, const EngineProfile& b, bool compare_text = true) {
  if (compare_text) {
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.description, b.description);
    EXPECT_EQ(a.sources, b.sources);
  }
  EXPECT_EQ(a.cpu.per_iteration_s, b.cpu.per_iteration_s);
  EXPECT_EQ(a.cpu.per_sequence_s, b.cpu.per_sequence_s);
  EXPECT_EQ(a.cpu.per_extra_worker_s, b.cpu.per_extra_worker_s);
  EXPECT_EQ(a.cpu_overlaps_gpu, b.cpu_overlaps_gpu);
  EXPECT_EQ(a.launch_per_kernel_s, b.launch_per_kernel_s);
  EXPECT_EQ(a.kernels_per_layer, b.kernels_per_layer);
  EXPECT_EQ(a.kernels_per_iteration, b.kernels_per_iteration);
  EXPECT_EQ(a.cuda_graph_max_tokens, b.cuda_graph_max_tokens);
  EXPECT_EQ(a.cuda_graph_launch_s, b.cuda_graph_launch_s);
  EXPECT_EQ(a.allreduce, b.allreduce);
  EXPECT_EQ(a.custom_allreduce_max_bytes, b.custom_allreduce_max_bytes);
  EXPECT_EQ(a.kv_cache_write, b.kv_cache_write);
  EXPECT_EQ(a.residual.per_iteration_s, b.residual.per_iteration_s);
  EXPECT_EQ(a.residual.per_sequence_s, b.residual.per_sequence_s);
  EXPECT_EQ(a.residual.per_extra_worker_s, b.residual.per_extra_worker_s);
}

TEST(EngineProfiles, FileRoundTripKeepsEveryField) {
  const auto dir = testing::scratch_dir("engine-roundtrip");
  const EngineProfile e = odd_engine();
  const auto file = testing::write_text_file(dir, "odd.yaml", engine_profile_yaml(e));
  expect_same(load_engine_profile(file), e);
  expect_same(resolve_engine(file.string()), e);
}

TEST(EngineProfiles, EveryShippedEngineLoadsAndSaysWhereItsNumbersComeFrom) {
  std::set<std::string> names;
  for (const EngineProfile& e : builtin_engines()) {
    names.insert(e.name);
    EXPECT_FALSE(e.description.empty()) << e.name;
    EXPECT_FALSE(e.sources.empty()) << e.name;  // every engine says where its numbers come from
  }
  for (const char* n : {"bare", "vllm", "vllm-v0", "hf-transformers", "fastertransformer", "tgi", "sglang", "trtllm"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  // The default of library code is the bare engine, which the shipped bare.yaml equals.
  expect_same(resolve_engine("bare"), EngineProfile{}, /*compare_text=*/false);
}

// resolve_engine parses only the shipped engine it is asked for (the one whose file's stem is
// the name) and its bases (engine_profile.cpp): the catalogue's answer only while names are
// unique, and equal to the catalogue's engine field for field.
TEST(EngineProfiles, ResolvingOneEngineGivesTheCataloguesEngine) {
  std::set<std::string> names;
  int with_base = 0;
  for (const EngineProfile& e : builtin_engines()) {
    EXPECT_TRUE(names.insert(e.name).second) << "two built-in engines are named " << e.name;
    EXPECT_EQ(engine_profile_yaml(resolve_engine(e.name)), engine_profile_yaml(e)) << e.name;
    with_base += e.name.ends_with("-fitted") ? 1 : 0;
  }
  EXPECT_GE(with_base, 1);  // the fitted engines name a base
}

TEST(EngineProfiles, BaseGivesTheDefaultsOfKeysTheFileLeavesOut) {
  const auto dir = testing::scratch_dir("engine-base");
  const auto file = testing::write_text_file(dir, "mine.yaml", "base: vllm\ncpu: {per_sequence_s: 1.0e-5}\n");
  const EngineProfile mine = load_engine_profile(file);
  EngineProfile expected = resolve_engine("vllm");
  expected.name = "mine";
  expected.cpu.per_sequence_s = 1e-5;
  expect_same(mine, expected);
}

// The engines fitted to H100 serving benchmarks are their base engines plus a residual only
// (experiments/fidelity/engine_fit.h; tests/experiments/engine_fit_test.cpp keeps the residual equal to a
// fresh fit), whatever order the files load in.
TEST(EngineProfiles, FittedEnginesAreTheirBaseWithAResidual) {
  for (const char* base : {"vllm", "sglang", "trtllm"}) {
    const EngineProfile fitted = resolve_engine(std::string(base) + "-h100-fitted");
    EngineProfile expected = resolve_engine(base);
    EXPECT_EQ(expected.residual.per_iteration_s + expected.residual.per_sequence_s, 0) << base;
    expected.residual = fitted.residual;
    expect_same(fitted, expected, /*compare_text=*/false);
    // The fit is non-negative; a term the rows do not need may come out 0 (TensorRT-LLM's per
    // sequence, once its eager prefills are costed), the time per iteration never does.
    EXPECT_GT(fitted.residual.per_iteration_s, 0) << base;
    EXPECT_GE(fitted.residual.per_sequence_s, 0) << base;
    EXPECT_THAT(fitted.sources, HasSubstr("fitted by batchsim calibrate engine")) << base;
  }
}

TEST(EngineProfiles, BadFilesAreErrorsNamingTheKey) {
  const auto dir = testing::scratch_dir("engine-bad");
  auto error_of = [&](const std::string& text) {
    const auto file = testing::write_text_file(dir, "bad.yaml", text);
    return user_error_of([&] { load_engine_profile(file); });
  };
  EXPECT_THAT(error_of("cpus: {per_iteration_s: 1}\n"), HasSubstr("unknown key 'cpus'"));
  EXPECT_THAT(error_of("cpu: {per_step_s: 1}\n"), HasSubstr("cpu.per_step_s"));
  EXPECT_THAT(error_of("cpu: {per_iteration_s: -1}\n"), HasSubstr("per_iteration_s"));
  EXPECT_THAT(error_of("cpu: 3\n"), HasSubstr("must be a map"));
  EXPECT_THAT(error_of("cpu: {overlaps_gpu: maybe}\n"), HasSubstr("true or false"));
  EXPECT_THAT(error_of("allreduce: {impl: mpi}\n"), HasSubstr("nccl, custom"));
  EXPECT_THAT(error_of("launch: {kernels_per_layer: 2.5}\n"), HasSubstr("whole number"));
  EXPECT_THAT(error_of("base: vllm-v9\n"), HasSubstr("unknown engine 'vllm-v9'"));
  EXPECT_THAT(error_of("- a list\n"), HasSubstr("map of keys"));
  EXPECT_THAT(user_error_of([] { resolve_engine("no-such-engine"); }), HasSubstr("vllm"));
}

TEST(EngineProfiles, HardwareProfilesRefuseTheCpuKeysTheyNoLongerHold) {
  const auto dir = testing::scratch_dir("engine-old-profile");
  const auto file = testing::write_text_file(dir, "old.yaml", "base: a100-80gb\niteration_overhead_s: 0.001\n");
  const std::string error = user_error_of([&] { load_hardware_profile(file); });
  EXPECT_THAT(error, HasSubstr("iteration_overhead_s"));
  EXPECT_THAT(error, HasSubstr("engine profile"));
}

// The CPU cost the vllm engine carries is Vidur's measurement, fitted as `batchsim validate`
// fits it; vllm-v0's per-worker cost is the A40 rows' (the only multi-GPU CPU rows).
TEST(EngineProfiles, VllmCpuOverheadIsVidursFit) {
  const auto vidur = testing::measured_dir() / "vidur";
  const FitResult a100 = fit_profile(read_measurements(vidur, "a100"), "llama-2-7b", resolve_gpu("a100-80gb"));
  ASSERT_TRUE(a100.cpu.has_value());
  for (const char* name : {"vllm", "vllm-v0", "tgi", "sglang", "trtllm"}) {
    const CpuOverhead& shipped = resolve_engine(name).cpu;
    EXPECT_DOUBLE_EQ(shipped.per_iteration_s, a100.cpu->per_iteration_s) << name;
    EXPECT_DOUBLE_EQ(shipped.per_sequence_s, a100.cpu->per_sequence_s) << name;
  }
  const FitResult a40 = fit_profile(read_measurements(vidur, "a40"), "llama-2-7b", resolve_gpu("a40"));
  ASSERT_TRUE(a40.cpu.has_value());
  EXPECT_DOUBLE_EQ(resolve_engine("vllm-v0").cpu.per_extra_worker_s, a40.cpu->per_extra_worker_s);
  EXPECT_GT(a40.cpu->per_extra_worker_s, 1e-3);
}

// A decode batch under the round profile: what each engine mechanism adds to it.
BatchShape decodes(int64_t n, int64_t context) {
  BatchShape s;
  for (int64_t i = 0; i < n; ++i) s.add_decode(context);
  s.num_sampled = n;
  return s;
}

TEST(EngineCost, CpuRunsInSeriesUnlessTheEngineOverlapsIt) {
  const ModelSpec m = resolve_model("llama-2-7b");
  const BatchShape shape = decodes(8, 500);
  const IterationCost bare = CostModel(m, round_profile()).iteration(shape);
  EngineProfile serial;
  serial.cpu = {2e-3, 1e-4, 0};
  const IterationCost s = CostModel(m, round_profile(), 1, serial).iteration(shape);
  EXPECT_DOUBLE_EQ(s.overhead_s, 2e-3 + 8 * 1e-4);
  EXPECT_DOUBLE_EQ(s.total_s, bare.total_s + 2.8e-3);
  // Overlapped, only the CPU time beyond the GPU's shows; none when the GPU takes longer.
  EngineProfile overlap = serial;
  overlap.cpu_overlaps_gpu = true;
  const IterationCost o = CostModel(m, round_profile(), 1, overlap).iteration(shape);
  EXPECT_DOUBLE_EQ(o.total_s, std::max(bare.total_s, 2.8e-3));
  overlap.cpu = {bare.total_s * 3, 0, 0};
  EXPECT_DOUBLE_EQ(CostModel(m, round_profile(), 1, overlap).iteration(shape).total_s, bare.total_s * 3);
  // Extra tensor-parallel workers cost per worker beyond the first.
  serial.cpu = {0, 0, 1e-3};
  const IterationCost tp1 = CostModel(m, round_profile(), 1, serial).iteration(shape);
  const IterationCost tp4 = CostModel(m, round_profile(), 4, serial).iteration(shape);
  EXPECT_DOUBLE_EQ(tp1.overhead_s, 0);
  EXPECT_DOUBLE_EQ(tp4.overhead_s, 3e-3);
}

// The residual is on every iteration's critical path: added in full, even where the engine
// overlaps its CPU work with the GPU.
TEST(EngineCost, TheResidualAddsToEveryIterationOverlappedOrNot) {
  const ModelSpec m = resolve_model("llama-2-7b");
  const BatchShape shape = decodes(8, 500);
  for (const bool overlaps : {false, true}) {
    EngineProfile e;
    e.cpu = {1e-4, 1e-6, 0};
    e.cpu_overlaps_gpu = overlaps;
    const IterationCost without = CostModel(m, round_profile(), 4, e).iteration(shape);
    e.residual = {1e-3, 2e-5, 3e-4};
    const IterationCost with = CostModel(m, round_profile(), 4, e).iteration(shape);
    EXPECT_DOUBLE_EQ(with.total_s - without.total_s, 1e-3 + 8 * 2e-5 + 3 * 3e-4) << overlaps;
    EXPECT_DOUBLE_EQ(with.overhead_s - without.overhead_s, 1e-3 + 8 * 2e-5 + 3 * 3e-4) << overlaps;
  }
}

TEST(EngineCost, LaunchesStallTheGpuOnlyWhenTheyFallBehindAndGraphsRemoveThem) {
  const ModelSpec m = resolve_model("llama-2-7b");  // 32 layers
  const BatchShape shape = decodes(4, 100);
  const IterationCost bare = CostModel(m, round_profile()).iteration(shape);
  EngineProfile eager;
  eager.kernels_per_layer = 10;
  eager.kernels_per_iteration = 4;
  eager.launch_per_kernel_s = bare.total_s / 100;  // 324 launches: ~3.2x the GPU time
  const IterationCost slow = CostModel(m, round_profile(), 1, eager).iteration(shape);
  EXPECT_NEAR(slow.total_s, 324 * eager.launch_per_kernel_s, 1e-15);
  EXPECT_NEAR(slow.overhead_s, slow.total_s - bare.total_s, 1e-15);
  // Launches faster than the kernels are hidden.
  eager.launch_per_kernel_s = bare.total_s / 1000;
  EXPECT_DOUBLE_EQ(CostModel(m, round_profile(), 1, eager).iteration(shape).total_s, bare.total_s);
  // A CUDA graph covering the iteration's tokens is one launch.
  eager.launch_per_kernel_s = bare.total_s / 100;
  eager.cuda_graph_max_tokens = 4;
  eager.cuda_graph_launch_s = 1e-6;
  EXPECT_DOUBLE_EQ(CostModel(m, round_profile(), 1, eager).iteration(shape).total_s, bare.total_s);
  // One token more than the graphs cover: eager again.
  eager.cuda_graph_max_tokens = 3;
  EXPECT_NEAR(CostModel(m, round_profile(), 1, eager).iteration(shape).total_s, slow.total_s, 1e-15);
}

TEST(EngineCost, CustomAllReduceForSmallMessagesWhereTheGpuHasItsFit) {
  const ModelSpec m = resolve_model("llama-2-7b");
  HardwareProfile gpu = round_profile();
  gpu.allreduce = {{2, 20e-6, 1e11}};
  gpu.custom_allreduce = {{2, 4e-6, 1e11}};
  const BatchShape shape = decodes(16, 300);
  const double message = allreduce_message_bytes(m, 16);
  const double layers = m.num_layers;
  EngineProfile custom;
  custom.allreduce = AllReduceImpl::custom;
  custom.custom_allreduce_max_bytes = message;
  EXPECT_DOUBLE_EQ(CostModel(m, gpu, 2, custom).iteration(shape).communication_s,
                   2 * layers * *custom_allreduce_time_s(gpu, message, 2));
  EXPECT_DOUBLE_EQ(CostModel(m, gpu, 2).iteration(shape).communication_s,
                   2 * layers * allreduce_time_s(gpu, message, 2));
  // A message above the engine's limit, or a GPU without the custom fit: NCCL.
  custom.custom_allreduce_max_bytes = message - 1;
  EXPECT_DOUBLE_EQ(CostModel(m, gpu, 2, custom).iteration(shape).communication_s,
                   2 * layers * allreduce_time_s(gpu, message, 2));
  custom.custom_allreduce_max_bytes = message;
  // A TP group over two nodes: NCCL, even with a custom fit for its degree (vLLM's custom
  // all-reduce turns itself off across nodes).
  HardwareProfile two_nodes = gpu;
  two_nodes.gpus_per_node = 1;
  two_nodes.allreduce.clear();
  two_nodes.internode_bytes_per_s = 25e9;
  two_nodes.internode_latency_s = 20e-6;
  const double over_nics = allreduce_time_s(two_nodes, message, 2);
  EXPECT_DOUBLE_EQ(over_nics, 20e-6 + message / 25e9);
  EXPECT_DOUBLE_EQ(CostModel(m, two_nodes, 2, custom).iteration(shape).communication_s, 2 * layers * over_nics);
  gpu.custom_allreduce.clear();
  EXPECT_DOUBLE_EQ(CostModel(m, gpu, 2, custom).iteration(shape).communication_s,
                   2 * layers * allreduce_time_s(gpu, message, 2));
}

TEST(EngineCost, ConcatenatedKvCacheRereadsAndRewritesTheContextEveryStep) {
  const ModelSpec m = resolve_model("llama-2-7b");
  const BatchShape shape = decodes(4, 999);  // 4 x 1000 tokens of context
  EngineProfile concat;
  concat.kv_cache_write = KvCacheWrite::concat;
  const HardwareProfile gpu = round_profile();  // hbm_efficiency 1
  const double extra = CostModel(m, gpu, 1, concat).iteration(shape).decode_attention_s -
                       CostModel(m, gpu).iteration(shape).decode_attention_s;
  // Read + write of 4000 tokens' K and V in every layer, at the HBM rate.
  EXPECT_NEAR(extra, 2.0 * 4000 * static_cast<double>(m.kv_bytes_per_token()) / gpu.hbm_bytes_per_s, 1e-12);
}

}  // namespace
}  // namespace batchsim
