// batchsim — `batchsim validate-serving` (see validate_serving.h).
#include "experiments/fidelity/validate_serving.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <ostream>
#include <tuple>
#include <vector>

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
#include "hwmodel/parallel_layout.h"
#include "hwmodel/weight_format.h"
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
    return {{"ttft_mape", mape(ttft)},
            {"ttft_median_ratio", median(ttft)},
            {"tpot_mape", mape(tpot)},
            {"tpot_median_ratio", median(tpot)},
            {"count", count()}};
  }
};

// A backend's rows, all together and grouped by what a deployment chooses: the prompt length,
// the number of clients and the TP degree, so that a reader sees where the error lies.
struct BackendErrors {
  ErrorGroup all;
  // (what the rows are grouped by, value -> its rows), in this order.
  std::vector<std::pair<std::string, std::map<int64_t, ErrorGroup>>> by = {
      {"isl", {}}, {"concurrency", {}}, {"tp", {}}};

  void add(const ServingRow& r, const ServingPrediction& p) {
    all.add(r, p);
    by[0].second[r.isl].add(r, p);
    by[1].second[r.concurrency].add(r, p);
    by[2].second[r.tp].add(r, p);
  }
};

// Two rows are one measurement dumped twice when their TTFT and TPOT agree to this relative
// tolerance (the dumps a silicon file merges re-print a measurement, sometimes a digit apart in
// the 17th place). MeasurementIndex and the recorded-twin rule both judge by it.
constexpr double kSameMeasurementTolerance = 1e-9;

// Measurements seen so far, to find a row that repeats an earlier one (kSameMeasurementTolerance).
class MeasurementIndex {
 public:
  // The id of an earlier measurement equal to (ttft_ms, tpot_ms), or nullptr after recording
  // this one under `id`.
  const std::string* find_or_add(double ttft_ms, double tpot_ms, const std::string& id) {
    const double last = ttft_ms * (1 + kSameMeasurementTolerance);
    for (auto it = seen_.lower_bound(ttft_ms * (1 - kSameMeasurementTolerance)); it != seen_.end() && it->first <= last;
         ++it) {
      if (std::abs(it->second.first / tpot_ms - 1) <= kSameMeasurementTolerance) return &it->second.second;
    }
    seen_.emplace(ttft_ms, std::pair{tpot_ms, id});
    return nullptr;
  }

 private:
  std::multimap<double, std::pair<double, std::string>> seen_;  // TTFT -> (TPOT, id)
};

// A row's layout as the report names it: "TP 4, EP 4", or a disaggregated row's pools
// "1 x (TP 8) + 2 x (TP 8)".
std::string layout_text(const ServingRow& r) {
  if (r.mode != "disagg") return r.layout().text();
  return fmt::format("{} x ({}) + {} x ({})", r.prefill.workers, r.prefill.layout.text(), r.decode.workers,
                     r.decode.layout.text());
}

// One model's rows of one backend and mode (the report of a mixture-of-experts or disaggregated
// file): every row, and the distinct measurements (a row repeating an earlier replayed row's
// TTFT and TPOT counted once) with their groups by prompt length, clients and layout.
struct ModelErrors {
  ErrorGroup all, distinct;
  std::map<int64_t, ErrorGroup> by_isl, by_concurrency;
  std::map<std::string, ErrorGroup> by_layout;

  void add(const ServingRow& r, const ServingPrediction& p, bool first) {
    all.add(r, p);
    if (!first) return;
    distinct.add(r, p);
    by_isl[r.isl].add(r, p);
    by_concurrency[r.concurrency].add(r, p);
    by_layout[layout_text(r)].add(r, p);
  }
};

// Whether base `base` reads option `key` (its option schema declares it). The limits below are
// given under the option names of the policy's scheduler, so each goes only to a base that reads
// it: SGLang's names to the sglang base, vLLM's to the continuous and chunked-prefill bases.
bool reads_option(const std::string& base, std::string_view key) {
  const std::vector<PolicyOptionDoc>& docs = policy_option_docs(base);
  return std::any_of(docs.begin(), docs.end(), [&](const PolicyOptionDoc& d) { return d.key == key; });
}

std::string policy_for_backend(const ServingRow& r);

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
// where B, the deployment's max_batch_size, is taken as the row's concurrency per attention-DP
// rank (the benchmark's estimated_concurrency is workers x max_batch_size, and each rank's
// scheduler has its own cap: vLLM's EngineCore per DP rank, TensorRT-LLM's executor per rank
// under enable_attention_dp; a concurrency sweep on a deployment sized for another B moves the
// token budget by B - concurrency tokens, and a sequence cap above the concurrency never binds
// under closed-loop clients). A disaggregated row's pools get the same rules' `prefill` and
// `decode` lines: the prefill pool max_batch_size prefill_batch_size (blank: the rule's 1) and a
// token budget of isl + 1500 (TensorRT-LLM: rounded up to 32), the decode pool decode_batch_size
// (blank: the rule's 128) and a budget of B tokens (TensorRT-LLM: rounded up to 32); SGLang's
// --max-prefill-tokens isl + 1500 in both, mixed chunks in neither. The limits are given under
// the option names of the policy's scheduler (`base`: SGLang's where it reads
// max_running_requests, vLLM's where it reads max_num_seqs and max_num_batched_tokens); a base
// that reads neither (static batching) gets none.
std::map<std::string, std::string> deployment_limits(const ServingRow& r, const std::string& base, PoolRole role) {
  int64_t batch = (r.concurrency + r.dp - 1) / r.dp;
  if (role == PoolRole::kPrefill) batch = r.prefill.batch > 0 ? r.prefill.batch : 1;
  if (role == PoolRole::kDecode) batch = r.decode.batch > 0 ? r.decode.batch : 128;
  const auto b = std::to_string(batch);
  if (reads_option(base, "max_running_requests")) {
    std::map<std::string, std::string> limits = {{"max_running_requests", b},
                                                 {"max_prefill_tokens", std::to_string(r.isl + 1500)}};
    if (role == PoolRole::kColocated) limits["enable_mixed_chunk"] = "true";
    return limits;
  }
  if (!reads_option(base, "max_num_seqs") || !reads_option(base, "max_num_batched_tokens")) return {};
  int64_t tokens = role == PoolRole::kColocated ? batch + r.isl + 1500
                   : role == PoolRole::kPrefill ? r.isl + 1500
                                                : batch;
  if (r.backend == "trtllm") tokens = (tokens + 31) / 32 * 32;
  std::map<std::string, std::string> limits = {{"max_num_seqs", b}, {"max_num_batched_tokens", std::to_string(tokens)}};
  // TensorRT-LLM's KV rule is an option of the base its preset (policy_for_backend) lives on.
  if (r.backend == "trtllm" && base == policy_base(policy_for_backend(r))) limits["free_gpu_memory_fraction"] = "0.8";
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

// ", think time uniform:0:0.03 s" when the replay's clients think, ", MoE routing power:1.2" when
// it is given.
std::string think_time_text(const ServingReplayOptions& o) {
  return (o.think_time.empty() ? "" : fmt::format(", think time {} s", o.think_time)) +
         (o.moe_routing.empty() ? "" : fmt::format(", MoE routing {}", o.moe_routing));
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
  if (!o.moe_routing.empty()) check_moe_routing(o.moe_routing);
}

namespace {

// The rules read_serving_rows applies where a row's columns contradict what ran, each checked on
// the rows it changes (docs/validation.md, "Mixtures of experts", lists them with their
// evidence).
const ServingNormalisation kVllmDep{
    "vllm-dep",
    "vLLM rows with tp_size = attention_dp_size > 1 ran attention DP on attention_dp_size GPUs (TP 1 per rank), "
    "not on tp x attention_dp: read as TP 1 x DP attention_dp_size with the experts over those GPUs, EP when "
    "moe_ep_size > 1 (vLLM's --enable-expert-parallel makes EP = TP x DP), else TP. Every vLLM row with attention "
    "DP in aiconfigurator's silicon sample has tp = attention_dp; NVIDIA's MiniMax-M2.5 DP rows say tp4_ep4 in "
    "their ids, decode within 1% of the 4-GPU TEP rows at equal concurrency, and queue to the KV capacity of 4 "
    "GPUs"};
const ServingNormalisation kTrtllmAttentionDp{
    "trtllm-attention-dp",
    "TensorRT-LLM rows whose silicon_concurrency is batch_size x tp_size (tp_size > 1, attention_dp_size blank) "
    "ran attention DP over tp_size GPUs: the concurrency is batch_size per attention-DP rank x the ranks "
    "(aiconfigurator sdk/backends/base_backend.py l.1361-1363), and TensorRT-LLM's tp_size is the world size "
    "with enable_attention_dp beside it (generator/rule_plugin/trtllm.rule l.30-37), so the column holds the "
    "GPUs and the DP flag was lost: read as TP 1 x DP tp_size, the experts as recorded"};
const ServingNormalisation kCheckpointFormat{
    "checkpoint-format",
    "rows whose gemm/moe quant modes differ from the checkpoint's quantization_config run the checkpoint's "
    "formats: an engine loads the scales the checkpoint has (vLLM takes the method from config.json and refuses "
    "a --quantization that differs, vllm/config/model.py _verify_quantization) and none requantises one FP8 or "
    "FP4 format into another. MiniMax-M2.5's, Qwen3-235B-A22B-FP8's and DeepSeek's fp8 labels are 128 x 128 "
    "block-FP8 checkpoints, gpt-oss-120b's nvfp4 and fp8 labels an MXFP4 one with 16-bit attention (on Hopper "
    "aiconfigurator itself costs nvfp4 as 4-bit weights at the 16-bit rate, sdk/models/helpers.py "
    "resolve_nvfp4_for_system)"};
const ServingNormalisation kClientConnectionPool{
    "client-connection-pool",
    "vLLM rows of NVIDIA's campaign of 2025-12-05 and 2025-12-08 (gpt-oss-120b, vLLM 0.11.2; silicon_data_source "
    "measured=2025-12-..., all nine at 512 clients) ran with at most 100 requests at the server: each row's own "
    "Little's law (clients x decode time / (TTFT + decode time)) puts 96-106 requests in flight, where every other "
    "campaign's rows at 128 to 4,916 clients put 107-126 of 128 and more. 100 is the default pool of aiohttp's "
    "TCPConnector (limit=100), which vLLM's and aiperf's benchmark clients are built on, and of httpx's "
    "max_connections; the campaign's client is not recorded. Replayed with a 100-connection client pool "
    "(--client-connections 100): the other requests wait at the client, their clock running"};

const ServingNormalisation kVllmExpertsTp{
    "vllm-experts-tp",
    "vLLM rows that record neither moe_tp_size nor moe_ep_size ran vLLM's default: the experts tensor-parallel "
    "over the worker's tp x attention_dp GPUs (without --enable-expert-parallel the MoE group is TP, "
    "vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make); both such rows of NVIDIA's "
    "Qwen3-235B P/D campaign say epnone in their ids. aiconfigurator's resolve_moe_parallelism refuses the blank "
    "pair; read as MoE TP over the worker, EP 1"};
const ServingNormalisation kRecordedTwin{
    "recorded-twin",
    "disaggregated rows without worker counts whose TTFT and TPOT equal, to 1e-9, those of a row with the same "
    "backend, lengths and concurrency that records them are that row's measurement dumped twice and replay its "
    "pools: workers, batch sizes and layouts. NVIDIA's DeepSeek-R1 dumps of 2026-03-25 and 2026-04-06 repeat "
    "thirteen rows of the DeepSeek-V3 configs 494 and 503 (db-dump of 2026-04-27, ids dsr1_...), which record "
    "1 prefill worker of TP 1 x attention DP 16, EP 16 and 2-3 decode workers of TP 16, EP 16; the repeats write "
    "the prefill as TP 16 with EP 16 and no DP, the DP flag lost as in rule trtllm-attention-dp. Their other rows "
    "keep no trace of their workers and stay skipped"};

const ServingNormalisation kSglangOnePair{
    "sglang-one-pair",
    "SGLang disaggregated rows without worker counts (NVIDIA's DeepSeek-R1 dumps of 2026-03-25 and 2026-04-06, "
    "prefill and decode TP 16, SGLang 0.5.8) are ASSUMED to have run one prefill and one decode worker, the "
    "smallest P/D deployment. For: their TPOT at 1,024/1,024 tokens follows one decode worker's batch from 1 to 128 "
    "clients (128: 31.9 ms replayed with one decode worker, 25.8 with two, 31.7 measured), and at 1,024/8,192 the "
    "TTFT jumps from 0.6 to 11 s between 32 and 64 clients, where 64 requests' KV outgrows one TP 16 decode "
    "worker (SGLang preallocates the decode KV before it prefills, which the replay does not). Against: the two "
    "dumps disagree at 1,024/8,192 (TPOT 7.7-13.8 ms against 17-30 ms at equal clients), so one of them ran a "
    "setting the columns do not show. The report's DeepSeek-R1 sglang line keeps these rows apart"};

// A field of silicon_data_source ("key=value; ..."), empty when the row does not have it.
std::string source_field(const CsvTable& csv, std::string_view key) {
  const std::string& source = csv.text("silicon_data_source");
  const std::string needle = std::string(key) + "=";
  auto at = source.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  const auto end = source.find(';', at);
  return source.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// Skip reasons of disaggregated rows. Rows without worker counts (NVIDIA's DeepSeek-R1 dumps of
// 2026-03-25 and 2026-04-06) are not given a guessed count, unless they repeat a row that records
// it (kRecordedTwin).
constexpr const char* kNoWorkers =
    "no worker counts in the row (aiconfigurator's own estimator refuses them: "
    "tools/accuracy_regression_testing/predict_silicon_sample.py)";

// A whole number of `column` in [min, max], `blank` when the field is empty.
int64_t integer_or(const CsvTable& csv, std::string_view column, int64_t blank, int64_t min, int64_t max) {
  if (csv.text(column).empty()) return blank;
  return csv.integer(column, min, max);
}

// The client concurrency the benchmark ran (silicon_concurrency=N in silicon_data_source: the
// client's --max-concurrency), 0 when the row does not say.
int64_t silicon_concurrency(const CsvTable& csv) {
  const std::string& source = csv.text("silicon_data_source");
  const auto at = source.find("silicon_concurrency=");
  if (at == std::string::npos) return 0;
  const std::string field = source_field(csv, "silicon_concurrency");
  const std::string digits = field.substr(0, field.find_first_not_of("0123456789"));
  if (digits.empty() || digits.size() > 7 || std::stoll(digits) < 1) {
    csv.fail(
        fmt::format("column 'silicon_data_source': '{}' is not a concurrency from 1 to 9999999", source.substr(at)));
  }
  return std::stoll(digits);
}

// One worker's layout in aiconfigurator's columns (`prefix`: "", "prefill_" or "decode_"): tp_size
// the attention TP of one attention-DP rank, attention_dp_size the ranks (blank: 1), pp_size,
// and the experts' moe_tp_size x moe_ep_size (0 or blank: not recorded).
struct ColumnLayout {
  int tp = 1, adp = 1, pp = 1, moe_tp = 0, moe_ep = 0;
};
ColumnLayout read_column_layout(const CsvTable& csv, const std::string& prefix) {
  ColumnLayout c;
  c.tp = static_cast<int>(csv.integer(prefix + "tp_size", 1, 1024));
  c.adp = static_cast<int>(integer_or(csv, prefix + "attention_dp_size", 1, 1, 1024));
  c.pp = static_cast<int>(integer_or(csv, prefix + "pp_size", 1, 1, 1024));
  c.moe_tp = static_cast<int>(integer_or(csv, prefix + "moe_tp_size", 0, 0, 1024));
  c.moe_ep = static_cast<int>(integer_or(csv, prefix + "moe_ep_size", 0, 0, 1024));
  return c;
}

// RunConfig's layout of a worker (parallel_layout.h: the same convention as aiconfigurator's
// columns, tp x dp GPUs = ep x moe_tp), or why there is none. For a mixture of experts the
// width rule (aiconfigurator aic-core/src/aiconfigurator_core/sdk/config.py,
// ModelConfig.resolve_moe_parallelism: tp x attention_dp = moe_tp x moe_ep, a missing size
// inferred from the other, both missing an error) and the model's own divisibility
// (check_layout); a dense model runs on tp alone.
std::string resolve_layout(const ColumnLayout& c, const ModelSpec& model, ParallelLayout& out) {
  if (!model.is_moe()) {
    if (c.adp > 1) return "attention DP of a dense model (independent replicas): not replayed";
    out = ParallelLayout{c.tp, 1, 1, 0};
    return "";
  }
  const int width = c.tp * c.adp;
  int moe_tp = c.moe_tp, moe_ep = c.moe_ep;
  if (moe_tp == 0 && moe_ep == 0) {
    return "moe_tp_size and moe_ep_size not recorded (aiconfigurator's resolve_moe_parallelism refuses that too)";
  }
  if (moe_tp == 0 && width % moe_ep == 0) moe_tp = width / moe_ep;
  if (moe_ep == 0 && width % moe_tp == 0) moe_ep = width / moe_tp;
  if (moe_tp * moe_ep != width) {
    return "tp_size x attention_dp_size != moe_tp_size x moe_ep_size (aiconfigurator's width rule, sdk/config.py "
           "resolve_moe_parallelism)";
  }
  out = ParallelLayout{c.tp, c.adp, moe_ep, moe_tp};
  try {
    check_layout(model, out);
  } catch (const UserError& e) {
    return fmt::format("layout {}: {}", out.text(), e.what());
  }
  return "";
}

// Rule kVllmExpertsTp: a vLLM row of a mixture of experts with neither expert size recorded runs
// vLLM's default, the experts TP over the worker. True when it changed `c`.
bool apply_vllm_experts_tp(const ServingRow& r, const ModelSpec& model, ColumnLayout& c) {
  if (r.backend != "vllm" || !model.is_moe() || c.moe_tp != 0 || c.moe_ep != 0) return false;
  c.moe_ep = 1;  // resolve_layout infers moe_tp = tp x attention_dp
  return true;
}

// Rule kRecordedTwin: the disaggregated rows of a file that record their pools' workers, by
// measurement, for the rows that repeat one of them without.
struct RecordedPools {
  std::string backend;
  ColumnLayout columns[2];  // prefill, decode
  int64_t isl = 0, osl = 0, concurrency = 0;
  double ttft_ms = 0, tpot_ms = 0;
  ServingPool prefill, decode;  // workers and batch only
};
class RecordedWorkers {
 public:
  RecordedWorkers(const std::string& measurements, const std::string& system) {
    CsvTable csv(measurements);
    while (csv.next()) {
      if (csv.text("system") != system || csv.text("mode") != "disagg") continue;
      RecordedPools p;
      p.prefill.workers = static_cast<int>(integer_or(csv, "prefill_num_workers", 0, 0, 4096));
      p.decode.workers = static_cast<int>(integer_or(csv, "decode_num_workers", 0, 0, 4096));
      if (p.prefill.workers == 0 || p.decode.workers == 0) continue;
      p.prefill.batch = integer_or(csv, "prefill_batch_size", 0, 0, 1 << 20);
      p.decode.batch = integer_or(csv, "decode_batch_size", 0, 0, 1 << 20);
      p.backend = csv.text("backend");
      p.columns[0] = read_column_layout(csv, "prefill_");
      p.columns[1] = read_column_layout(csv, "decode_");
      p.isl = csv.integer("isl", 1, 1 << 24);
      p.osl = csv.integer("osl", 1, 1 << 24);
      p.concurrency = silicon_concurrency(csv);
      p.ttft_ms = csv.number("silicon_ttft_ms");
      p.tpot_ms = csv.number("silicon_tpot_ms");
      rows_.push_back(std::move(p));
    }
  }
  // The recorded row `r` repeats, or nullptr.
  const RecordedPools* find(const ServingRow& r) const {
    for (const RecordedPools& p : rows_) {
      if (p.backend == r.backend && p.isl == r.isl && p.osl == r.osl && p.concurrency == r.concurrency &&
          std::abs(p.ttft_ms / r.ttft_ms - 1) <= kSameMeasurementTolerance &&
          std::abs(p.tpot_ms / r.tpot_ms - 1) <= kSameMeasurementTolerance) {
        return &p;
      }
    }
    return nullptr;
  }

 private:
  std::vector<RecordedPools> rows_;
};

// The weight format a quant-mode label names (aiconfigurator's gemm_quant_mode, moe_quant_mode
// and precision spellings), or nullopt for one the cost model has not.
std::optional<WeightFormat> label_format(const std::string& label) {
  for (const char* sixteen : {"", "bf16", "bfloat16", "fp16", "float16"}) {
    if (label == sixteen) return WeightFormat::bf16;
  }
  if (label == "fp8" || label == "fp8_static") return WeightFormat::fp8;
  if (label == "fp8_block") return WeightFormat::fp8_block;
  if (label == "nvfp4" || label == "fp4") return WeightFormat::nvfp4;
  if (label == "mxfp4" || label == "w4a16_mxfp4") return WeightFormat::mxfp4;
  return std::nullopt;
}

// The row's --weight-dtype from its labels and the checkpoint (`model`), or why there is none.
// A quantized checkpoint runs in its own formats (kCheckpointFormat, `normalised` when the labels
// say otherwise); a 16-bit one in the label's (vLLM --quantization fp8 on a 16-bit checkpoint).
std::string resolve_weight_dtype(const CsvTable& csv, const ModelSpec& model, std::string& weight_dtype,
                                 bool& normalised) {
  const std::string& precision = csv.text("precision");
  std::string gemm = csv.has("gemm_quant_mode") ? csv.text("gemm_quant_mode") : "";
  std::string moe = csv.has("moe_quant_mode") ? csv.text("moe_quant_mode") : "";
  if (gemm.empty()) gemm = precision;
  if (moe.empty()) moe = gemm;
  const std::optional<WeightFormat> gemm_format = label_format(gemm);
  const std::optional<WeightFormat> moe_format = label_format(moe);
  if (!gemm_format) return fmt::format("precision {}: not modelled", gemm);
  if (!moe_format) return fmt::format("moe_quant_mode {}: not modelled", moe);
  const WeightFormat own = model.weight_format;
  const WeightFormat own_experts = model.is_moe() ? model.expert_weight_format : model.weight_format;
  normalised = false;
  if (own != WeightFormat::bf16 || own_experts != WeightFormat::bf16) {
    normalised = *gemm_format != own || (model.is_moe() && *moe_format != own_experts);
    weight_dtype = own == own_experts ? std::string(weight_format_name(own)) : "auto";
    return "";
  }
  if (model.is_moe() && *gemm_format != *moe_format) {
    return fmt::format("gemm_quant_mode {} and moe_quant_mode {} on a 16-bit checkpoint: one --weight-dtype sets both",
                       gemm, moe);
  }
  weight_dtype = *gemm_format == WeightFormat::bf16 ? "auto" : std::string(weight_format_name(*gemm_format));
  return "";
}

}  // namespace

const std::vector<ServingNormalisation>& serving_normalisations() {
  static const std::vector<ServingNormalisation> rules = {
      kVllmDep,       kTrtllmAttentionDp, kVllmExpertsTp,       kRecordedTwin,
      kSglangOnePair, kCheckpointFormat,  kClientConnectionPool};
  return rules;
}

namespace {

// An aggregated row's layout (TP, attention DP, the experts' EP or TP) and concurrency into `r`,
// with the rules that correct its columns; the reason to skip it, or "" (csv.fail where a row
// cannot be read at all).
std::string read_aggregated_layout(CsvTable& csv, const ModelSpec& model, ServingRow& r) {
  ColumnLayout c = read_column_layout(csv, "");
  if (apply_vllm_experts_tp(r, model, c)) r.normalisations.push_back(kVllmExpertsTp.name);
  if (c.pp != 1) return "pipeline parallelism: not simulated";
  // Concurrency: the client's where recorded, else batch_size per attention-DP rank x the
  // ranks (aiconfigurator sdk/backends/base_backend.py l.711-713 and l.1361-1363).
  const int64_t batch = integer_or(csv, "batch_size", 0, 1, 1 << 20);
  if (r.concurrency == 0) r.concurrency = batch * c.adp;
  if (r.concurrency == 0) csv.fail("no concurrency: neither silicon_concurrency nor batch_size");
  if (model.is_moe() && r.backend == "vllm" && c.adp > 1 && c.tp == c.adp) {
    c.tp = 1;
    c.moe_tp = c.moe_ep > 1 ? 1 : c.adp;
    c.moe_ep = c.adp / c.moe_tp;
    r.normalisations.push_back(kVllmDep.name);
  }
  if (model.is_moe() && r.backend == "trtllm" && c.adp == 1 && c.tp > 1 && csv.text("attention_dp_size").empty() &&
      batch > 0 && r.concurrency == batch * c.tp) {
    c.adp = c.tp;
    c.tp = 1;
    r.normalisations.push_back(kTrtllmAttentionDp.name);
  }
  ParallelLayout layout;
  if (const std::string why = resolve_layout(c, model, layout); !why.empty()) return why;
  r.tp = layout.tp;
  r.dp = layout.dp;
  r.ep = layout.ep;
  r.moe_tp = layout.moe_tp;
  return "";
}

// A disaggregated row's prefill and decode pools (workers, batch, layout) and concurrency into
// `r`: its own columns, or its recorded twin's, or SGLang's assumed pair; the reason to skip it,
// or "".
std::string read_disaggregated_pools(CsvTable& csv, const ModelSpec& model, const RecordedWorkers& recorded,
                                     const ServingReplayOptions& o, ServingRow& r) {
  // Prefill and decode pools: each pool's workers and layout, the concurrency of the decode
  // pool's batches where the client's is not recorded (the generator's estimated_concurrency,
  // generator/rule_plugin/benchmark/*.rule l.1).
  ServingPool* pools[] = {&r.prefill, &r.decode};
  ColumnLayout columns[2];
  for (int i = 0; i < 2; ++i) {
    const std::string prefix = i == 0 ? "prefill_" : "decode_";
    pools[i]->workers = static_cast<int>(integer_or(csv, prefix + "num_workers", 0, 0, 4096));
    pools[i]->batch = integer_or(csv, prefix + "batch_size", 0, 0, 1 << 20);
  }
  std::string why;
  const RecordedPools* twin = nullptr;
  if (r.prefill.workers == 0 || r.decode.workers == 0) {
    if ((twin = recorded.find(r)) != nullptr) {
      // The same measurement: its recorded pools, layouts included (the twin's columns
      // are the ones its workers were recorded with).
      for (int i = 0; i < 2; ++i) {
        const ServingPool& from = i == 0 ? twin->prefill : twin->decode;
        pools[i]->workers = from.workers;
        pools[i]->batch = from.batch;
        columns[i] = twin->columns[i];
      }
      r.normalisations.push_back(kRecordedTwin.name);
    } else if (r.backend == "sglang") {
      r.prefill.workers = 1;
      r.decode.workers = 1;
      r.normalisations.push_back(kSglangOnePair.name);
    } else {
      why = kNoWorkers;
    }
  }
  // The row's own layout columns, unless a twin's replaced them (a skipped row's may be blank).
  if (why.empty() && twin == nullptr) {
    columns[0] = read_column_layout(csv, "prefill_");
    columns[1] = read_column_layout(csv, "decode_");
  }
  bool experts_tp = false;
  for (int i = 0; i < 2 && why.empty(); ++i) {
    experts_tp = apply_vllm_experts_tp(r, model, columns[i]) || experts_tp;
    if (columns[i].pp != 1)
      why = "pipeline parallelism: not simulated";
    else if (const std::string bad = resolve_layout(columns[i], model, pools[i]->layout); !bad.empty())
      why = bad;
  }
  if (experts_tp) r.normalisations.push_back(kVllmExpertsTp.name);
  if (why.empty()) {
    // The pools run the row's policy, which must have the prefill and decode roles.
    const std::string policy = o.policy.empty() ? policy_for_backend(r) : o.policy;
    const std::string refused = make_policy(policy, PolicyOptions())->unsupported_role_reason(PoolRole::kPrefill);
    if (!refused.empty()) why = fmt::format("P/D pools on the {} policy: {}", policy, refused);
  }
  if (!why.empty()) return why;
  // decode_batch_size is per attention-DP rank, as batch_size is (above).
  if (r.concurrency == 0) r.concurrency = r.decode.batch * r.decode.layout.dp * r.decode.workers;
  if (r.concurrency == 0) return "no concurrency recorded (silicon_concurrency, decode_batch_size)";
  r.tp = r.prefill.layout.tp;
  return "";
}

}  // namespace

ServingRows read_serving_rows(const std::string& measurements, const ServingReplayOptions& o) {
  const RecordedWorkers recorded(measurements, o.system);
  CsvTable csv(measurements);
  ServingRows out;
  std::vector<ServingRow>& rows = out.rows;
  std::map<std::string, int64_t>& skipped = out.skipped;
  MeasurementIndex measurements_seen;
  while (csv.next()) {
    if (csv.text("system") != o.system) {
      ++skipped[fmt::format("system {} (not {})", csv.text("system"), o.system)];
      continue;
    }
    if (!o.backend.empty() && csv.text("backend") != o.backend) continue;
    ServingRow r;
    r.id = csv.has("id") ? csv.text("id") : "";
    r.backend = csv.text("backend");
    r.version = csv.text("backend_version");
    r.model_path = csv.text("model_path");
    r.precision = csv.text("precision");
    r.mode = csv.text("mode");
    r.ttft_ms = csv.number("silicon_ttft_ms");
    r.tpot_ms = csv.number("silicon_tpot_ms");
    if (!(r.ttft_ms > 0 && r.tpot_ms > 0)) csv.fail("silicon_ttft_ms and silicon_tpot_ms must be > 0");
    if (const std::string* earlier = measurements_seen.find_or_add(r.ttft_ms, r.tpot_ms, r.id)) {
      r.repeats = *earlier;
      ++out.repeated;
    }
    const bool disaggregated = r.mode == "disagg";
    if (disaggregated) out.moe_or_disaggregated = true;
    if (r.mode != "agg" && !disaggregated) {
      ++skipped[fmt::format("{} serving: not simulated", r.mode)];
      continue;
    }
    r.isl = csv.integer("isl", 1, 1 << 24);
    r.osl = csv.integer("osl", 1, 1 << 24);
    r.concurrency = silicon_concurrency(csv);

    // The model: its checkpoint decides what a layout and a label mean.
    r.model = model_for(r.model_path, o);
    if (r.model.empty()) {
      ++skipped[fmt::format("model {}: not built in (give --models-dir with its config.json)", r.model_path)];
      continue;
    }
    ModelSpec model;
    try {
      model = resolve_model(r.model);
    } catch (const UserError& e) {
      ++skipped[fmt::format("model {}: {}", r.model_path, e.what())];
      continue;
    }
    if (model.is_moe()) out.moe_or_disaggregated = true;

    if (const std::string why = disaggregated ? read_disaggregated_pools(csv, model, recorded, o, r)
                                              : read_aggregated_layout(csv, model, r);
        !why.empty()) {
      ++skipped[why];
      continue;
    }

    bool relabelled = false;
    if (const std::string why = resolve_weight_dtype(csv, model, r.weight_dtype, relabelled); !why.empty()) {
      ++skipped[why];
      continue;
    }
    if (relabelled) r.normalisations.push_back(kCheckpointFormat.name);
    if (constexpr int64_t kPool = 100;
        r.backend == "vllm" && source_field(csv, "measured").starts_with("2025-12-") && r.concurrency > kPool) {
      r.client_connections = kPool;
      r.normalisations.push_back(kClientConnectionPool.name);
    }
    for (const std::string& rule : r.normalisations) ++out.normalised[rule];
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
  c.dp = r.dp;
  c.ep = r.ep;
  c.moe_tp = r.moe_tp;
  c.policy = o.policy.empty() ? policy_for_backend(r) : o.policy;
  c.engine = engine_for_row(r, o);
  c.weight_dtype = r.weight_dtype;
  ServingPrediction p;
  p.deployment = deployment_of(r, o);
  c.kv_cache_dtype = kv_dtype_for(r, p.deployment);
  const std::string base = policy_base(c.policy);
  const bool disaggregated = r.mode == "disagg";
  if (disaggregated) {
    // Prefill and decode pools of the row's workers, each on its own TP, the run's policy and
    // engine, the KV moved over the run's default link (sim/kv_transfer.h).
    c.prefill_replicas = r.prefill.workers;
    c.decode_replicas = r.decode.workers;
    for (auto [pool, row] : {std::pair{&c.prefill, &r.prefill}, std::pair{&c.decode, &r.decode}}) {
      pool->tp = row->layout.tp;
      if (row->layout.dp != 1) pool->dp = row->layout.dp;
      if (row->layout.ep != 1) pool->ep = row->layout.ep;
      if (row->layout.moe_tp != 0) pool->moe_tp = row->layout.moe_tp;
    }
  }
  if (p.deployment == "aiconfigurator") {
    if (disaggregated) {
      c.prefill.policy_opts = deployment_limits(r, base, PoolRole::kPrefill);
      c.decode.policy_opts = deployment_limits(r, base, PoolRole::kDecode);
    } else {
      c.policy_opts = deployment_limits(r, base, PoolRole::kColocated);
    }
  }
  if (vllm_schedules_async(r) && reads_option(base, "async_scheduling")) c.policy_opts["async_scheduling"] = "true";
  // SGLang sizes its KV pool by mem_fraction_static; the rule the sglang policy applies came with
  // v0.5.3 (sglang #10975), and the versions before it (from v0.4.7, sglang #7054) had their own.
  // The same change gave cuda_graph_max_bs its rule by device; before it, 160 on any GPU of 25 GB
  // or more.
  if (r.backend == "sglang" && reads_option(base, "mem_fraction_static") && version_before(r, 5, 3)) {
    c.policy_opts["mem_fraction_static"] =
        fmt::format("{:g}", sglang_mem_fraction_static_2025(resolve_gpu(o.gpu).memory_bytes, r.tp));
    c.policy_opts["cuda_graph_max_bs"] = "160";
  }
  c.workload.arrival = "offline";
  c.workload.prompt_len = fmt::format("fixed:{}", r.isl);
  c.workload.output_len = fmt::format("fixed:{}", r.osl);
  c.workload.num_requests = r.concurrency * o.requests_per_client;
  c.max_concurrency = r.concurrency;
  c.client_connections = r.client_connections;
  c.workload.think_time = o.think_time;
  if (!o.moe_routing.empty()) c.moe_routing = o.moe_routing;
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

namespace {

// The errors of a file's replayed rows, grouped as the report shows them.
struct ServingReplay {
  ServingRows selected;
  ErrorGroup every_row, every_distinct;
  std::map<std::string, BackendErrors> by_backend;
  // (model, backend, mode) -> its rows.
  std::map<std::tuple<std::string, std::string, std::string>, ModelErrors> by_model;
  nlohmann::ordered_json report_rows = nlohmann::ordered_json::array();
  int64_t rows_read = 0;
  int64_t repeats_replayed = 0;
  // A file of mixture-of-experts or disaggregated serving gets the report's further parts; a
  // dense aggregated file's report keeps its form.
  bool moe_report() const { return selected.moe_or_disaggregated; }
};

// Options that cannot go together, and names that do not resolve, fail before any row runs.
void check_serving_options(const ServingOptions& o, const HardwareProfile& gpu) {
  if (!o.profile_out.empty() && gpu.validation.empty()) {
    throw UserError(
        fmt::format("--profile-out: profile '{}' has no validation block to add the serving figures "
                    "to (fit it first: batchsim validate --profile-out, hwmodel/README.md)",
                    gpu.name));
  }
  if (!o.profile_out.empty() && !o.backend.empty()) {
    throw UserError("--profile-out: records every backend's figures; drop --backend");
  }
  if (!o.policy.empty()) (void)policy_base(o.policy);  // and so does an unknown policy
}

// The --out row of one replayed measurement.
nlohmann::ordered_json serving_row_json(const ServingRow& r, const ServingPrediction& p, bool moe_report, bool first) {
  nlohmann::ordered_json row = {{"backend", r.backend},
                                {"backend_version", r.version},
                                {"policy", p.config.policy},
                                {"engine", p.engine},
                                {"model", r.model_path},
                                {"precision", r.precision.empty() ? "bf16" : r.precision},
                                {"isl", r.isl},
                                {"osl", r.osl},
                                {"concurrency", r.concurrency},
                                {"tp", r.tp}};
  if (moe_report) {
    row["id"] = r.id;
    row["mode"] = r.mode;
    row["dp"] = r.dp;
    row["ep"] = r.ep;
    row["moe_tp"] = r.layout().expert_tp();
    row["layout"] = layout_text(r);
    if (r.mode == "disagg") {
      for (const auto& [name, pool] : {std::pair{"prefill", &r.prefill}, std::pair{"decode", &r.decode}}) {
        row[name] = {{"workers", pool->workers}, {"tp", pool->layout.tp}, {"batch_size", pool->batch}};
      }
    }
    row["weight_dtype"] = r.weight_dtype;
    row["normalisations"] = r.normalisations;
    row["repeats"] = r.repeats;
    row["distinct"] = first;
  }
  row.update(nlohmann::ordered_json{{"kv_cache_dtype", p.config.kv_cache_dtype},
                                    {"deployment", p.deployment},
                                    {"policy_opts", p.config.policy_opts},
                                    {"measured_ttft_ms", r.ttft_ms},
                                    {"predicted_ttft_ms", p.ttft_ms},
                                    {"measured_tpot_ms", r.tpot_ms},
                                    {"predicted_tpot_ms", p.tpot_ms},
                                    {"rejected", p.rejected},
                                    {"config", config_to_json(p.config)}});
  return row;
}

ServingReplay replay_serving_rows(ServingRows selected, const ServingOptions& o) {
  ServingReplay replay;
  replay.selected = std::move(selected);
  MeasurementIndex measurements_seen;  // of the replayed rows
  for (const ServingRow& r : replay.selected.rows) {
    const ServingPrediction p = replay_serving_row(r, o);
    replay.every_row.add(r, p);
    replay.by_backend[r.backend].add(r, p);
    const bool first = measurements_seen.find_or_add(r.ttft_ms, r.tpot_ms, r.id) == nullptr;
    if (first) replay.every_distinct.add(r, p);
    replay.by_model[{r.model_path, r.backend, r.mode}].add(r, p, first);
    replay.report_rows.push_back(serving_row_json(r, p, replay.moe_report(), first));
  }
  int64_t rows_skipped = 0;
  for (const auto& [why, n] : replay.selected.skipped) rows_skipped += n;
  replay.rows_read = static_cast<int64_t>(replay.selected.rows.size()) + rows_skipped;
  replay.repeats_replayed = replay.every_row.count() - replay.every_distinct.count();
  return replay;
}

void print_backend_table(std::ostream& out, const ServingReplay& replay, const ServingOptions& o) {
  const std::vector<ServingRow>& rows = replay.selected.rows;
  const auto& by_backend = replay.by_backend;
  fmt::print(out, "{} rows of {} replayed on {} with policy {}, engine {}, {} deployment ({} requests per client{}):\n",
             rows.size(), o.measurements, o.gpu, o.policy.empty() ? "of each backend" : o.policy,
             engines_text(o.engines, "of each backend"), o.deployment, o.requests_per_client, think_time_text(o));
  // The medians of predicted / measured say which way the error goes (below 1: short).
  fmt::print(out, "{:<10} {:>6} {:>12} {:>9} {:>12} {:>9}\n", "backend", "rows", "TTFT MAPE %", "TTFT p/m",
             "TPOT MAPE %", "TPOT p/m");
  auto print_group = [&](const std::string& label, const ErrorGroup& g) {
    fmt::print(out, "{:<10} {:>6} {:>12.1f} {:>9.2f} {:>12.1f} {:>9.2f}\n", label, g.count(), ErrorGroup::mape(g.ttft),
               ErrorGroup::median(g.ttft), ErrorGroup::mape(g.tpot), ErrorGroup::median(g.tpot));
  };
  for (const auto& [backend, e] : by_backend) print_group(backend, e.all);
  print_group("all", replay.every_row);
  if (o.breakdown) {
    for (const auto& [backend, e] : by_backend) {
      for (const auto& [key, groups] : e.by) {
        fmt::print(out, "{} by {}:\n", backend, key);
        for (const auto& [value, g] : groups) print_group(fmt::format("  {}", value), g);
      }
    }
  } else {
    fmt::print(out,
               "(p/m: the median of predicted / measured; --breakdown shows each backend by prompt length, "
               "clients and TP)\n");
  }
}

void print_model_table(std::ostream& out, const ServingReplay& replay, const ServingOptions& o) {
  const std::vector<ServingRow>& rows = replay.selected.rows;
  const auto& by_model = replay.by_model;
  const int64_t repeats_replayed = replay.repeats_replayed;
  const int64_t rows_read = replay.rows_read;
  fmt::print(out,
             "each measurement once ({} replayed rows repeat an earlier one's TTFT and TPOT), by model, "
             "backend and mode:\n",
             repeats_replayed);
  fmt::print(out, "{:<30} {:<8} {:<7} {:>6} {:>12} {:>9} {:>12} {:>9}\n", "model", "backend", "mode", "rows",
             "TTFT MAPE %", "TTFT p/m", "TPOT MAPE %", "TPOT p/m");
  auto print_model = [&](const std::string& model, const std::string& backend, const std::string& mode,
                         const ErrorGroup& g) {
    fmt::print(out, "{:<30} {:<8} {:<7} {:>6} {:>12.1f} {:>9.2f} {:>12.1f} {:>9.2f}\n", model, backend, mode, g.count(),
               ErrorGroup::mape(g.ttft), ErrorGroup::median(g.ttft), ErrorGroup::mape(g.tpot),
               ErrorGroup::median(g.tpot));
  };
  for (const auto& [key, e] : by_model) {
    // A group all of whose rows repeat another group's measurements adds none of its own.
    if (e.distinct.count() > 0) print_model(std::get<0>(key), std::get<1>(key), std::get<2>(key), e.distinct);
  }
  print_model("all", "", "", replay.every_distinct);
  if (o.breakdown) {
    for (const auto& [key, e] : by_model) {
      // Named references, not a structured binding: clang before 16 cannot capture those.
      const auto& model = std::get<0>(key);
      const auto& backend = std::get<1>(key);
      const auto& mode = std::get<2>(key);
      auto groups = [&](const char* by, const auto& map) {
        fmt::print(out, "{} {} {} by {}:\n", model, backend, mode, by);
        for (const auto& [value, g] : map) print_model(fmt::format("  {}", value), "", "", g);
      };
      groups("isl", e.by_isl);
      groups("concurrency", e.by_concurrency);
      groups("layout", e.by_layout);
    }
  }
  fmt::print(out, "replayed {} of {} rows ({:.1f}%)\n", rows.size(), rows_read,
             rows_read > 0 ? 100.0 * static_cast<double>(rows.size()) / static_cast<double>(rows_read) : 0.0);
}

void print_serving_report(std::ostream& out, const ServingReplay& replay, const ServingOptions& o) {
  print_backend_table(out, replay, o);
  if (replay.moe_report()) print_model_table(out, replay, o);
  for (const auto& [why, n] : replay.selected.skipped) fmt::print(out, "skipped {} rows: {}\n", n, why);
  if (replay.moe_report()) {
    const ServingRows& selected = replay.selected;
    const int64_t repeats_replayed = replay.repeats_replayed;
    for (const ServingNormalisation& rule : serving_normalisations()) {
      const auto it = selected.normalised.find(rule.name);
      if (it == selected.normalised.end()) continue;
      fmt::print(out, "rule {} changed {} replayed rows: {}\n", rule.name, it->second, rule.rule);
    }
    fmt::print(out, "{} rows repeat an earlier row's TTFT and TPOT exactly, {} of them replayed\n", selected.repeated,
               repeats_replayed);
  }
}

// --profile-out: the profile with each backend's serving figures in its validation block.
void write_serving_figures(const HardwareProfile& gpu, const ServingReplay& replay, const ServingOptions& o,
                           std::ostream& out) {
  const ErrorGroup& every_row = replay.every_row;
  const auto& by_backend = replay.by_backend;
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
    p.validation.serving.backends.push_back(
        {backend, tenth(ErrorGroup::mape(e.all.ttft)), tenth(ErrorGroup::mape(e.all.tpot)),
         hundredth(ErrorGroup::median(e.all.ttft)), hundredth(ErrorGroup::median(e.all.tpot)), e.all.count()});
  }
  save_hardware_profile(p, o.profile_out);
  fmt::print(out, "wrote {}\n", o.profile_out);
}

nlohmann::ordered_json serving_report_json(const ServingReplay& replay, const ServingOptions& o) {
  const ErrorGroup& every_row = replay.every_row;
  const auto& by_backend = replay.by_backend;
  const auto& by_model = replay.by_model;
  const ServingRows& selected = replay.selected;
  const std::vector<ServingRow>& rows = selected.rows;
  const auto& skipped = selected.skipped;
  const bool moe_report = replay.moe_report();
  const int64_t rows_read = replay.rows_read;
  const int64_t repeats_replayed = replay.repeats_replayed;
  const ErrorGroup& every_distinct = replay.every_distinct;
  nlohmann::ordered_json j;
  j["measurements"] = o.measurements;
  j["gpu"] = o.gpu;
  j["policy"] = o.policy.empty() ? "by backend" : o.policy;
  j["engine"] = engines_text(o.engines, "by backend");
  j["deployment"] = o.deployment;
  j["requests_per_client"] = o.requests_per_client;
  j["think_time"] = o.think_time;
  if (!o.moe_routing.empty()) j["moe_routing"] = o.moe_routing;
  j["units"] =
      "mape in percent: mean of |predicted / measured - 1| * 100; median_ratio: the median of "
      "predicted / measured (below 1: predicted short); times in ms (means over requests)";
  j["ttft"] = {{"mape", ErrorGroup::mape(every_row.ttft)},
               {"median_ratio", ErrorGroup::median(every_row.ttft)},
               {"count", every_row.count()}};
  j["tpot"] = {{"mape", ErrorGroup::mape(every_row.tpot)},
               {"median_ratio", ErrorGroup::median(every_row.tpot)},
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
  if (moe_report) {
    j["rows_read"] = rows_read;
    j["rows_replayed"] = rows.size();
    j["repeated_rows"] = selected.repeated;
    j["repeated_rows_replayed"] = repeats_replayed;
    j["distinct"] = every_distinct.to_json();
    j["by_model"] = nlohmann::ordered_json::array();
    for (const auto& [key, e] : by_model) {
      nlohmann::ordered_json m = {{"model", std::get<0>(key)},
                                  {"backend", std::get<1>(key)},
                                  {"mode", std::get<2>(key)},
                                  {"rows", e.all.count()}};
      m["distinct"] = e.distinct.to_json();
      m["every_row"] = e.all.to_json();
      for (const auto& [value, g] : e.by_isl) m["by_isl"][std::to_string(value)] = g.to_json();
      for (const auto& [value, g] : e.by_concurrency) m["by_concurrency"][std::to_string(value)] = g.to_json();
      for (const auto& [value, g] : e.by_layout) m["by_layout"][value] = g.to_json();
      j["by_model"].push_back(m);
    }
    j["normalisations"] = nlohmann::ordered_json::object();
    for (const ServingNormalisation& rule : serving_normalisations()) {
      const auto it = selected.normalised.find(rule.name);
      j["normalisations"][rule.name] = {{"rows", it == selected.normalised.end() ? 0 : it->second},
                                        {"rule", rule.rule}};
    }
  }
  j["rows"] = replay.report_rows;
  return j;
}

}  // namespace

int run_validate_serving(const ServingOptions& options, std::ostream& out) {
  ServingOptions o = options;
  if (o.measurements.empty()) throw UserError("validate-serving: --measurements is required");
  if (o.gpu.empty()) throw UserError("validate-serving: --gpu is required");
  check_replay_options(o);
  const HardwareProfile gpu = resolve_gpu(o.gpu);  // a bad name fails here, before any row
  check_serving_options(o, gpu);
  o.engines = parse_engine_args(o.engine_args);
  const ServingReplay replay = replay_serving_rows(read_serving_rows(o.measurements, o), o);
  print_serving_report(out, replay, o);
  if (!o.profile_out.empty()) write_serving_figures(gpu, replay, o, out);
  if (!o.out.empty()) {
    auto file = open_for_write(o.out);
    file << serving_report_json(replay, o).dump(2) << '\n';
    fmt::print(out, "wrote {}\n", o.out);
  }
  return 0;
}

}  // namespace batchsim
