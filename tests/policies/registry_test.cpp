// The policy registry: presets mirror the engines of issue 3 item 5, user options override a
// preset, and an unknown option or a bad value is a UserError naming it.
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "hwmodel/cost_model.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "policies/continuous/continuous_policy.h"
#include "policies/registry.h"
#include "policies/static/static_policy.h"
#include "policy_test_rig.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

// The config a continuous preset resolves to, once attached to a run (the default budget
// depends on max_model_len).
const ContinuousPolicy& as_continuous(const Policy& p) {
  const auto* c = dynamic_cast<const ContinuousPolicy*>(&p);
  EXPECT_NE(c, nullptr) << p.name();
  return *c;
}

TEST(Registry, PresetsMirrorTheirEngines) {
  {
    auto p = policy("hf-static");
    const auto& c = dynamic_cast<const StaticPolicy&>(*p).config();
    EXPECT_TRUE(c.pad);
    EXPECT_FALSE(c.release_per_request);
  }
  {
    auto p = policy("ft-static");
    const auto& c = dynamic_cast<const StaticPolicy&>(*p).config();
    EXPECT_FALSE(c.pad);
    EXPECT_TRUE(c.release_per_request);
  }
  {
    auto p = policy("orca");
    const auto& c = as_continuous(*p).config();
    EXPECT_FALSE(c.paged);
    EXPECT_TRUE(c.reserve_max_model_len);
    EXPECT_TRUE(c.mixed_prefill);
    EXPECT_FALSE(c.chunked);
  }
  {
    // TGI v3 on a model that supports chunking (backends/v3/src/backend.rs).
    auto p = policy("tgi");
    const auto& c = as_continuous(*p).config();
    EXPECT_FALSE(c.paged);  // the queue allocates input + max_new_tokens at admission
    EXPECT_FALSE(c.reserve_max_model_len);
    EXPECT_FALSE(c.reserve_blocks_to_completion);
    EXPECT_TRUE(c.chunked);
    EXPECT_EQ(c.max_num_batched_tokens, 4096);
    EXPECT_EQ(c.max_num_seqs, 1 << 20);  // max_batch_size: none
    EXPECT_EQ(c.max_waiting_tokens, 0);  // ignored with chunking
    EXPECT_TRUE(c.decode_after_admission);
  }
  {
    auto p = policy("trtllm");
    const auto& c = as_continuous(*p).config();
    EXPECT_FALSE(c.paged);  // GUARANTEED_NO_EVICT: blocks to completion reserved
    EXPECT_TRUE(c.reserve_blocks_to_completion);
    EXPECT_EQ(c.block_size, 32);
    EXPECT_EQ(c.max_num_batched_tokens, 8192);
    EXPECT_EQ(c.max_num_seqs, 2048);
    EXPECT_FALSE(c.chunked);
    EXPECT_TRUE(c.mixed_prefill);
    EXPECT_FALSE(c.decode_after_admission);
    auto mu = policy("trtllm", {{"capacity_scheduler", "max_utilization"}, {"enable_chunked_context", "true"}});
    const auto& m = as_continuous(*mu).config();
    EXPECT_TRUE(m.paged);
    EXPECT_FALSE(m.reserve_blocks_to_completion);
    EXPECT_TRUE(m.admit_full_prompt);
    EXPECT_TRUE(m.chunked);
    EXPECT_TRUE(m.generation_first);
    EXPECT_EQ(m.chunk_unit, 32);
    EXPECT_EQ(policy_engine("trtllm"), "trtllm");
  }
  {
    auto p = policy("tgi-router");
    const auto& c = as_continuous(*p).config();
    EXPECT_FALSE(c.paged);  // admission counts prompt + max_new_tokens of every request
    EXPECT_FALSE(c.reserve_max_model_len);
    EXPECT_FALSE(c.mixed_prefill);  // a new batch is prefilled on its own
    EXPECT_FALSE(c.chunked);
    EXPECT_EQ(c.max_num_batched_tokens, 4096);
    EXPECT_EQ(c.max_waiting_tokens, 20);
    EXPECT_DOUBLE_EQ(c.waiting_served_ratio, 1.2);
    EXPECT_TRUE(c.decode_after_admission);
  }
  {
    auto p = policy("vllm-v0");
    const auto& c = as_continuous(*p).config();
    EXPECT_TRUE(c.paged);
    EXPECT_FALSE(c.mixed_prefill);
    EXPECT_FALSE(c.chunked);
    EXPECT_FALSE(c.swap);
    EXPECT_DOUBLE_EQ(c.watermark, 0.01);
    EXPECT_EQ(c.max_num_seqs, 256);
    EXPECT_EQ(c.max_num_batched_tokens, 0);  // max(max_model_len, 2048), resolved at attach
    EXPECT_EQ(c.block_size, 16);
  }
  {
    auto p = policy("vllm");
    const auto& c = as_continuous(*p).config();
    EXPECT_TRUE(c.chunked);
    // Budget and sequence cap come from the GPU at attach (VllmTakesItsBatchDefaultsFromTheGpu).
    EXPECT_EQ(c.usage_context, ContinuousPolicyConfig::UsageContext::api_server);
    EXPECT_FALSE(c.max_num_batched_tokens_set);
    EXPECT_FALSE(c.max_num_seqs_set);
    EXPECT_FALSE(c.swap);
    EXPECT_EQ(c.max_num_partial_prefills, 0);  // v1 never reads it: no bound
    EXPECT_EQ(c.long_prefill_token_threshold, 0);
    EXPECT_TRUE(c.admit_full_prompt);  // scheduler_reserve_full_isl=True
  }
  {
    auto p = policy("sarathi");
    const auto& c = as_continuous(*p).config();
    EXPECT_TRUE(c.chunked);
    EXPECT_EQ(c.max_num_batched_tokens, 512);
    EXPECT_EQ(c.max_num_partial_prefills, 0);
    EXPECT_TRUE(c.admit_full_prompt);  // can_allocate on the whole prompt
  }
  {
    // The base keeps admission by first chunk; the old vllm behaviour is one option away.
    EXPECT_FALSE(as_continuous(*policy("chunked-prefill")).config().admit_full_prompt);
    EXPECT_FALSE(as_continuous(*policy("vllm", {{"admission", "first_chunk"}})).config().admit_full_prompt);
    EXPECT_EQ(as_continuous(*policy("vllm", {{"max_num_partial_prefills", "1"}})).config().max_num_partial_prefills, 1);
  }
}

TEST(Registry, TheDefaultBudgetWithoutChunkingIsMaxOfContextAnd2048) {
  // vLLM v0 SchedulerConfig: max_num_batched_tokens = max(max_model_len, 2048).
  for (int context : {1024, 4096}) {
    RigOptions o;
    o.max_context_tokens = context;
    const CostModel cm = rig_cost_model(o);
    auto p = policy("vllm-v0");
    run_recorded(*p, make_workload({{0, 4, 2}}), cm);
    EXPECT_EQ(as_continuous(*p).token_budget(), std::max(context, 2048));
  }
}

TEST(Registry, AUserOptionOverridesThePreset) {
  EXPECT_TRUE(as_continuous(*policy("vllm-v0", {{"prefill", "mixed"}})).config().mixed_prefill);
  EXPECT_DOUBLE_EQ(as_continuous(*policy("vllm-v0", {{"watermark", "0"}})).config().watermark, 0.0);
  EXPECT_EQ(as_continuous(*policy("vllm", {{"max_num_batched_tokens", "8192"}})).config().max_num_batched_tokens, 8192);
  EXPECT_TRUE(as_continuous(*policy("orca", {{"kv", "paged"}})).config().paged);
  auto hf = policy("hf-static", {{"pad", "false"}, {"batch_size", "16"}});
  EXPECT_FALSE(dynamic_cast<const StaticPolicy&>(*hf).config().pad);
  EXPECT_EQ(dynamic_cast<const StaticPolicy&>(*hf).config().batch_size, 16);
}

TEST(Registry, AnUnknownOptionIsAnErrorNamingIt) {
  std::string msg = user_error_of([] { policy("tgi", {{"bogus_knob", "1"}}); });
  EXPECT_NE(msg.find("bogus_knob"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tgi"), std::string::npos) << msg;
  // Chunking options belong to the chunked schedulers only.
  msg = user_error_of([] { policy("vllm-v0", {{"long_prefill_token_threshold", "64"}}); });
  EXPECT_NE(msg.find("long_prefill_token_threshold"), std::string::npos) << msg;
  // Without chunking admission always needs the whole prefill's room: there is no choice.
  msg = user_error_of([] { policy("continuous", {{"admission", "first_chunk"}}); });
  EXPECT_NE(msg.find("admission"), std::string::npos) << msg;
  msg = user_error_of([] { policy("vllm", {{"admission", "whole"}}); });
  EXPECT_NE(msg.find("full_prompt"), std::string::npos) << msg;
  msg = user_error_of([] { policy("vllm", {{"prefill", "exclusive"}}); });
  EXPECT_NE(msg.find("prefill"), std::string::npos) << msg;
  msg = user_error_of([] { policy("hf-static", {{"max_num_seqs", "4"}}); });
  EXPECT_NE(msg.find("max_num_seqs"), std::string::npos) << msg;
}

TEST(Registry, OptionsOfTheOtherKvManagerAreRefused) {
  std::string msg = user_error_of([] { policy("continuous", {{"reserve_to", "max_model_len"}}); });
  EXPECT_NE(msg.find("reserve_to=max_model_len"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kv=reserve"), std::string::npos) << msg;
  msg = user_error_of([] { policy("orca", {{"block_size", "32"}}); });
  EXPECT_NE(msg.find("block_size=32"), std::string::npos) << msg;
  msg = user_error_of([] { policy("continuous", {{"kv", "reserve"}, {"watermark", "0.01"}}); });
  EXPECT_NE(msg.find("watermark=0.01"), std::string::npos) << msg;
  // A preset's own value for the other manager is not the user's mistake.
  EXPECT_TRUE(as_continuous(*policy("orca", {{"kv", "paged"}})).config().paged);
  EXPECT_FALSE(as_continuous(*policy("continuous", {{"kv", "reserve"}, {"reserve_to", "output"}})).config().paged);
}

TEST(Registry, ABadValueIsAnErrorNamingTheOption) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"kv", "contiguous"},
           {"watermark", "0.9"},
           {"max_num_seqs", "0"},
           {"preemption", "kill"},
           {"block_size", "x"},
           // from_chars reads "nan" as a number; NaN compares false with both bounds.
           {"watermark", "nan"},
           {"max_num_seqs", "nan"}}) {
    // Copies: clang 14 cannot capture structured bindings (P1091, clang 16).
    const std::string msg = user_error_of([&, k = key, v = value] { policy("continuous", {{k, v}}); });
    EXPECT_NE(msg.find(key + "=" + value), std::string::npos) << msg;
  }
  std::string msg = user_error_of([] { policy("static", {{"release", "never"}}); });
  EXPECT_NE(msg.find("release=never"), std::string::npos) << msg;
  // A NaN timeout would reach SimTime::from_seconds (llround of NaN is unspecified).
  msg = user_error_of([] { policy("static", {{"batch_timeout_s", "nan"}}); });
  EXPECT_NE(msg.find("batch_timeout_s=nan"), std::string::npos) << msg;
}

TEST(Registry, AnUnknownPolicyListsTheKnownOnes) {
  const std::string msg = user_error_of([] { policy("vllm-v2"); });
  EXPECT_NE(msg.find("vllm-v2"), std::string::npos) << msg;
  for (const PolicyInfo& info : registered_policies()) {
    EXPECT_NE(msg.find(info.name), std::string::npos) << msg;
  }
}

// Each base registers itself from its own folder (policies/common/policy_base.h): the registry
// lists the bases in the order of policies/CMakeLists.txt and the policies by their rank, the
// order `batchsim list policies` has always printed.
TEST(Registry, BasesRegisterThemselvesAndListInOrder) {
  EXPECT_EQ(policy_bases(),
            (std::vector<std::string>{"static", "continuous", "chunked-prefill", "sglang", "example-sjf"}));
  std::vector<std::string> names;
  for (const PolicyInfo& p : registered_policies()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"static", "continuous", "chunked-prefill", "hf-static", "ft-static",
                                             "orca", "tgi", "tgi-router", "trtllm", "vllm-v0", "vllm", "vllm-v1-2025",
                                             "sarathi", "sglang", "example-sjf"}));
  for (const std::string& base : policy_bases()) EXPECT_FALSE(policy_option_docs(base).empty()) << base;
  EXPECT_THROW((void)policy_option_docs("no-such-base"), UserError);
  EXPECT_TRUE(policy_chunks_prefills("vllm", {}));
  EXPECT_TRUE(policy_chunks_prefills("sglang", {}));
  EXPECT_FALSE(policy_chunks_prefills("trtllm", {}));
  EXPECT_TRUE(policy_chunks_prefills("trtllm", {{"enable_chunked_context", "true"}}));
  EXPECT_FALSE(policy_chunks_prefills("static", {}));
}

// What the rest of batchsim asks of a base instead of its name (issue 47): each declares it, and
// a base that declares nothing (example-sjf) claims no feature.
TEST(Registry, BasesDeclareTheirTraits) {
  for (const char* base : {"continuous", "chunked-prefill"}) {
    EXPECT_TRUE(policy_base_traits(base).kv_offload) << base;
    EXPECT_TRUE(policy_base_traits(base).speculative_decoding) << base;
    EXPECT_FALSE(policy_base_traits(base).static_batching) << base;
    EXPECT_EQ(policy_base_traits(base).host_bytes_per_request, 734) << base;
  }
  for (const char* base : {"static", "sglang", "example-sjf"}) {
    EXPECT_FALSE(policy_base_traits(base).kv_offload) << base;
    EXPECT_FALSE(policy_base_traits(base).speculative_decoding) << base;
  }
  EXPECT_TRUE(policy_base_traits("static").static_batching);
  EXPECT_EQ(policy_base_traits("static").host_bytes_per_request, 1650);
  EXPECT_EQ(policy_base_traits("sglang").chunk_budget_option, "chunked_prefill_size");
  EXPECT_EQ(policy_base_traits("chunked-prefill").chunk_budget_option, "max_num_batched_tokens");
  const PolicyBaseTraits& sglang = policy_base_traits("sglang");
  ASSERT_TRUE(sglang.prefill_batches_pause_decodes);
  EXPECT_TRUE(sglang.prefill_batches_pause_decodes(PolicyOptions(std::map<std::string, std::string>{})));
  EXPECT_FALSE(sglang.prefill_batches_pause_decodes(
      PolicyOptions(std::map<std::string, std::string>{{"enable_mixed_chunk", "true"}})));
  EXPECT_FALSE(policy_base_traits("continuous").prefill_batches_pause_decodes);
  EXPECT_THROW((void)policy_base_traits("no-such-base"), UserError);
}

// The option schema is the parser: the getters apply its default and range, and name the
// option in their errors; a key the schema lacks is a programming error.
TEST(Registry, TheOptionSchemaParsesWithItsDefaultAndRange) {
  const PolicyOptionSchema s({int_option("n", "16", 1, 1024, "a count"), real_option("r", "0.5", 0.0, 1.0, "a ratio"),
                              bool_option("b", "true", "a switch"), choice_option("c", "x", {"x", "y"}, "a choice"),
                              int_option("a", "auto", 1, 8, "a count or auto")});
  const PolicyOptions none;
  EXPECT_EQ(s.get_int(none, "n"), 16);
  EXPECT_EQ(s.get_double(none, "r"), 0.5);
  EXPECT_TRUE(s.get_bool(none, "b"));
  EXPECT_EQ(s.get_choice(none, "c"), "x");
  EXPECT_EQ(s.get_int(none, "a", 0), 0);
  const PolicyOptions given(std::map<std::string, std::string>{{"n", "1024"}, {"c", "y"}, {"a", "auto"}});
  EXPECT_EQ(s.get_int(given, "n"), 1024);
  EXPECT_EQ(s.get_choice(given, "c"), "y");
  EXPECT_TRUE(s.is_word(given, "a", "auto"));
  EXPECT_NO_THROW(given.check_all_used("test"));
  std::string msg = user_error_of([&s] {
    (void)s.get_int(PolicyOptions(std::map<std::string, std::string>{{"n", "1025"}}), "n");
  });
  EXPECT_NE(msg.find("n=1025"), std::string::npos) << msg;
  msg = user_error_of([&s] { (void)s.get_choice(PolicyOptions(std::map<std::string, std::string>{{"c", "z"}}), "c"); });
  EXPECT_NE(msg.find("expected one of x, y"), std::string::npos) << msg;
  EXPECT_THROW((void)s.get_int(none, "missing"), std::logic_error);
  EXPECT_THROW((void)s.get_int(none, "a"), std::logic_error);  // a prose default needs a fallback
  EXPECT_THROW((void)s.get_double(none, "n"), std::logic_error);
}

TEST(Registry, EveryPresetOptionIsDocumentedForItsBase) {
  // `batchsim list policies` prints each preset's options and its base's option table: every
  // option a preset sets must appear there, with a description.
  std::set<std::string> names;
  for (const PolicyInfo& info : registered_policies()) {
    EXPECT_TRUE(names.insert(info.name).second) << "duplicate " << info.name;
    EXPECT_FALSE(info.description.empty());
    const auto& docs = policy_option_docs(info.base);
    for (const auto& [key, value] : info.preset) {
      const bool documented = std::any_of(docs.begin(), docs.end(), [k = key](const PolicyOptionDoc& d) {
        return d.key == k && !d.description.empty();
      });
      EXPECT_TRUE(documented) << info.name << " sets undocumented " << key;
    }
    // And every documented option is accepted by the base (options of the other KV manager
    // are refused: see OptionsOfTheOtherKvManagerAreRefused).
    const bool reserve = std::any_of(info.preset.begin(), info.preset.end(),
                                     [](const auto& kv) { return kv.first == "kv" && kv.second == "reserve"; });
    for (const PolicyOptionDoc& d : docs) {
      const bool paged_only = d.key == "block_size" || d.key == "watermark" || d.key == "prefix_caching";
      if (reserve ? paged_only : d.key == "reserve_to") continue;
      // A TensorRT-LLM capacity policy chooses the KV manager: kv and reserve_to are refused
      // beside it, and GUARANTEED_NO_EVICT (the trtllm default) reserves.
      const bool capacity = std::any_of(info.preset.begin(), info.preset.end(),
                                        [](const auto& kv) { return kv.first == "capacity_scheduler"; });
      if (capacity && (d.key == "kv" || d.key == "reserve_to" || d.key == "watermark" || d.key == "prefix_caching")) {
        continue;
      }
      // sjf_by is refused without scheduling_policy=sjf (priority_test.cpp).
      if (d.key == "sjf_by") continue;
      std::string value = d.default_value;
      if (d.key == "max_num_batched_tokens") value = "4096";
      EXPECT_NO_THROW(policy(info.name, {{d.key, value}})) << info.name << " " << d.key;
    }
  }
  for (const char* name : {"hf-static", "ft-static", "orca", "tgi", "tgi-router", "vllm-v0", "vllm", "vllm-v1-2025",
                           "sarathi", "trtllm", "sglang"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
}

// vLLM's EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py, 0.10-0.12): H100-class GPUs
// (>= 70 GiB, not an A100) get 8192 tokens / 1024 sequences behind the API server and 16384 /
// 1024 offline; others 2048 / 256 and 8192 / 256. Values the user gives win.
TEST(Registry, VllmTakesItsBatchDefaultsFromTheGpu) {
  using U = ContinuousPolicyConfig::UsageContext;
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(vllm_batch_defaults(U::api_server, 80 * gib, "h100-sxm").max_num_batched_tokens, 8192);
  EXPECT_EQ(vllm_batch_defaults(U::api_server, 80 * gib, "h100-sxm").max_num_seqs, 1024);
  EXPECT_EQ(vllm_batch_defaults(U::llm_class, 140 * gib, "h200").max_num_batched_tokens, 16384);
  EXPECT_EQ(vllm_batch_defaults(U::api_server, 80 * gib, "a100-80gb-fitted").max_num_batched_tokens, 2048);
  EXPECT_EQ(vllm_batch_defaults(U::api_server, 80 * gib, "a100-80gb-fitted").max_num_seqs, 256);
  EXPECT_EQ(vllm_batch_defaults(U::llm_class, 48 * gib, "l40s").max_num_batched_tokens, 8192);
  EXPECT_EQ(vllm_batch_defaults(U::api_server, 69 * gib, "h100-sxm").max_num_seqs, 256);

  // Attached to a run: 1100 requests of 4-token prompts arriving at once. The H100 admits 1024
  // of them in the first step (4096 tokens, within its 8192 budget); the A100 256 (its sequence
  // cap); the user's budget or cap, or usage_context=none (2048 / 256), override the defaults.
  Workload w;
  for (int i = 0; i < 1100; ++i) w.push_back({i, SimTime{}, 4, 2});
  auto first_step = [&](const char* gpu, std::map<std::string, std::string> opts) {
    const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu(gpu));
    auto p = policy("vllm", std::move(opts));
    const RecordedRun run = run_recorded(*p, w, cm);
    return run.steps.at(0).shape.prefill_tokens();
  };
  EXPECT_EQ(first_step("h100-sxm", {}), 1024 * 4);
  EXPECT_EQ(first_step("a100-80gb", {}), 256 * 4);
  EXPECT_EQ(first_step("h100-sxm", {{"max_num_batched_tokens", "2048"}}), 2048);
  EXPECT_EQ(first_step("h100-sxm", {{"max_num_seqs", "100"}}), 100 * 4);
  EXPECT_EQ(first_step("h100-sxm", {{"usage_context", "none"}}), 256 * 4);
}

// Every preset runs as an engine that exists (hwmodel/engines/), the one it mirrors.
TEST(Registry, EveryPresetNamesAShippedEngine) {
  for (const PolicyInfo& p : registered_policies()) {
    EXPECT_NO_THROW(resolve_engine(p.engine)) << p.name << " names engine " << p.engine;
  }
  EXPECT_EQ(policy_engine("hf-static"), "hf-transformers");
  EXPECT_EQ(policy_engine("ft-static"), "fastertransformer");
  EXPECT_EQ(policy_engine("vllm-v0"), "vllm-v0");
  EXPECT_EQ(policy_engine("vllm"), "vllm-async");  // current vLLM schedules asynchronously
  EXPECT_EQ(policy_engine("vllm-v1-2025"), "vllm");
  EXPECT_EQ(policy_engine("tgi-router"), "tgi");
  EXPECT_EQ(policy_engine("continuous"), "vllm");
  EXPECT_EQ(policy_engine("sglang"), "sglang");
}

}  // namespace
}  // namespace batchsim::testing
