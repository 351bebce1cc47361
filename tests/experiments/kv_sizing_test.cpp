// How each engine sizes its KV cache: vLLM's --gpu-memory-utilization (hwmodel/cost_model.h),
// SGLang's mem_fraction_static (policies/sglang_policy.h), through a whole run.
#include <string>

#include <gtest/gtest.h>

#include "experiments/run_config.h"
#include "experiments/runner.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "test_support.h"

namespace batchsim {
namespace {

// The sglang policy's KV pool is what its mem_fraction_static leaves after the weights and the
// CUDA context, whatever --gpu-memory-utilization says; --num-gpu-blocks still sizes it directly.
TEST(SglangMemory, TheKvPoolIsWhatMemFractionStaticLeavesAfterTheWeights) {
  RunConfig c = default_run_config();
  c.model = "qwen3-32b";
  c.gpu = "h100-sxm";
  c.policy = "sglang";
  c.workload.num_requests = 4;
  const auto capacity = [](const RunConfig& config) { return run_simulation(config).result.kv_capacity_tokens; };
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

}  // namespace
}  // namespace batchsim
