// batchsim — `batchsim validate-serving` (see validate_serving.h).
#include "experiments/fidelity/validate_serving.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "experiments/run/output.h"
#include "experiments/run/run_config.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "policies/registry.h"
#include "policies/sglang/sglang_policy.h"
#include "sim/workload/workload.h"

namespace batchsim {

namespace {

// The error of a group of rows, kept as each row's predicted / measured TTFT and TPOT: their
// MAPE, and their median, which gives the error's sign (below 1: predicted short) where the
// MAPE cannot.
struct ErrorGroup {
  std::vector<double> ttft, tpot;

  void add(const ServingRow& r, const ServingPrediction& p) {
    ttft.push_back(p.ttft_ms / r.ttft_ms);
    tpot.push_back(p.tpot_ms / r.tpot_ms);
  }
  int64_t count() const { return static_cast<int64_t>(ttft.size()); }
  static double mape(const std::vector<double>& ratios) {
    Mape m;
    for (double ratio : ratios) m.add(ratio, 1);
    return m.value();
  }
  // The middle ratio, or the mean of the two middle ones.
  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
    if (v.size() % 2 == 1) return v[mid];
    return (v[mid] + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  nlohmann::ordered_json to_json() const {
    return {{"ttft_mape", mape(ttft)}, {"ttft_median_ratio", median(ttft)},
            {"tpot_mape", mape(tpot)}, {"tpot_median_ratio", median(tpot)}, {"count", count()}};
  }
};

// A backend's rows, all together and grouped by what a deployment chooses: the prompt length,
// the number of clients and the TP degree, so that a reader sees where the error lies.
struct BackendErrors {
  ErrorGroup all;
  // (what the rows are grouped by, value -> its rows), in this order.
  std::vector<std::pair<std::string, std::map<int64_t, ErrorGroup>>> by = {{"isl", {}}, {"concurrency", {}}, {"tp", {}}};

  void add(const ServingRow& r, const ServingPrediction& p) {
    all.add(r, p);
    by[0].second[r.isl].add(r, p);
    by[1].second[r.concurrency].add(r, p);
    by[2].second[r.tp].add(r, p);
  }
};

// Whether a policy base is vLLM's scheduler family (the continuous and chunked-prefill policies),
// which takes vLLM's option names.
bool vllm_family(const std::string& base) { return base == "continuous" || base == "chunked-prefill"; }

// The engine limits of a measured row's deployment. The silicon rows do not record their launch
// flags; they come from NVIDIA's aiconfigurator gap analysis (silicon_data_source names its
// files and, for some rows, the Dynamo 0.8.0 runtime image), whose generator writes the
// deployment it benchmarks by these rules (ai-dynamo/aiconfigurator
// src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule at 095f58a, the
// same as the default rules of 5e0243eb1, 2026-01-24, when the dated rows were measured, but for
// TensorRT-LLM's rounding; flag names from generator/config/backend_config_mapping.yaml):
//   vLLM          --max-num-seqs B, --max-num-batched-tokens B + isl + 1500
//   SGLang        --max-running-requests B, --max-prefill-tokens isl + 1500, --enable-mixed-chunk
//                 (chunked_prefill_size not set: SGLang's default by GPU memory)
//   TensorRT-LLM  max_batch_size B, max_num_tokens B + isl + 1500 rounded up to a 32-token block,
//                 chunked prefill off, and from its engine template
//                 (generator/config/backend_templates/trtllm/extra_engine_args.<version>.yaml.j2,
//                 every version's the same) kv_cache_config.free_gpu_memory_fraction 0.80
// where B, the deployment's max_batch_size, is taken as the row's concurrency (the benchmark's
// estimated_concurrency is workers x max_batch_size; a concurrency sweep on a deployment sized
// for another B moves the token budget by B - concurrency tokens, and a sequence cap above the
// concurrency never binds under closed-loop clients). The limits are given under the option
// names of the policy's scheduler (`base`: sglang, or the continuous schedulers); a static
// policy gets none.
std::map<std::string, std::string> deployment_limits(const ServingRow& r, const std::string& base) {
  const auto b = std::to_string(r.concurrency);
  if (base == "sglang") {
    return {{"max_running_requests", b}, {"max_prefill_tokens", std::to_string(r.isl + 1500)},
            {"enable_mixed_chunk", "true"}};
  }
  if (!vllm_family(base)) return {};
  int64_t tokens = r.concurrency + r.isl + 1500;
  if (r.backend == "trtllm") tokens = (tokens + 31) / 32 * 32;
  std::map<std::string, std::string> limits = {{"max_num_seqs", b}, {"max_num_batched_tokens", std::to_string(tokens)}};
  // TensorRT-LLM's KV rule is an option of the continuous base, where the trtllm preset lives.
  if (r.backend == "trtllm" && base == "continuous") limits["free_gpu_memory_fraction"] = "0.8";
  return limits;
}

// Whether a row's version (MAJOR.MINOR[.PATCH...]) is older than 0.`minor`.`patch` (an unreadable
// version counts as current).
bool version_before(const ServingRow& r, int minor, int patch = 0) {
  int major = 0, row_minor = 0, row_patch = 0;
  const int read = std::sscanf(r.version.c_str(), "%d.%d.%d", &major, &row_minor, &row_patch);
  return read >= 2 && major == 0 && (row_minor < minor || (row_minor == minor && row_patch < patch));
}

// vLLM schedules asynchronously by default from v0.14 (vllm #27614, vllm/config/vllm.py).
bool vllm_schedules_async(const ServingRow& r) { return r.backend == "vllm" && !version_before(r, 14); }

// The preset that schedules as a row's backend did: vLLM's V1 scheduler of its version (full-prompt
// admission from v0.19.0 on), SGLang's, TensorRT-LLM's.
std::string policy_for_backend(const ServingRow& r) {
  if (r.backend == "sglang" || r.backend == "trtllm") return r.backend;
  if (r.backend == "vllm") return version_before(r, 19) ? "vllm-v1-2025" : "vllm";
  throw UserError(fmt::format("validate-serving: no policy preset for backend '{}' (give --policy)", r.backend));
}

// Which deployment a row ran on, when --deployment by-backend (the default): the one its backend's
// rows show. vLLM's: aiconfigurator's limits. With vLLM's own 8192-token budget the 8 clients of
// a 1,024-token row would have their prompts prefilled in one step (about 400 ms at TP 2), and the
// rows of the same campaign on SGLang show that these closed loops do stay in lockstep; the
// measured TTFT is 154 ms. SGLang 0.5.1's: its defaults. Its TTFT grows as the concurrency times
// one prompt's prefill while its TPOT stays that of undisturbed decode steps: whole waves
// prefilled in batches of up to max_prefill_tokens 16384 before decoding, which the generator's
// --max-prefill-tokens isl + 1500 and --enable-mixed-chunk (set by it only from 2026-01-19,
// aiconfigurator #257) would not give. TensorRT-LLM's: aiconfigurator's, the generator's first
// backend (its TTFT is far off either way: hwmodel/README.md).
std::string deployment_of(const ServingRow& r, const ServingReplayOptions& o) {
  if (o.deployment != "by-backend") return o.deployment;
  return r.backend == "sglang" ? "defaults" : "aiconfigurator";
}

// The KV cache's element type: aiconfigurator's fp8 quantization profile quantizes the KV cache
// with the weights (src/aiconfigurator/sdk/task_v1_compat.py, _PROFILE_TO_QUANT["fp8"]:
// kvcache_quant_mode fp8), and the measured rows agree: the fp8 Qwen3-32B rows at TP 1-2 decode
// faster than the bf16 KV cache could be read at the H100's peak bandwidth.
std::string kv_dtype_for(const ServingRow& r, const std::string& deployment) {
  return deployment == "aiconfigurator" && r.precision == "fp8" ? "fp8" : "auto";
}

// The model a row names: a built-in by its Hugging Face id (or name), or DIR/<id>/config.json.
std::string model_for(const std::string& model_path, const ServingReplayOptions& o) {
  if (!o.models_dir.empty()) {
    const std::filesystem::path config = std::filesystem::path(o.models_dir) / model_path / "config.json";
    if (std::filesystem::is_regular_file(config)) return config.string();
  }
  for (const ModelSpec& m : builtin_models()) {
    if (m.hf_id == model_path || m.name == model_path) return m.name;
  }
  return "";
}

// The engine profile of a measured row's backend (aiconfigurator's backend names): vLLM's with
// its CPU overlapped from the version that schedules asynchronously.
std::string engine_for_row(const ServingRow& r, const ServingReplayOptions& o) {
  const std::string& backend = r.backend;
  if (const auto it = o.engines.find(backend); it != o.engines.end()) return it->second;
  if (const auto it = o.engines.find(""); it != o.engines.end()) return it->second;
  if (vllm_schedules_async(r)) return "vllm-async";
  if (backend == "vllm" || backend == "sglang" || backend == "trtllm") return backend;
  throw UserError(fmt::format("validate-serving: no engine profile for backend '{}' (give --engine)", backend));
}

// --engine ENGINE (every backend) or BACKEND=ENGINE (one backend; repeatable).
std::map<std::string, std::string> parse_engine_args(const std::vector<std::string>& args) {
  std::map<std::string, std::string> engines;
  for (const std::string& a : args) {
    const auto eq = a.find('=');
    const std::string backend = eq == std::string::npos ? "" : a.substr(0, eq);
    const std::string engine = eq == std::string::npos ? a : a.substr(eq + 1);
    if (engine.empty()) throw UserError(fmt::format("--engine '{}': names no engine", a));
    if (!engines.emplace(backend, engine).second) {
      throw UserError(fmt::format("--engine '{}': {} given twice", a,
                                  backend.empty() ? "an engine for every backend" : "backend " + backend));
    }
    (void)resolve_engine(engine);  // an unknown engine fails here, before any row
  }
  return engines;
}

// The engines as the report names them: "vllm-h100-fitted", "sglang=X, vllm=Y", or `fallback`.
std::string engines_text(const std::map<std::string, std::string>& engines, const std::string& fallback) {
  if (engines.empty()) return fallback;
  if (engines.size() == 1 && engines.begin()->first.empty()) return engines.begin()->second;
  std::string text;
  for (const auto& [backend, engine] : engines) {
    text += (text.empty() ? "" : ", ") + (backend.empty() ? "others" : backend) + "=" + engine;
  }
  return text;
}

}  // namespace

void Mape::add(double predicted, double measured) {
  sum += std::abs(predicted / measured - 1) * 100;
  ++count;
}

namespace {

// ", think time uniform:0:0.03 s" when the replay's clients think.
std::string think_time_text(const ServingReplayOptions& o) {
  return o.think_time.empty() ? "" : fmt::format(", think time {} s", o.think_time);
}

}  // namespace

void check_replay_options(const ServingReplayOptions& o) {
  if (o.requests_per_client < 1 || o.requests_per_client > 1000) {
    throw UserError("--requests-per-client: must be in [1, 1000]");
  }
  if (o.deployment != "aiconfigurator" && o.deployment != "defaults" && o.deployment != "by-backend") {
    throw UserError(fmt::format("--deployment: '{}' is not by-backend, aiconfigurator or defaults", o.deployment));
  }
  if (!o.think_time.empty()) parse_think_time(o.think_time, "--think-time");
}

ServingRows read_serving_rows(const std::string& measurements, const ServingReplayOptions& o) {
  CsvTable csv(measurements);
  ServingRows out;
  std::vector<ServingRow>& rows = out.rows;
  std::map<std::string, int64_t>& skipped = out.skipped;
  while (csv.next()) {
    if (csv.text("system") != o.system) {
      ++skipped[fmt::format("system {} (not {})", csv.text("system"), o.system)];
      continue;
    }
    if (!o.backend.empty() && csv.text("backend") != o.backend) continue;
    if (csv.text("mode") != "agg") {
      ++skipped[fmt::format("{} serving (prefill/decode disaggregation is not simulated)", csv.text("mode"))];
      continue;
    }
    if (csv.integer("pp_size", 1, 1 << 10) != 1) {
      ++skipped["pipeline parallelism: not simulated"];
      continue;
    }
    ServingRow r;
    r.backend = csv.text("backend");
    r.version = csv.text("backend_version");
    r.model_path = csv.text("model_path");
    r.precision = csv.text("precision");
    r.isl = csv.integer("isl", 1, 1 << 24);
    r.osl = csv.integer("osl", 1, 1 << 24);
    r.concurrency = csv.integer("batch_size", 1, 1 << 20);
    r.tp = static_cast<int>(csv.integer("tp_size", 1, 64));
    r.ttft_ms = csv.number("silicon_ttft_ms");
    r.tpot_ms = csv.number("silicon_tpot_ms");
    if (!(r.ttft_ms > 0 && r.tpot_ms > 0)) csv.fail("silicon_ttft_ms and silicon_tpot_ms must be > 0");
    if (r.precision != "" && r.precision != "fp8" && r.precision != "bf16" && r.precision != "fp16") {
      ++skipped[fmt::format("precision {}: not modelled", r.precision)];
      continue;
    }
    r.model = model_for(r.model_path, o);
    if (r.model.empty()) {
      ++skipped[fmt::format("model {}: not built in (give --models-dir with its config.json)", r.model_path)];
      continue;
    }
    rows.push_back(std::move(r));
  }
  if (rows.empty()) throw UserError(fmt::format("{}: no rows to replay for system {}", measurements, o.system));
  return out;
}

ServingPrediction replay_serving_row(const ServingRow& r, const ServingReplayOptions& o, const EngineProfile* engine) {
  RunConfig c = default_run_config();
  c.model = r.model;
  c.gpu = o.gpu;
  c.tp = r.tp;
  c.policy = o.policy.empty() ? policy_for_backend(r) : o.policy;
  c.engine = engine_for_row(r, o);
  c.weight_dtype = r.precision == "fp8" ? "fp8" : "auto";
  ServingPrediction p;
  p.deployment = deployment_of(r, o);
  c.kv_cache_dtype = kv_dtype_for(r, p.deployment);
  const std::string base = policy_base(c.policy);
  if (p.deployment == "aiconfigurator") c.policy_opts = deployment_limits(r, base);
  if (vllm_schedules_async(r) && vllm_family(base)) c.policy_opts["async_scheduling"] = "true";
  // SGLang sizes its KV pool by mem_fraction_static; the rule the sglang policy applies came with
  // v0.5.3 (sglang #10975), and the versions before it (from v0.4.7, sglang #7054) had their own.
  // The same change gave cuda_graph_max_bs its rule by device; before it, 160 on any GPU of 25 GB
  // or more.
  if (r.backend == "sglang" && base == "sglang" && version_before(r, 5, 3)) {
    c.policy_opts["mem_fraction_static"] =
        fmt::format("{:g}", sglang_mem_fraction_static_2025(resolve_gpu(o.gpu).memory_bytes, r.tp));
    c.policy_opts["cuda_graph_max_bs"] = "160";
  }
  c.workload.arrival = "offline";
  c.workload.prompt_len = fmt::format("fixed:{}", r.isl);
  c.workload.output_len = fmt::format("fixed:{}", r.osl);
  c.workload.num_requests = r.concurrency * o.requests_per_client;
  c.max_concurrency = r.concurrency;
  c.workload.think_time = o.think_time;
  RunHooks hooks;
  hooks.engine = engine;
  const RunOutcome run = run_simulation(c, nullptr, hooks);
  const Summary& s = run.result.summary;
  p.ttft_ms = s.ttft_s.mean * 1e3;
  p.tpot_ms = s.tpot_s.mean * 1e3;
  p.rejected = s.requests_rejected;
  p.sequences_per_iteration =
      s.iterations > 0 ? static_cast<double>(s.output_tokens) / static_cast<double>(s.iterations) : 0;
  p.engine = engine != nullptr ? engine->name : c.engine;
  p.config = c;
  return p;
}

int run_validate_serving(const ServingOptions& options, std::ostream& out) {
  ServingOptions o = options;
  if (o.measurements.empty()) throw UserError("validate-serving: --measurements is required");
  if (o.gpu.empty()) throw UserError("validate-serving: --gpu is required");
  check_replay_options(o);
  const HardwareProfile gpu = resolve_gpu(o.gpu);  // a bad name fails here, before any row
  if (!o.profile_out.empty() && gpu.validation.empty()) {
    throw UserError(fmt::format("--profile-out: profile '{}' has no validation block to add the serving figures "
                                "to (fit it first: batchsim validate --profile-out, hwmodel/README.md)",
                                gpu.name));
  }
  if (!o.profile_out.empty() && !o.backend.empty()) {
    throw UserError("--profile-out: records every backend's figures; drop --backend");
  }
  if (!o.policy.empty()) (void)policy_base(o.policy);  // and so does an unknown policy
  o.engines = parse_engine_args(o.engine_args);

  const ServingRows selected = read_serving_rows(o.measurements, o);
  const std::map<std::string, int64_t>& skipped = selected.skipped;

  ErrorGroup every_row;
  std::map<std::string, BackendErrors> by_backend;
  nlohmann::ordered_json report_rows = nlohmann::ordered_json::array();
  for (const ServingRow& r : selected.rows) {
    const ServingPrediction p = replay_serving_row(r, o);
    every_row.add(r, p);
    by_backend[r.backend].add(r, p);
    report_rows.push_back({{"backend", r.backend}, {"backend_version", r.version}, {"policy", p.config.policy},
                           {"engine", p.engine},
                           {"model", r.model_path},
                           {"precision", r.precision.empty() ? "bf16" : r.precision}, {"isl", r.isl}, {"osl", r.osl},
                           {"concurrency", r.concurrency}, {"tp", r.tp}, {"kv_cache_dtype", p.config.kv_cache_dtype},
                           {"deployment", p.deployment}, {"policy_opts", p.config.policy_opts},
                           {"measured_ttft_ms", r.ttft_ms},
                           {"predicted_ttft_ms", p.ttft_ms}, {"measured_tpot_ms", r.tpot_ms},
                           {"predicted_tpot_ms", p.tpot_ms}, {"rejected", p.rejected},
                           {"config", config_to_json(p.config)}});
  }
  const std::vector<ServingRow>& rows = selected.rows;

  fmt::print(out, "{} rows of {} replayed on {} with policy {}, engine {}, {} deployment ({} requests per client{}):\n",
             rows.size(), o.measurements, o.gpu, o.policy.empty() ? "of each backend" : o.policy,
             engines_text(o.engines, "of each backend"), o.deployment, o.requests_per_client,
             think_time_text(o));
  // The medians of predicted / measured say which way the error goes (below 1: short).
  fmt::print(out, "{:<10} {:>6} {:>12} {:>9} {:>12} {:>9}\n", "backend", "rows", "TTFT MAPE %", "TTFT p/m",
             "TPOT MAPE %", "TPOT p/m");
  auto print_group = [&](const std::string& label, const ErrorGroup& g) {
    fmt::print(out, "{:<10} {:>6} {:>12.1f} {:>9.2f} {:>12.1f} {:>9.2f}\n", label, g.count(), ErrorGroup::mape(g.ttft),
               ErrorGroup::median(g.ttft), ErrorGroup::mape(g.tpot), ErrorGroup::median(g.tpot));
  };
  for (const auto& [backend, e] : by_backend) print_group(backend, e.all);
  print_group("all", every_row);
  if (o.breakdown) {
    for (const auto& [backend, e] : by_backend) {
      for (const auto& [key, groups] : e.by) {
        fmt::print(out, "{} by {}:\n", backend, key);
        for (const auto& [value, g] : groups) print_group(fmt::format("  {}", value), g);
      }
    }
  } else {
    fmt::print(out, "(p/m: the median of predicted / measured; --breakdown shows each backend by prompt length, "
                    "clients and TP)\n");
  }
  for (const auto& [why, n] : skipped) fmt::print(out, "skipped {} rows: {}\n", n, why);

  if (!o.profile_out.empty()) {
    HardwareProfile p = gpu;
    p.validation.serving = {};
    p.validation.serving.measured_on = fmt::format(
        "{} rows of {} ({}), closed-loop replay, policy {}, engine {}, {} deployment, {} requests per client{}",
        every_row.count(), std::filesystem::path(o.measurements).filename().string(), o.system,
        o.policy.empty() ? "by backend" : o.policy, engines_text(o.engines, "by backend"), o.deployment,
        o.requests_per_client, think_time_text(o));
    // Rounded to 0.1 as the operators' figures are, so that the file reads back the same.
    auto tenth = [](double x) { return std::round(x * 10) / 10; };
    auto hundredth = [](double x) { return std::round(x * 100) / 100; };
    for (const auto& [backend, e] : by_backend) {
      p.validation.serving.backends.push_back({backend, tenth(ErrorGroup::mape(e.all.ttft)),
                                               tenth(ErrorGroup::mape(e.all.tpot)),
                                               hundredth(ErrorGroup::median(e.all.ttft)),
                                               hundredth(ErrorGroup::median(e.all.tpot)), e.all.count()});
    }
    save_hardware_profile(p, o.profile_out);
    fmt::print(out, "wrote {}\n", o.profile_out);
  }
  if (!o.out.empty()) {
    nlohmann::ordered_json j;
    j["measurements"] = o.measurements;
    j["gpu"] = o.gpu;
    j["policy"] = o.policy.empty() ? "by backend" : o.policy;
    j["engine"] = engines_text(o.engines, "by backend");
    j["deployment"] = o.deployment;
    j["requests_per_client"] = o.requests_per_client;
    j["think_time"] = o.think_time;
    j["units"] = "mape in percent: mean of |predicted / measured - 1| * 100; median_ratio: the median of "
                 "predicted / measured (below 1: predicted short); times in ms (means over requests)";
    j["ttft"] = {{"mape", ErrorGroup::mape(every_row.ttft)}, {"median_ratio", ErrorGroup::median(every_row.ttft)},
                 {"count", every_row.count()}};
    j["tpot"] = {{"mape", ErrorGroup::mape(every_row.tpot)}, {"median_ratio", ErrorGroup::median(every_row.tpot)},
                 {"count", every_row.count()}};
    for (const auto& [backend, e] : by_backend) {
      nlohmann::ordered_json b = e.all.to_json();
      for (const auto& [key, groups] : e.by) {
        for (const auto& [value, g] : groups) b["by_" + key][std::to_string(value)] = g.to_json();
      }
      j["by_backend"][backend] = b;
    }
    j["skipped"] = nlohmann::ordered_json::object();
    for (const auto& [why, n] : skipped) j["skipped"][why] = n;
    j["rows"] = report_rows;
    auto file = open_for_write(o.out);
    file << j.dump(2) << '\n';
    fmt::print(out, "wrote {}\n", o.out);
  }
  return 0;
}

}  // namespace batchsim
