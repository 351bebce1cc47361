// Configs and profiles from a hostile or careless hand: sizes that would overflow, numbers
// beyond a double, missing head_dim, non-finite and zero values, keys that are not names. Each
// is refused with one UserError naming the file and the key (or line); none reaches a cast or a
// product that could wrap.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::user_error_of;
using testing::write_text_file;

// A Llama-2-7B config with `extra` keys replacing or adding to it.
std::string llama_config(const std::string& extra) {
  return R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
    "max_position_embeddings": 4096)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string config_error(const std::string& name, const std::string& text) {
  const auto path = write_text_file(testing::scratch_dir("hostile_hf_" + name), name + ".json", text);
  return user_error_of([&] { load_hf_config(path); });
}

TEST(HostileConfig, EachSizeIsBoundedAndNamed) {
  // JSON allows keys to repeat; nlohmann keeps the last, so `extra` overrides.
  EXPECT_THAT(config_error("layers", llama_config(R"("num_hidden_layers": 100000)")),
              AllOf(HasSubstr("layers.json"), HasSubstr("'num_hidden_layers' must be an integer from 1 to 1024")));
  EXPECT_THAT(config_error("hidden", llama_config(R"("hidden_size": 2000000000)")),
              HasSubstr("'hidden_size' must be an integer from 1 to 262144"));
  EXPECT_THAT(config_error("unsigned", llama_config(R"("vocab_size": 18446744073709551615)")),
              HasSubstr("'vocab_size' must be an integer from 1 to"));
  EXPECT_THAT(config_error("ffn", llama_config(R"("intermediate_size": -5)")),
              HasSubstr("'intermediate_size' must be an integer from 1 to"));
  EXPECT_THAT(config_error("experts", llama_config(R"("num_local_experts": 1000000, "num_experts_per_tok": 2)")),
              HasSubstr("'num_local_experts' must be an integer from 1 to 65536"));
}

// Every size in range, their product not: the weights would wrap int64 to a small positive
// number and the model would "fit" on any GPU. The range check computes in floating point.
TEST(HostileConfig, SizesWhoseProductOverflowsAreRefused) {
  const std::string huge = llama_config(
      R"("num_hidden_layers": 1024, "hidden_size": 262144, "intermediate_size": 4194304,
         "num_local_experts": 65536, "num_experts_per_tok": 2)");
  EXPECT_THAT(config_error("product", huge),
              AllOf(HasSubstr("product.json: the sizes give"), HasSubstr("parameters, more than any real model"),
                    HasSubstr("num_hidden_layers (1024)")));
  // The largest dense model that passes still has exact, positive sizes.
  const auto ok = write_text_file(testing::scratch_dir("hostile_hf_ok"), "big.json",
                                  llama_config(R"("num_hidden_layers": 1024, "hidden_size": 65536,
                                               "num_attention_heads": 512, "intermediate_size": 262144)"));
  const ModelSpec m = load_hf_config(ok);
  EXPECT_GT(m.weight_bytes(), 0);
  EXPECT_EQ(m.total_params(),
            int64_t{1024} * (int64_t{4} * 65536 * 65536 + int64_t{3} * 65536 * 262144) + int64_t{2} * 32000 * 65536);
  EXPECT_GT(m.kv_bytes_per_token(), 0);
}

TEST(HostileConfig, NumbersBeyondADoubleAndMissingHeadDimAreNamed) {
  EXPECT_THAT(config_error("e400", llama_config(R"("rope_theta": 1e400)")),
              AllOf(HasSubstr("e400.json: not valid JSON"), HasSubstr("1e400")));
  // hidden_size < num_attention_heads and no head_dim: head_dim would be 0, every size 0.
  EXPECT_THAT(
      config_error("headdim", llama_config(R"("hidden_size": 16, "num_attention_heads": 32)")),
      AllOf(HasSubstr("headdim.json: hidden_size 16 is smaller than num_attention_heads 32"), HasSubstr("'head_dim'")));
  const auto with_dim = write_text_file(testing::scratch_dir("hostile_hf_dim"), "dim.json",
                                        llama_config(R"("hidden_size": 16, "num_attention_heads": 32, "head_dim": 8)"));
  EXPECT_EQ(load_hf_config(with_dim).head_dim, 8);
}

std::string profile_error(const std::string& name, const std::string& yaml) {
  const auto path = write_text_file(testing::scratch_dir("hostile_profile_" + name), name + ".yaml", yaml);
  return user_error_of([&] { load_hardware_profile(path); });
}

TEST(HostileProfile, OutOfRangeNonFiniteAndZeroValuesAreNamed) {
  // memory_bytes 1e30 is out of range, not "missing" (it was cast to int64 first once).
  EXPECT_THAT(
      profile_error("mem", "base: a100-80gb\nmemory_bytes: 1e30\n"),
      AllOf(HasSubstr("mem.yaml:2: key 'memory_bytes' must be a whole number from 1 to"), HasSubstr("got 1e30")));
  EXPECT_THAT(profile_error("frac", "base: a100-80gb\nmemory_bytes: 1.5\n"),
              HasSubstr("'memory_bytes' must be a whole number"));
  EXPECT_THAT(profile_error("nan", "base: a100-80gb\nhbm_bytes_per_s: .nan\n"),
              AllOf(HasSubstr("nan.yaml:2: key 'hbm_bytes_per_s' must be a finite number"), HasSubstr(".nan")));
  EXPECT_THAT(profile_error("inf", "base: a100-80gb\npeak_flops: .inf\n"),
              HasSubstr("'peak_flops' must be a finite number"));
  EXPECT_THAT(profile_error("neg", "base: a100-80gb\nkernel_launch_s: -1e-6\n"),
              HasSubstr("'kernel_launch_s' must be a finite number from 0"));
  // A zero-bandwidth PCIe link made swap preemption free (a shorter makespan than a real link).
  EXPECT_THAT(profile_error("pcie", "base: a100-80gb\npcie_bytes_per_s: 0\n"),
              HasSubstr("key 'pcie_bytes_per_s' must be > 0"));
  EXPECT_THAT(profile_error("link", "base: a100-80gb\ninterconnect_bytes_per_s: 0\n"),
              HasSubstr("key 'interconnect_bytes_per_s' must be > 0"));
  EXPECT_THAT(profile_error("sm", "base: a100-80gb\nsm_count: 10.5\n"), HasSubstr("'sm_count' must be a whole number"));
  EXPECT_THAT(profile_error("tp", "base: a100-80gb\nallreduce: [{tp: 1e30, latency_s: 1e-5, bytes_per_s: 1e11}]\n"),
              HasSubstr("'allreduce.tp' must be a whole number from 2 to 4096"));
}

TEST(HostileProfile, KeysThatAreNotNamesAreRefusedByLine) {
  EXPECT_THAT(profile_error("seqkey", "base: a100-80gb\n[a, b]: 3\n"),
              HasSubstr("seqkey.yaml:2: a key must be a name, got a list"));
  EXPECT_THAT(profile_error("mapkey", "base: a100-80gb\n? {x: 1}\n: 3\n"),
              HasSubstr("mapkey.yaml:2: a key must be a name, got a map"));
  EXPECT_THAT(profile_error("arkey", "base: a100-80gb\nallreduce:\n  - {[1]: 2}\n"),
              HasSubstr("a key must be a name, got a list"));
}

// A measurement table's integers are range-checked before any conversion (1e30 tokens was cast
// to int64, undefined behaviour), and non-finite times are refused, by file and line.
TEST(HostileMeasurements, NumbersOutOfRangeAreNamedByLine) {
  const auto dir = testing::scratch_dir("hostile_measurements");
  const std::string header =
      "time_stats.attn_pre_proj.median,n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,"
      "num_tokens,num_tensor_parallel_workers\n";
  write_text_file(dir, "mlp.csv",
                  header + "0.5,32,8,4096,14336,128256,True,64,2\n0.5,32,8,4096,14336,128256,True,1e30,2\n");
  EXPECT_THAT(user_error_of([&] { read_measurements(dir / "mlp.csv"); }),
              AllOf(HasSubstr("mlp.csv:3: column 'num_tokens': 1e30 is not a whole number from 1 to")));
  write_text_file(dir, "mlp.csv", header + "inf,32,8,4096,14336,128256,True,64,2\n");
  EXPECT_THAT(user_error_of([&] { read_measurements(dir / "mlp.csv"); }),
              HasSubstr("mlp.csv:2: column 'time_stats.attn_pre_proj.median': 'inf' is not a finite number"));
  write_text_file(dir, "mlp.csv", header + "0.5,0,8,4096,14336,128256,True,64,2\n");
  EXPECT_THAT(user_error_of([&] { read_measurements(dir / "mlp.csv"); }),
              HasSubstr("column 'n_head': 0 is not a whole number"));
}

}  // namespace
}  // namespace batchsim
