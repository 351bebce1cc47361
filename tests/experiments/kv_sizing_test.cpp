// How each engine sizes its KV cache: vLLM's --gpu-memory-utilization after a profile run of its
// budget (hwmodel/cost_model.h, policies/continuous/continuous_policy.h), SGLang's mem_fraction_static
// (policies/sglang/sglang_policy.h), TensorRT-LLM's free_gpu_memory_fraction
// (policies/continuous/continuous_policy.h), through a whole run.
#include <string>

#include <gtest/gtest.h>

#include "experiments/run/run_config.h"
#include "experiments/run/runner.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "test_support.h"

namespace batchsim {
namespace {

// A short run of `policy` serving `model` on `gpu`, and the KV capacity a run reports.
RunConfig short_run(const std::string& model, const std::string& gpu, const std::string& policy) {
  RunConfig c = default_run_config();
  c.model = model;
  c.gpu = gpu;
  c.policy = policy;
  c.workload.num_requests = 4;
  return c;
}
int64_t capacity(const RunConfig& config) { return run_simulation(config).result.kv_capacity_tokens; }

// vLLM's pool is --gpu-memory-utilization's share of the GPU less the weights and the peak of a
// profile run of its own budget: max_num_batched_tokens over min(that, max_num_seqs) sampled
// requests. A larger budget leaves less KV; so do more sampled rows.
TEST(VllmMemory, TheKvPoolIsTheShareLeftAfterAProfileRunOfTheBudget) {
  const RunConfig c = short_run("llama-3-8b", "h100-sxm", "vllm");
  const CostModel cm(resolve_model(c.model), resolve_gpu(c.gpu));
  // The preset on an H100 behind the API server: 8192 tokens, 1024 sequences; the run says so.
  EXPECT_EQ(capacity(c), cm.kv_capacity_tokens(0.9, 8192, 1024));
  EXPECT_EQ(run_simulation(c).result.kv_capacity_rule,
            "--gpu-memory-utilization 0.9 after a profile run of 8192 tokens in 1024 sequences");
  EXPECT_LT(capacity(c), cm.kv_capacity_tokens(0.9, 8192, 256));  // 768 more rows of 128k logits
  RunConfig large = c;
  large.policy_opts["max_num_batched_tokens"] = "32768";
  EXPECT_EQ(capacity(large), cm.kv_capacity_tokens(0.9, 32768, 1024));
  EXPECT_LT(capacity(large), capacity(c));
  // aiconfigurator's deployment of 8 clients of 4096-token prompts: 5604 tokens, 8 sequences.
  RunConfig deployed = c;
  deployed.policy_opts = {{"max_num_batched_tokens", "5604"}, {"max_num_seqs", "8"}};
  EXPECT_EQ(capacity(deployed), cm.kv_capacity_tokens(0.9, 5604, 8));
  EXPECT_GT(capacity(deployed), capacity(c));
  RunConfig other_utilization = c;
  other_utilization.gpu_memory_utilization = 0.5;
  EXPECT_EQ(capacity(other_utilization), cm.kv_capacity_tokens(0.5, 8192, 1024));
  // vLLM v0 without chunked prefill: a budget of max(max_model_len, 2048) tokens in 256
  // sequences (Llama-3-8B: 8192).
  EXPECT_EQ(capacity(short_run("llama-3-8b", "h100-sxm", "vllm-v0")), cm.kv_capacity_tokens(0.9, 8192, 256));
  // TGI's warmup computes the logits of every prompt token of its prefill budget.
  // (The preset's max_batch_prefill_tokens: 4096.)
  EXPECT_EQ(capacity(short_run("llama-3-8b", "h100-sxm", "tgi")), cm.kv_capacity_tokens(0.9, 4096, 4096));
  // A policy that does not say what its largest step is (the static batchers, a Python policy
  // without profile_step) gets the default profile run, and the rule says which.
  const RunConfig static_run = short_run("llama-3-8b", "h100-sxm", "static");
  EXPECT_EQ(capacity(static_run),
            cm.kv_capacity_tokens(0.9, CostModel::kDefaultActivationTokens, CostModel::kSamplerRows));
  EXPECT_EQ(run_simulation(static_run).result.kv_capacity_rule,
            "--gpu-memory-utilization 0.9 after a profile run of 8192 tokens in 256 sequences");
  // --num-gpu-blocks still sizes it directly.
  RunConfig blocks = c;
  blocks.num_gpu_blocks = 100;
  EXPECT_EQ(capacity(blocks), 1600);
  EXPECT_EQ(run_simulation(blocks).result.kv_capacity_rule, "--num-gpu-blocks 100");
}

// The sglang policy's KV pool is what its mem_fraction_static leaves after the weights and the
// CUDA context, whatever --gpu-memory-utilization says; --num-gpu-blocks still sizes it directly.
TEST(SglangMemory, TheKvPoolIsWhatMemFractionStaticLeavesAfterTheWeights) {
  const RunConfig c = short_run("qwen3-32b", "h100-sxm", "sglang");
  const ModelSpec model = resolve_model(c.model);
  const HardwareProfile gpu = resolve_gpu(c.gpu);
  const double per_token = static_cast<double>(model.kv_bytes_per_token());
  const auto left = [&](double fraction) {
    return static_cast<int64_t>((static_cast<double>(gpu.memory_bytes) * fraction -
                                 static_cast<double>(model.weight_bytes()) - CostModel::kRuntimeReserveBytes) /
                                per_token);
  };
  EXPECT_EQ(capacity(c), left(0.835));
  RunConfig other_utilization = c;
  other_utilization.gpu_memory_utilization = 0.95;
  EXPECT_EQ(capacity(other_utilization), left(0.835));
  RunConfig given = c;
  given.policy_opts["mem_fraction_static"] = "0.9";
  EXPECT_EQ(capacity(given), left(0.9));
  EXPECT_GT(left(0.9), left(0.835));
  RunConfig blocks = c;
  blocks.num_gpu_blocks = 100;  // 100 x 16 tokens
  EXPECT_EQ(capacity(blocks), 1600);
  // Weights that do not fit name the fraction that left no room.
  RunConfig tight = c;
  tight.policy_opts["mem_fraction_static"] = "0.5";
  const std::string why = testing::user_error_of([&] { run_simulation(tight); });
  EXPECT_NE(why.find("mem_fraction_static 0.5"), std::string::npos) << why;
  RunConfig out_of_range = c;
  out_of_range.policy_opts["mem_fraction_static"] = "1.5";
  const std::string bad = testing::user_error_of([&] { run_simulation(out_of_range); });
  EXPECT_NE(bad.find("mem_fraction_static"), std::string::npos) << bad;
}

// The sglang policy runs decode batches as CUDA graphs up to its cuda_graph_max_bs (SGLang's
// rule: 32 sequences on a 40 GB A100 at TP 1), not the engine profile's 160: decode steps of 33
// to 64 sequences launch every kernel unless the option raises the cap, which also reserves
// more memory for graphs. (An engine whose launches cost 1 ms each makes the launches show.)
// An engine without graphs has none to resize.
TEST(SglangCudaGraphs, TheServersCapReplacesTheEngineProfiles) {
  const auto dir = testing::scratch_dir("sglang-cuda-graphs");
  const auto slow_launches = testing::write_text_file(
      dir, "slow-launches.yaml",
      "base: sglang\nname: slow-launches\ndescription: sglang with 1 ms launches\n"
      "launch: {per_kernel_s: 0.001, kernels_per_layer: 10, kernels_per_iteration: 6}\nsources: a test\n");
  RunConfig c = short_run("opt-13b", "a100-40gb", "sglang");
  c.engine = slow_launches.string();
  c.workload.num_requests = 64;
  c.workload.arrival = "offline";
  c.workload.prompt_len = "fixed:64";
  c.workload.output_len = "fixed:64";
  const auto makespan = [](const RunConfig& config) { return run_simulation(config).result.summary.makespan_s; };
  RunConfig raised = c;
  raised.policy_opts["cuda_graph_max_bs"] = "64";
  RunConfig engine_cap = c;
  engine_cap.policy_opts["cuda_graph_max_bs"] = "160";  // the engine profile's own
  EXPECT_GT(makespan(c), 5 * makespan(raised));         // 63 decode steps of 400 launches
  EXPECT_EQ(makespan(raised), makespan(engine_cap));    // no batch above 64 either way
  EXPECT_GT(capacity(c), capacity(raised));             // 2 x (64 - 32) MiB more for graphs
  RunConfig bare = c;
  bare.engine = "bare";
  RunConfig bare_raised = raised;
  bare_raised.engine = "bare";
  EXPECT_EQ(makespan(bare), makespan(bare_raised));
}

// The trtllm preset's KV pool is free_gpu_memory_fraction (0.9, TensorRT-LLM's default) of the
// memory its profile run of max_num_tokens leaves after the weights, whatever
// --gpu-memory-utilization says; "none" gives --gpu-memory-utilization's rule back.
TEST(TrtllmMemory, TheKvPoolIsAShareOfWhatTheProfileRunLeaves) {
  const RunConfig c = short_run("llama-3-8b", "h100-sxm", "trtllm");
  const CostModel cm(resolve_model(c.model), resolve_gpu(c.gpu));
  const double per_token = static_cast<double>(cm.model().kv_bytes_per_token());
  // Its dummy requests of up to max_seq_len (8192 for Llama-3-8B) tokens sample one row each.
  const auto share_of_free = [&](double fraction, int64_t profile_tokens) {
    const double free = static_cast<double>(cm.gpu().memory_bytes) - static_cast<double>(cm.model().weight_bytes()) -
                        cm.activation_reserve_bytes(profile_tokens, 1);
    return static_cast<int64_t>(free * fraction / per_token);
  };
  EXPECT_EQ(capacity(c), share_of_free(0.9, 8192));  // the preset's max_num_tokens 8192
  RunConfig other_utilization = c;
  other_utilization.gpu_memory_utilization = 0.5;
  EXPECT_EQ(capacity(other_utilization), share_of_free(0.9, 8192));
  // aiconfigurator's deployments: 0.8, a smaller profile run.
  RunConfig deployed = c;
  deployed.policy_opts = {{"free_gpu_memory_fraction", "0.8"}, {"max_num_batched_tokens", "2560"}};
  EXPECT_EQ(capacity(deployed), share_of_free(0.8, 2560));
  // Not vLLM's rule, which takes its share of the whole GPU: 0.9 x 80 GiB - 16 GiB - activations
  // is less than 0.9 x (80 GiB - 16 GiB - activations). (The preset's 2048 sequences sample
  // 2048 rows in vLLM's profile run.)
  RunConfig vllm_rule = c;
  vllm_rule.policy_opts["free_gpu_memory_fraction"] = "none";
  EXPECT_EQ(capacity(vllm_rule), cm.kv_capacity_tokens(0.9, 8192, 2048));
  EXPECT_LT(capacity(vllm_rule), capacity(c));
  RunConfig out_of_range = c;
  out_of_range.policy_opts["free_gpu_memory_fraction"] = "1.5";
  const std::string bad = testing::user_error_of([&] { run_simulation(out_of_range); });
  EXPECT_NE(bad.find("free_gpu_memory_fraction"), std::string::npos) << bad;
  // TensorRT-LLM's option belongs to its base; vLLM's chunked scheduler refuses it.
  RunConfig chunked = c;
  chunked.policy = "vllm";
  chunked.policy_opts["free_gpu_memory_fraction"] = "0.9";
  const std::string refused = testing::user_error_of([&] { run_simulation(chunked); });
  EXPECT_NE(refused.find("free_gpu_memory_fraction"), std::string::npos) << refused;
  // Weights that do not fit name the rule that left no room.
  RunConfig too_big = c;
  too_big.model = "llama-3-70b";
  const std::string why = testing::user_error_of([&] { run_simulation(too_big); });
  EXPECT_NE(why.find("free_gpu_memory_fraction 0.9"), std::string::npos) << why;
}

}  // namespace
}  // namespace batchsim
