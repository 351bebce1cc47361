#include "experiments/run/run_config.h"

#include "policies/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "experiments/run/bench_result.h"
#include "hwmodel/parallel_layout.h"
#include "hwmodel/base/error.h"
#include "hwmodel/base/parse.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/speculative.h"
#include "sim/kv_transfer.h"
#include "sim/simulation.h"

namespace batchsim {

std::string normalize_key(std::string key) {
  for (char& ch : key) {
    if (ch == '_') ch = '-';
  }
  return key;
}

RunConfig default_run_config() {
  RunConfig c;
  c.workload.arrival = "";
  c.workload.prompt_len = "fixed:512";
  c.workload.output_len = "capexp:128:512";
  c.workload.num_requests = 1000;
  c.workload.seed = 0;
  return c;
}

std::pair<std::string, std::string> parse_policy_opt(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw UserError(fmt::format("--policy-opt \"{}\": expected KEY=VALUE", text));
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

uint64_t parse_seed(const std::string& text, const std::string& option) {
  uint64_t seed = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw UserError(fmt::format("{}: '{}' is not a seed (a whole number from 0 to {})", option, text,
                                std::numeric_limits<uint64_t>::max()));
  }
  return seed;
}

namespace {

template <typename T>
T scalar(const YAML::Node& node, const std::filesystem::path& file, const std::string& key) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw UserError(
        fmt::format("{}:{}: key '{}' has a value of the wrong type", file.string(), node.Mark().line + 1, key));
  }
}

// A result option as a string ("ttft_p99_s=2,...") or a YAML list of items; each is handed to
// `parse` with the key's name, and its errors get the file and line.
template <typename F>
auto option_text(const YAML::Node& v, const std::filesystem::path& file, const std::string& key, F parse) {
  std::string text;
  if (v.IsSequence()) {
    for (const auto& item : v) text += (text.empty() ? "" : ",") + scalar<std::string>(item, file, key);
  } else {
    text = scalar<std::string>(v, file, key);
  }
  try {
    return parse(text, key);
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}:{}: {}", file.string(), v.Mark().line + 1, e.what()));
  }
}

// `slo`: a mapping {ttft_p99_s: 2, latency.tbt_s.p99: 0.1}, or the --slo text.
SloBounds yaml_slo(const YAML::Node& v, const std::filesystem::path& file, const std::string& key) {
  if (!v.IsMap())
    return option_text(v, file, key, [](const std::string& t, const std::string& k) { return parse_slo(t, k); });
  SloBounds bounds;
  for (const auto& b : v) {
    const std::string name = b.first.as<std::string>();
    const auto value = scalar<double>(b.second, file, key + "." + name);  // names file and line itself
    try {
      auto bound = slo_bound(name, value, key);
      for (const auto& [path, _] : bounds) {
        if (path == bound.first) throw UserError(fmt::format("{}: {} is bounded twice", key, path));
      }
      bounds.push_back(std::move(bound));
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}:{}: {}", file.string(), b.first.Mark().line + 1, e.what()));
    }
  }
  if (bounds.empty())
    throw UserError(fmt::format("{}:{}: {}: give at least one bound", file.string(), v.Mark().line + 1, key));
  return bounds;
}

// `goodput`: a mapping {ttft: 2000, tpot: 100} (milliseconds), or the --goodput text.
GoodputSpec yaml_goodput(const YAML::Node& v, const std::filesystem::path& file, const std::string& key) {
  if (!v.IsMap()) {
    return option_text(v, file, key, [](const std::string& t, const std::string& k) { return parse_goodput({t}, k); });
  }
  GoodputSpec spec;
  for (const auto& t : v) {
    const std::string name = t.first.as<std::string>();
    const auto ms = scalar<double>(t.second, file, key + "." + name);  // names file and line itself
    try {
      set_goodput_threshold(spec, name, ms, key);
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}:{}: {}", file.string(), t.first.Mark().line + 1, e.what()));
    }
  }
  if (spec.empty())
    throw UserError(fmt::format("{}:{}: {}: give at least one threshold", file.string(), v.Mark().line + 1, key));
  return spec;
}

// One key of a pool (`prefill-tp: 2`, or `tp: 2` under `prefill:`), without its prefix.
void apply_pool_key(PoolConfig& pool, const std::string& sub, const YAML::Node& v, const YAML::Node& key_node,
                    const std::filesystem::path& file, const std::string& shown) {
  if (sub == "gpu")
    pool.gpu = scalar<std::string>(v, file, shown);
  else if (sub == "tp")
    pool.tp = scalar<int>(v, file, shown);
  else if (sub == "dp")
    pool.dp = scalar<int>(v, file, shown);
  else if (sub == "ep")
    pool.ep = scalar<int>(v, file, shown);
  else if (sub == "moe-tp")
    pool.moe_tp = scalar<int>(v, file, shown);
  else if (sub == "policy")
    pool.policy = scalar<std::string>(v, file, shown);
  else if (sub == "num-gpu-blocks")
    pool.num_gpu_blocks = scalar<int64_t>(v, file, shown);
  else if (sub == "engine")
    pool.engine = scalar<std::string>(v, file, shown);
  else if (sub == "policy-opt" || sub == "policy-opts") {
    if (!v.IsMap())
      throw UserError(
          fmt::format("{}:{}: '{}' must be a mapping of KEY: VALUE", file.string(), v.Mark().line + 1, shown));
    for (const auto& o : v) pool.policy_opts[o.first.as<std::string>()] = scalar<std::string>(o.second, file, shown);
  } else {
    throw UserError(fmt::format(
        "{}:{}: unknown key '{}' (a pool takes gpu, tp, ep, moe-tp, policy, policy-opt, engine, num-gpu-blocks)",
        file.string(), key_node.Mark().line + 1, shown));
  }
}

}  // namespace

void apply_yaml_config(const std::filesystem::path& file, RunConfig& c) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file.string());
  } catch (const YAML::BadFile&) {
    throw UserError(fmt::format("--config {}: cannot read the file", file.string()));
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}:{}: not valid YAML: {}", file.string(), e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) throw UserError(fmt::format("{}: expected a mapping of run keys", file.string()));
  try {
    // A run's own summary.json reproduces it: its `config` block holds the run keys.
    if (root["batchsim_version"] && root["config"] && root["config"].IsMap()) {
      apply_yaml_mapping(root["config"], file, c, "config.");
      return;
    }
    apply_yaml_mapping(root, file, c);
  } catch (const YAML::Exception& e) {
    // A shape no key check expected (a list or a mapping as a key): still named by line.
    throw UserError(fmt::format("{}:{}: unexpected YAML here: {}", file.string(), e.mark.line + 1, e.msg));
  }
}

void apply_yaml_mapping(const YAML::Node& mapping, const std::filesystem::path& file, RunConfig& c,
                        const std::string& key_prefix) {
  for (const auto& kv : mapping) apply_yaml_key(kv.first.as<std::string>(), kv.first, kv.second, file, c, key_prefix);
}

namespace {

// Sets one scalar key of a run YAML: its value read as V (naming the file, line and key when it
// is not one) into the config.
using ScalarKeySetter =
    std::function<void(RunConfig&, const YAML::Node&, const std::filesystem::path&, const std::string&)>;

// Field is a member of the run config or of its workload; either is set the same way.
template <class V, class Owner, class Field>
ScalarKeySetter scalar_key(Field Owner::*field) {
  return [field](RunConfig& c, const YAML::Node& v, const std::filesystem::path& file, const std::string& shown) {
    Owner* owner = nullptr;
    if constexpr (std::is_same_v<Owner, WorkloadSpec>) {
      owner = &c.workload;
    } else {
      owner = &c;
    }
    owner->*field = scalar<V>(v, file, shown);
  };
}

// The run keys that are one scalar each, by their normalised name (the CLI option's).
const std::map<std::string, ScalarKeySetter>& scalar_run_keys() {
  static const std::map<std::string, ScalarKeySetter> keys = {
      {"model", scalar_key<std::string>(&RunConfig::model)},
      {"gpu", scalar_key<std::string>(&RunConfig::gpu)},
      {"tp", scalar_key<int>(&RunConfig::tp)},
      {"dp", scalar_key<int>(&RunConfig::dp)},
      {"ep", scalar_key<int>(&RunConfig::ep)},
      {"moe-tp", scalar_key<int>(&RunConfig::moe_tp)},
      {"moe-routing", scalar_key<std::string>(&RunConfig::moe_routing)},
      {"eplb", scalar_key<bool>(&RunConfig::eplb)},
      {"spec-decode", scalar_key<std::string>(&RunConfig::spec_decode)},
      {"kv-offload", scalar_key<std::string>(&RunConfig::kv_offload)},
      {"weight-dtype", scalar_key<std::string>(&RunConfig::weight_dtype)},
      {"kv-cache-dtype", scalar_key<std::string>(&RunConfig::kv_cache_dtype)},
      {"policy", scalar_key<std::string>(&RunConfig::policy)},
      {"engine", scalar_key<std::string>(&RunConfig::engine)},
      {"replicas", scalar_key<int>(&RunConfig::replicas)},
      {"router", scalar_key<std::string>(&RunConfig::router)},
      {"prefill-replicas", scalar_key<int>(&RunConfig::prefill_replicas)},
      {"decode-replicas", scalar_key<int>(&RunConfig::decode_replicas)},
      {"decode-router", scalar_key<std::string>(&RunConfig::decode_router)},
      {"kv-link", scalar_key<std::string>(&RunConfig::kv_link)},
      {"kv-link-gbps", scalar_key<double>(&RunConfig::kv_link_gbps)},
      {"kv-link-latency-us", scalar_key<double>(&RunConfig::kv_link_latency_us)},
      {"kv-transfer", scalar_key<std::string>(&RunConfig::kv_transfer)},
      {"arrival", scalar_key<std::string>(&WorkloadSpec::arrival)},
      {"trace", scalar_key<std::string>(&WorkloadSpec::trace)},
      {"num-requests", scalar_key<int64_t>(&WorkloadSpec::num_requests)},
      {"prompt-len", scalar_key<std::string>(&WorkloadSpec::prompt_len)},
      {"output-len", scalar_key<std::string>(&WorkloadSpec::output_len)},
      {"trace-speedup", scalar_key<double>(&WorkloadSpec::trace_speedup)},
      {"prefix", scalar_key<std::string>(&WorkloadSpec::prefix)},
      {"max-tokens", scalar_key<std::string>(&WorkloadSpec::max_tokens)},
      {"ignore-eos", scalar_key<bool>(&WorkloadSpec::ignore_eos)},
      {"priority", scalar_key<std::string>(&WorkloadSpec::priority)},
      {"gpu-memory-utilization", scalar_key<double>(&RunConfig::gpu_memory_utilization)},
      {"max-concurrency", scalar_key<int64_t>(&RunConfig::max_concurrency)},
      {"think-time", scalar_key<std::string>(&WorkloadSpec::think_time)},
      {"session-turns", scalar_key<std::string>(&WorkloadSpec::session_turns)},
      {"trace-sessions", scalar_key<bool>(&WorkloadSpec::trace_sessions)},
      {"client-connections", scalar_key<int64_t>(&RunConfig::client_connections)},
      {"resample", scalar_key<std::string>(&WorkloadSpec::resample)},
      {"seeds", scalar_key<int64_t>(&RunConfig::seeds)},
      {"num-gpu-blocks", scalar_key<int64_t>(&RunConfig::num_gpu_blocks)},
      {"max-model-len", scalar_key<int64_t>(&RunConfig::max_model_len)},
      {"out", scalar_key<std::string>(&RunConfig::out)},
      {"chrome-trace", scalar_key<std::string>(&RunConfig::chrome_trace)},
      {"chrome-trace-requests", scalar_key<int64_t>(&RunConfig::chrome_trace_requests)},
  };
  return keys;
}

// The keys that are more than a scalar: pools, mappings, and values checked as they are read.
void apply_structured_key(const std::string& key, const std::string& shown, const YAML::Node& key_node,
                          const YAML::Node& v, const std::filesystem::path& file, RunConfig& c) {
  if (key.rfind("prefill-", 0) == 0 || key.rfind("decode-", 0) == 0) {
    const bool prefill = key[0] == 'p';
    apply_pool_key(prefill ? c.prefill : c.decode, key.substr(prefill ? 8 : 7), v, key_node, file, shown);
  } else if (key == "prefill" || key == "decode") {  // summary.json's config.prefill / config.decode
    if (!v.IsMap())
      throw UserError(
          fmt::format("{}:{}: '{}' must be a mapping of pool keys", file.string(), v.Mark().line + 1, shown));
    for (const auto& o : v) {
      const std::string sub = o.first.as<std::string>();
      apply_pool_key(key == "prefill" ? c.prefill : c.decode, normalize_key(sub), o.second, o.first, file,
                     shown + "." + sub);
    }
  } else if (key == "policy-opt" || key == "policy-opts") {  // summary.json says policy_opts
    if (!v.IsMap())
      throw UserError(
          fmt::format("{}:{}: '{}' must be a mapping of KEY: VALUE", file.string(), v.Mark().line + 1, shown));
    for (const auto& o : v) c.policy_opts[o.first.as<std::string>()] = scalar<std::string>(o.second, file, shown);
  } else if (key == "seed") {
    try {
      c.workload.seed = parse_seed(scalar<std::string>(v, file, shown), shown);
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}:{}: {}", file.string(), v.Mark().line + 1, e.what()));
    }
  } else if (key == "iteration-log") {
    // A YAML boolean (true, yes, on, ...) or `ids`.
    const std::string text = scalar<std::string>(v, file, shown);
    bool on = false;
    const std::string value = text != "ids" && YAML::convert<bool>::decode(v, on) ? (on ? "true" : "false") : text;
    try {
      set_iteration_log(c, value, shown);
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}:{}: {}", file.string(), v.Mark().line + 1, e.what()));
    }
  } else if (key == "slo") {
    c.slo = yaml_slo(v, file, shown);
  } else if (key == "goodput") {
    c.goodput = yaml_goodput(v, file, shown);
  } else if (key == "percentile-metrics") {
    c.percentile_metrics = option_text(
        v, file, shown, [](const std::string& t, const std::string& k) { return parse_percentile_metrics(t, k); });
  } else if (key == "metric-percentiles") {
    c.metric_percentiles = option_text(
        v, file, shown, [](const std::string& t, const std::string& k) { return parse_metric_percentiles(t, k); });
  } else {
    throw UserError(fmt::format("{}:{}: unknown key '{}'", file.string(), key_node.Mark().line + 1, shown));
  }
}

}  // namespace

void apply_yaml_key(const std::string& raw, const YAML::Node& key_node, const YAML::Node& v,
                    const std::filesystem::path& file, RunConfig& c, const std::string& key_prefix) {
  const std::string key = normalize_key(raw);
  const std::string shown = key_prefix + raw;
  const auto& scalars = scalar_run_keys();
  if (const auto it = scalars.find(key); it != scalars.end()) {
    it->second(c, v, file, shown);
  } else {
    apply_structured_key(key, shown, key_node, v, file, c);
  }
}

void set_iteration_log(RunConfig& c, const std::string& value, const std::string& option) {
  if (value != "true" && value != "false" && value != "ids") {
    throw UserError(
        fmt::format("{}: '{}' is not an iteration log (expected true, false, or ids: "
                    "iterations.csv with each iteration's request ids)",
                    option, value));
  }
  c.iteration_log = value != "false";
  c.iteration_log_ids = value == "ids";
}

int64_t chrome_trace_requests(const RunConfig& c) {
  return c.chrome_trace_requests.value_or(kDefaultChromeTraceRequests);
}

namespace {

// A spec's routing; nullopt for "auto", which needs the model.
std::optional<MoeRouting> parse_moe_routing(const std::string& s, const char* option) {
  if (s == "auto") return std::nullopt;
  if (s == "balanced" || s == "uniform") return MoeRouting{};
  if (s.rfind("power:", 0) == 0) {
    const double alpha = parse_double(std::string_view(s).substr(6), fmt::format("{} power:", option), 0, 100);
    if (alpha > 0) return MoeRouting{MoeRoutingKind::power_law, alpha};
  }
  throw UserError(
      fmt::format("{} \"{}\": expected auto, balanced or power:ALPHA with ALPHA > 0 (e.g. power:1.2, the skew "
                  "of NVIDIA's MoE tables)",
                  option, s));
}

}  // namespace

void check_moe_routing(const std::string& spec, const char* option) { (void)parse_moe_routing(spec, option); }

KvOffloadBytes parse_kv_offload(const std::string& spec) {
  KvOffloadBytes bytes;
  if (spec.empty()) return bytes;
  bool cpu_given = false, disk_given = false;
  for (const std::string_view part : split_fields(spec, ',')) {
    const size_t eq = part.find('=');
    const std::string_view tier = part.substr(0, eq);
    if (eq == std::string_view::npos || (tier != "cpu" && tier != "disk")) {
      throw UserError(
          fmt::format("--kv-offload '{}': expected cpu=GIB[,disk=GIB] (GiB of host memory, and of local "
                      "disk, for the tiers), got '{}'",
                      spec, part));
    }
    bool& given = tier == "cpu" ? cpu_given : disk_given;
    if (given) throw UserError(fmt::format("--kv-offload '{}': the {} tier is given twice", spec, tier));
    given = true;
    const double gib = parse_double(part.substr(eq + 1), fmt::format("--kv-offload {}", tier), 0, 1 << 20);
    (tier == "cpu" ? bytes.cpu : bytes.disk) = gib * 1024.0 * 1024.0 * 1024.0;
  }
  if (bytes.cpu <= 0) {
    throw UserError(fmt::format("--kv-offload '{}': the cpu tier needs a size above 0 GiB{}", spec,
                                disk_given ? " (a disk tier is written through host memory)" : ""));
  }
  if (disk_given && bytes.disk <= 0) {
    throw UserError(fmt::format("--kv-offload '{}': the disk tier needs a size above 0 GiB", spec));
  }
  return bytes;
}

MoeRouting run_moe_routing(const RunConfig& c, const ModelSpec& model) {
  if (c.eplb) return MoeRouting{};
  if (const std::optional<MoeRouting> given = parse_moe_routing(c.moe_routing, "--moe-routing")) return *given;
  // aiconfigurator's estimator: power_law_1.01 for DeepSeek-style models, 1.2 for the rest.
  return MoeRouting{MoeRoutingKind::power_law, model.is_mla() ? 1.01 : 1.2};
}

ModelSpec resolve_run_model(const RunConfig& c) {
  ModelSpec m = with_dtypes(resolve_model(c.model), parse_weight_dtype(c.weight_dtype, "--weight-dtype"),
                            parse_dtype_bytes(c.kv_cache_dtype, "--kv-cache-dtype"));
  if (c.max_model_len > 0) {
    // As vLLM refuses a --max-model-len beyond the model's max_position_embeddings (without
    // VLLM_ALLOW_LONG_MAX_MODEL_LEN), so does this.
    if (m.max_context_tokens > 0 && c.max_model_len > m.max_context_tokens) {
      throw UserError(fmt::format("--max-model-len {}: more than model '{}' allows (max_position_embeddings {})",
                                  c.max_model_len, m.name, m.max_context_tokens));
    }
    m.max_context_tokens = static_cast<int>(c.max_model_len);
  }
  return m;
}

// 2^24 blocks are 268M tokens at block_size 16, far beyond any GPU's KV cache, and with prefix
// caching the cache keeps a few dozen bytes per block.
constexpr int64_t kMaxGpuBlocks = int64_t{1} << 24;

std::vector<uint64_t> consecutive_seeds(uint64_t first, int64_t count) {
  if (count < 1) throw UserError(fmt::format("--seeds {}: must be >= 1", count));
  if (first > std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(count - 1)) {
    throw UserError(fmt::format("--seeds {} from seed {}: the last seed would pass 2^64-1", count, first));
  }
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < count; ++i) seeds.push_back(first + static_cast<uint64_t>(i));
  return seeds;
}

namespace {

// The bases that declare `trait`, in registration order, as prose: "continuous and
// chunked-prefill", "a, b and c".
std::string bases_that(bool PolicyBaseTraits::*trait) {
  std::vector<std::string> names;
  for (const std::string& base : policy_bases()) {
    if (policy_base_traits(base).*trait) names.push_back(base);
  }
  if (names.size() < 2) return fmt::format("{}", fmt::join(names, ""));
  return fmt::format("{} and {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

// The parallel layout, the weight and KV formats, and the features that need a given scheduler (KV offload, speculative
// decoding).
void check_layout_and_features(const RunConfig& c) {
  if (c.tp < 1 || c.tp > 64) throw UserError(fmt::format("--tp {}: must be in [1, 64]", c.tp));
  // Wide expert parallelism reaches hundreds of GPUs (DeepSeek-V3's decode unit: EP 320, DP 80).
  if (c.dp < 1 || c.dp > 1024) throw UserError(fmt::format("--dp {}: must be in [1, 1024]", c.dp));
  if (c.ep < 1 || c.ep > 1024) throw UserError(fmt::format("--ep {}: must be in [1, 1024]", c.ep));
  if (c.moe_tp < 0 || c.moe_tp > 1024) throw UserError(fmt::format("--moe-tp {}: must be in [1, 1024]", c.moe_tp));
  check_moe_routing(c.moe_routing);
  if (!c.kv_offload.empty()) {
    (void)parse_kv_offload(c.kv_offload);
    if (is_disaggregated(c))
      throw UserError("--kv-offload with --prefill-replicas/--decode-replicas: not supported yet");
    if (c.dp > 1) throw UserError("--kv-offload with --dp: not supported yet");
    if (const std::string base = policy_base(c.policy); !policy_base_traits(base).kv_offload) {
      throw UserError(fmt::format(
          "--kv-offload with --policy {} (of {}): not supported yet; the {} schedulers with prefix caching (vllm, "
          "...) offload",
          c.policy, base, bases_that(&PolicyBaseTraits::kv_offload)));
    }
  }
  if (!c.spec_decode.empty()) {
    (void)parse_speculative_decoding(c.spec_decode, "--spec-decode");
    if (is_disaggregated(c))
      throw UserError("--spec-decode with --prefill-replicas/--decode-replicas: not supported yet");
    if (const std::string base = policy_base(c.policy); !policy_base_traits(base).speculative_decoding) {
      throw UserError(fmt::format(
          "--spec-decode with --policy {} (of {}): not supported yet; the {} schedulers (vllm, sarathi, trtllm, tgi, "
          "...) speculate as vLLM v1 does",
          c.policy, base, bases_that(&PolicyBaseTraits::speculative_decoding)));
    }
  }
  parse_weight_dtype(c.weight_dtype, "--weight-dtype");
  parse_dtype_bytes(c.kv_cache_dtype, "--kv-cache-dtype");
}

// The replicas behind the router, or the prefill and decode pools with their own settings.
void check_replicas_and_pools(const RunConfig& c) {
  // Each replica holds a policy and its KV bookkeeping: thousands is far past any real cluster.
  constexpr int kMaxReplicas = 4096;
  if (c.replicas < 1 || c.replicas > kMaxReplicas) {
    throw UserError(fmt::format("--replicas {}: must be in [1, {}]", c.replicas, kMaxReplicas));
  }
  parse_router(c.router, "--router");
  if (is_disaggregated(c)) {
    // A pool of 0 replicas has nothing to hand to, or nothing to hand from.
    for (const auto& [n, option] :
         {std::pair{c.prefill_replicas, "--prefill-replicas"}, std::pair{c.decode_replicas, "--decode-replicas"}}) {
      if (n < 1 || n > kMaxReplicas) {
        throw UserError(
            fmt::format("{} {}: a disaggregated run needs both pools, each in [1, {}] replicas "
                        "(--prefill-replicas P --decode-replicas D)",
                        option, n, kMaxReplicas));
      }
    }
    if (c.replicas != 1) {
      throw UserError(
          fmt::format("--replicas {}: not with --prefill-replicas/--decode-replicas, which "
                      "size the two pools",
                      c.replicas));
    }
    if (!c.decode_router.empty()) parse_router(c.decode_router, "--decode-router");
    for (const auto& [pool, name] : {std::pair{&c.prefill, "prefill"}, std::pair{&c.decode, "decode"}}) {
      if (pool->tp && (*pool->tp < 1 || *pool->tp > 64)) {
        throw UserError(fmt::format("--{}-tp {}: must be in [1, 64]", name, *pool->tp));
      }
      if (pool->dp && (*pool->dp < 1 || *pool->dp > 1024)) {
        throw UserError(fmt::format("--{}-dp {}: must be in [1, 1024]", name, *pool->dp));
      }
      if (pool->ep && (*pool->ep < 1 || *pool->ep > 1024)) {
        throw UserError(fmt::format("--{}-ep {}: must be in [1, 1024]", name, *pool->ep));
      }
      if (pool->moe_tp && (*pool->moe_tp < 1 || *pool->moe_tp > 1024)) {
        throw UserError(fmt::format("--{}-moe-tp {}: must be in [1, 1024]", name, *pool->moe_tp));
      }
      if (pool->dp || pool->ep || pool->moe_tp) {
        // The pool's own layout, checked here so that the message names the pool's options
        // (the cost model's check names the run's).
        const RunConfig own = pool_run_config(c, name);
        try {
          check_layout(resolve_run_model(own), own.layout());
        } catch (const UserError& e) {
          const std::string dp = own.dp != 1 ? fmt::format(", --{}-dp {}", name, own.dp) : "";
          throw UserError(fmt::format("the {} pool (--{}-tp {}{}, --{}-ep {}): {}", name, name, own.tp, dp, name,
                                      own.ep, e.what()));
        }
      }
      if (pool->num_gpu_blocks && (*pool->num_gpu_blocks < 0 || *pool->num_gpu_blocks > kMaxGpuBlocks)) {
        throw UserError(fmt::format("--{}-num-gpu-blocks {}: must be in [0, {}] (0: from GPU memory)", name,
                                    *pool->num_gpu_blocks, kMaxGpuBlocks));
      }
      if (!pool->engine.empty()) {
        try {
          resolve_engine(pool->engine);
        } catch (const UserError& e) {
          // resolve_engine names --engine; this value came from the pool's own option.
          std::string why = e.what();
          if (why.rfind("--engine: ", 0) == 0) why.erase(0, 10);
          throw UserError(fmt::format("--{}-engine {}: {}", name, pool->engine, why));
        }
      }
    }
    resolve_kv_link(c.kv_link, c.kv_link_gbps, c.kv_link_latency_us, "--kv-link");
    parse_kv_transfer_mode(c.kv_transfer, "--kv-transfer");
  } else {
    // Pool settings without pools would be ignored: say so rather than run something else.
    if (has_pool_settings(c)) {
      throw UserError(
          "--prefill-*/--decode-* options: set --prefill-replicas P and --decode-replicas D "
          "for a disaggregated run");
    }
  }
}

// GPU memory, closed-loop clients and their connections, the context limit.
void check_clients(const RunConfig& c) {
  if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1)) {
    throw UserError(fmt::format("--gpu-memory-utilization {}: must be in (0, 1]", c.gpu_memory_utilization));
  }
  constexpr int64_t kMaxConcurrency = 10'000'000;
  if (c.max_concurrency < 0 || c.max_concurrency > kMaxConcurrency) {
    throw UserError(fmt::format("--max-concurrency {}: must be in [0, {}] (0: open loop, no client limit)",
                                c.max_concurrency, kMaxConcurrency));
  }
  if (c.client_connections < 0 || c.client_connections > kMaxConcurrency) {
    throw UserError(fmt::format("--client-connections {}: must be in [0, {}] (0: no limit)", c.client_connections,
                                kMaxConcurrency));
  }
  if (c.client_connections > 0 && c.max_concurrency == 0) {
    throw UserError(
        fmt::format("--client-connections {}: is the connection pool of closed-loop clients; give "
                    "--max-concurrency C (the number of clients)",
                    c.client_connections));
  }
  if (c.max_model_len < 0 || c.max_model_len > (int64_t{1} << 30)) {
    throw UserError(fmt::format("--max-model-len {}: must be in [0, 2^30] (0: the model's max_position_embeddings)",
                                c.max_model_len));
  }
}

// Seeds, resampling, sessions, think times, the KV size, request counts, the trace and its speed.
void check_workload_limits(const RunConfig& c) {
  constexpr int64_t kMaxSeeds = 10'000;
  if (c.seeds < 1 || c.seeds > kMaxSeeds) {
    throw UserError(fmt::format("--seeds {}: must be in [1, {}] (runs, one per seed)", c.seeds, kMaxSeeds));
  }
  consecutive_seeds(c.workload.seed, c.seeds);  // the last seed within 2^64-1
  if (!c.workload.resample.empty()) {
    parse_resample_block(c.workload.resample, "--resample");
    if (c.workload.trace.empty() && c.workload.trace_columns == nullptr) {
      throw UserError(
          fmt::format("--resample {}: resamples a trace's requests; a synthetic workload draws new "
                      "ones from each seed already (give --trace FILE)",
                      c.workload.resample));
    }
  }
  const bool sessions = !c.workload.session_turns.empty() || c.workload.trace_sessions;
  if (sessions && c.client_connections > 0) {
    throw UserError(
        fmt::format("--client-connections {} with {}: not supported (with sessions, --max-concurrency counts "
                    "sessions, not requests)",
                    c.client_connections, c.workload.trace_sessions ? "--trace-sessions" : "--session-turns"));
  }
  if (c.workload.trace_sessions && c.seeds > 1) {
    throw UserError(fmt::format(
        "--trace-sessions with --seeds {}: not supported (each seed would replay a block-bootstrap replicate "
        "of the trace, whose blocks cut the conversations)",
        c.seeds));
  }
  if (!c.workload.think_time.empty() && c.max_concurrency == 0 && c.workload.session_turns.empty()) {
    throw UserError(
        fmt::format("--think-time {}: is how long a closed-loop client waits between a response "
                    "and its next request; give --max-concurrency C (the number of clients), or "
                    "--session-turns for the time between a session's turns",
                    c.workload.think_time));
  }
  if (c.num_gpu_blocks < 0 || c.num_gpu_blocks > kMaxGpuBlocks) {
    throw UserError(fmt::format("--num-gpu-blocks {}: must be in [0, {}] (0: size the KV cache from GPU memory)",
                                c.num_gpu_blocks, kMaxGpuBlocks));
  }
  // Request ids are 32-bit; far below that, memory runs out first (about 200 bytes a request).
  constexpr int64_t kMaxRequests = 100'000'000;
  if (c.workload.num_requests < 0 || c.workload.num_requests > kMaxRequests) {
    throw UserError(fmt::format("--num-requests {}: must be in [0, {}]", c.workload.num_requests, kMaxRequests));
  }
  if (c.chrome_trace_requests) {
    if (c.chrome_trace.empty()) {
      throw UserError("--chrome-trace-requests: says how many requests a trace shows; give --chrome-trace FILE");
    }
    if (*c.chrome_trace_requests < 0 || *c.chrome_trace_requests > kMaxRequests) {
      throw UserError(
          fmt::format("--chrome-trace-requests {}: must be in [0, {}] (0: iterations and "
                      "counters only)",
                      *c.chrome_trace_requests, kMaxRequests));
    }
  }
  if (!(std::isfinite(c.workload.trace_speedup) && c.workload.trace_speedup > 0)) {
    throw UserError(fmt::format("--trace-speedup {}: must be > 0", c.workload.trace_speedup));
  }
}

}  // namespace

void validate(const RunConfig& c) {
  check_layout_and_features(c);
  check_replicas_and_pools(c);
  check_clients(c);
  check_workload_limits(c);
}

bool has_pool_settings(const RunConfig& c) {
  for (const PoolConfig* pool : {&c.prefill, &c.decode}) {
    if (!pool->gpu.empty() || pool->tp || pool->dp || pool->ep || pool->moe_tp || !pool->policy.empty() ||
        !pool->policy_opts.empty() || pool->num_gpu_blocks || !pool->engine.empty()) {
      return true;
    }
  }
  return !c.decode_router.empty();
}

std::string run_engine_name(const RunConfig& config) {
  return config.engine.empty() ? policy_engine(config.policy) : config.engine;
}

RunConfig pool_run_config(const RunConfig& config, const std::string& role) {
  const PoolConfig& pool = role == "prefill" ? config.prefill : config.decode;
  RunConfig c = config;
  if (!pool.gpu.empty()) c.gpu = pool.gpu;
  if (pool.tp) c.tp = *pool.tp;
  if (pool.dp) c.dp = *pool.dp;
  if (pool.ep) c.ep = *pool.ep;
  if (pool.moe_tp) c.moe_tp = *pool.moe_tp;
  if (!pool.policy.empty() && pool.policy != config.policy) {
    c.policy = pool.policy;
    c.policy_opts.clear();
  }
  for (const auto& [k, v] : pool.policy_opts) c.policy_opts[k] = v;
  if (pool.num_gpu_blocks) c.num_gpu_blocks = *pool.num_gpu_blocks;
  if (!pool.engine.empty()) c.engine = pool.engine;
  return c;
}

}  // namespace batchsim
