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

using ::testing::AllOf;
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

// A disk tier written through beside the host tier keeps what the host dropped for longer: more
// hits, a shorter TTFT, and the blocks only it held read at the profile's local NVMe rate
// (h100-sxm: 7 GB/s per GPU, slower than its 64 GB/s PCIe, so the disk sets the pace).
TEST(KvOffloadCli, ADiskTierKeepsWhatTheHostTierDropped) {
  const nlohmann::json cpu200 = run_summary("cpu200", mooncake("cpu=200"));
  const nlohmann::json disk = run_summary("cpu200-disk2000", mooncake("cpu=200,disk=2000"));
  EXPECT_FALSE(cpu200["kv_offload"].contains("disk"));
  const nlohmann::json& d = disk["kv_offload"]["disk"];
  EXPECT_EQ(d["capacity_tokens"].get<int64_t>(), 2000LL * 1024 * 1024 * 1024 / 131072);
  EXPECT_GT(hit_rate(disk), hit_rate(cpu200) + 0.1);
  EXPECT_LT(mean_ttft(disk), mean_ttft(cpu200));
  const auto disk_hits = d["hit_tokens"].get<int64_t>();
  const auto host_hits = disk["kv_offload"]["cpu"]["hit_tokens"].get<int64_t>();
  EXPECT_GT(disk_hits, 0);
  // The host tier still serves what it holds; the disk only what the host no longer has.
  EXPECT_GT(host_hits, 0);
  EXPECT_DOUBLE_EQ(d["load_bytes"].get<double>(), static_cast<double>(disk_hits) * 131072);
  EXPECT_NEAR(d["load_s"].get<double>(), d["load_bytes"].get<double>() / 7e9, 0.01 * d["load_s"].get<double>());
  // Every block the host stored was written to disk too (a hit from the host is stored again).
  EXPECT_GE(d["stored_tokens"].get<int64_t>(), disk["kv_offload"]["cpu"]["stored_tokens"].get<int64_t>() -
                                                   disk["kv_offload"]["cpu"]["evicted_tokens"].get<int64_t>());
  EXPECT_EQ(disk["requests"], cpu200["requests"]);
}

TEST(KvOffloadCli, UnsupportedRunsAreRefusedByName) {
  // A disk tier needs the host tier it is written through, a size, and a profile that knows its disk.
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "disk=100"}),
              HasSubstr("written through host memory"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "cpu=10,disk=0"}),
              HasSubstr("the disk tier needs a size above 0 GiB"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--kv-offload", "cpu=10,cpu=20"}),
              HasSubstr("the cpu tier is given twice"));
  std::vector<std::string> on_l40s = mooncake("cpu=10,disk=100");
  on_l40s.insert(on_l40s.begin(), "run");
  for (size_t i = 0; i + 1 < on_l40s.size(); ++i) {
    if (on_l40s[i] == "--gpu") on_l40s[i + 1] = "l40s";
  }
  EXPECT_THAT(cli_error_of(on_l40s), AllOf(HasSubstr("'l40s'"), HasSubstr("disk_bytes_per_s")));
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
