// --kv-offload end to end (issue 46 item 2): a host tier under the prefix cache on the Mooncake
// conversation replay, its figures in summary.json, and the runs it is refused for.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;
using ::testing::HasSubstr;

nlohmann::json run_summary(const std::string& name, std::vector<std::string> args) {
  return testing::run_summary("kv-offload-" + name, std::move(args));
}

// Llama-3.1-8B on an H100 with 3,000 KV blocks (48k tokens) replaying Mooncake's conversations
// at a quarter of their rate (the full rate queues for an hour whatever the cache holds), the
// first 4,000 requests.
std::vector<std::string> mooncake(const std::string& offload) {
  std::vector<std::string> a = {"--trace",
                                (testing::traces_dir() / "mooncake-fast25" / "conversation.jsonl.gz").string(),
                                "--trace-speedup",
                                "0.25",
                                "--num-requests",
                                "4000",
                                "--model",
                                "llama-3.1-8b",
                                "--gpu",
                                "h100-sxm",
                                "--policy",
                                "vllm",
                                "--num-gpu-blocks",
                                "3000"};
  if (!offload.empty()) a.insert(a.end(), {"--kv-offload", offload});
  return a;
}

double mean_ttft(const nlohmann::json& s) { return s["latency"]["ttft_s"]["mean"].get<double>(); }
double hit_rate(const nlohmann::json& s) { return s["prefix_cache"]["hit_rate"].get<double>(); }

TEST(KvOffloadCli, AHostTierRaisesPrefixHitsAndLowersTtft) {
  const nlohmann::json gpu = run_summary("gpu", mooncake(""));
  const nlohmann::json cpu200 = run_summary("cpu200", mooncake("cpu=200"));
  const nlohmann::json cpu1000 = run_summary("cpu1000", mooncake("cpu=1000"));
  EXPECT_FALSE(gpu.contains("kv_offload"));
  // 200 GiB hold 1.6 M tokens of Llama-3.1-8B's 128 KiB each.
  const nlohmann::json& t = cpu200["kv_offload"]["cpu"];
  EXPECT_EQ(t["capacity_tokens"].get<int64_t>(), 200LL * 1024 * 1024 * 1024 / 131072);
  EXPECT_GT(hit_rate(cpu200), hit_rate(gpu) + 0.03);
  EXPECT_LT(mean_ttft(cpu200), mean_ttft(gpu));
  EXPECT_GT(hit_rate(cpu1000), hit_rate(cpu200) + 0.1);
  EXPECT_LT(mean_ttft(cpu1000), 0.8 * mean_ttft(gpu));
  // The figures add up: every hit was stored, each hit token's KV crossed PCIe.
  const auto hits = t["hit_tokens"].get<int64_t>();
  EXPECT_GT(hits, 0);
  EXPECT_LE(hits, t["stored_tokens"].get<int64_t>());
  EXPECT_GT(t["evicted_tokens"].get<int64_t>(), 0);  // 200 GiB is far from the whole replay
  EXPECT_DOUBLE_EQ(t["load_bytes"].get<double>(), static_cast<double>(hits) * 131072);
  EXPECT_NEAR(t["load_s"].get<double>(), t["load_bytes"].get<double>() / 64e9, 0.01 * t["load_s"].get<double>());
  EXPECT_EQ(cpu200["requests"], gpu["requests"]);
}

TEST(KvOffloadCli, UnsupportedRunsAreRefusedByName) {
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "cpu=10,disk=100"}),
              HasSubstr("a disk tier is not supported yet"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "gpu=10"}), HasSubstr("cpu=GIB"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "cpu=0"}), HasSubstr("above 0 GiB"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "cpu=lots"}), HasSubstr("--kv-offload cpu"));
  EXPECT_THAT(cli_error_of({"run", "--policy", "sglang", "--num-requests", "5", "--kv-offload", "cpu=10"}),
              HasSubstr("--kv-offload with --policy sglang"));
  // Nothing to keep: no prefix caching, or a workload without prompt-block hashes.
  EXPECT_THAT(cli_error_of({"run", "--policy", "continuous", "--num-requests", "5", "--kv-offload", "cpu=10"}),
              HasSubstr("prefix_caching=true"));
  EXPECT_THAT(cli_error_of({"run", "--policy", "vllm", "--num-requests", "5", "--kv-offload", "cpu=10"}),
              HasSubstr("no prompt-block hashes"));
}

}  // namespace
}  // namespace batchsim
