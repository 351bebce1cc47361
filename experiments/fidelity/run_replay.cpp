#include "experiments/fidelity/run_replay.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "experiments/fidelity/benchmark_readers.h"
#include "experiments/run/chrome_trace.h"
#include "experiments/run/output.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"
#include "hwmodel/base/json_file.h"
#include "hwmodel/base/line_reader.h"
#include "hwmodel/base/parse.h"
#include "sim/workload/trace_reader.h"

namespace batchsim {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// A number field of one JSON line; the message names the file, line and field.
double number_field(const nlohmann::json& j, const char* key, const fs::path& file, int64_t line) {
  if (!j.contains(key) || !j[key].is_number()) {
    throw UserError(fmt::format("{}:{}: field '{}' is missing or not a number", file.string(), line, key));
  }
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) throw UserError(fmt::format("{}:{}: field '{}' is not finite", file.string(), line, key));
  return v;
}

std::vector<RecordedRequest> read_requests(const fs::path& file) {
  LineReader reader(file, "requests file");
  std::vector<RecordedRequest> out;
  std::string line;
  while (reader.next(line)) {
    const int64_t n = reader.line_number();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw UserError(fmt::format("{}:{}: not a JSON object (a truncated line?)", file.string(), n));
    }
    if (!j.is_object()) throw UserError(fmt::format("{}:{}: not a JSON object", file.string(), n));
    RecordedRequest r;
    r.id = j.contains("request_id")
               ? (j["request_id"].is_string() ? j["request_id"].get<std::string>() : j["request_id"].dump())
               : fmt::format("line-{}", n);
    const double input = number_field(j, "input_toks", file, n), output = number_field(j, "output_toks", file, n);
    if (!is_token_count(input) || !is_token_count(output)) {
      throw UserError(
          fmt::format("{}:{}: input_toks and output_toks must be whole numbers from 1 to 2^31-1", file.string(), n));
    }
    r.input_tokens = static_cast<int64_t>(input);
    r.output_tokens = static_cast<int64_t>(output);
    r.queued_s = number_field(j, "queued_ts", file, n);
    r.scheduled_s = j.contains("scheduled_ts") ? number_field(j, "scheduled_ts", file, n) : r.queued_s;
    r.first_token_s = number_field(j, "first_token_ts", file, n);
    r.last_token_s = number_field(j, "last_token_ts", file, n);
    if (!(r.queued_s <= r.scheduled_s && r.scheduled_s <= r.first_token_s && r.first_token_s <= r.last_token_s)) {
      throw UserError(
          fmt::format("{}:{}: request {} ends before it starts: queued_ts <= scheduled_ts <= "
                      "first_token_ts <= last_token_ts must hold",
                      file.string(), n, r.id));
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) throw UserError(fmt::format("{}: no requests", file.string()));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.queued_s < b.queued_s; });
  return out;
}

std::vector<RecordedSample> read_timeseries(const fs::path& file) {
  std::vector<RecordedSample> out;
  if (!fs::exists(file)) return out;
  CsvTable t(file);
  while (t.next()) out.push_back({t.number("t"), t.number("running"), t.number("waiting"), t.number("kv_cache_pct")});
  return out;
}

template <typename T>
T kwarg(const nlohmann::json& kw, const char* key, T fallback, const fs::path& file) {
  if (!kw.contains(key) || kw[key].is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // A whole number within range: a float or a huge value would not convert.
    const auto& v = kw[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 31)) {
      throw UserError(
          fmt::format("{}: '{}' must be a whole number from 0 to 2^31, got {}", file.string(), key, v.dump()));
    }
    return static_cast<T>(v.get<int64_t>());
  } else {
    return kw[key].get<T>();
  }
}

// Predicted against measured, per request: MAPE, mean signed error and the two sides' percentiles.
ordered_json figure_errors(const std::vector<double>& predicted, const std::vector<double>& measured) {
  double ape = 0, signed_error = 0;
  size_t n = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    if (measured[i] <= 0) continue;
    ape += std::abs(predicted[i] / measured[i] - 1);
    signed_error += predicted[i] / measured[i] - 1;
    ++n;
  }
  auto pct = [](std::vector<double> x, double q) {
    if (x.empty()) return 0.0;
    std::sort(x.begin(), x.end());
    const auto k = static_cast<size_t>(std::ceil(q * static_cast<double>(x.size()))) - 1;  // nearest rank
    return x[std::min(k, x.size() - 1)];
  };
  ordered_json j;
  j["mape"] = n ? 100 * ape / static_cast<double>(n) : 0;
  j["mean_error"] = n ? 100 * signed_error / static_cast<double>(n) : 0;
  j["spearman"] = spearman(predicted, measured);
  for (const auto& [name, q] : {std::pair{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}}) {
    j["measured"][name] = pct(measured, q);
    j["predicted"][name] = pct(predicted, q);
  }
  j["measured"]["mean"] = std::accumulate(measured.begin(), measured.end(), 0.0) / static_cast<double>(measured.size());
  j["predicted"]["mean"] =
      std::accumulate(predicted.begin(), predicted.end(), 0.0) / static_cast<double>(predicted.size());
  return j;
}

}  // namespace

RecordedRun read_recorded_run(const fs::path& dir, const ReplayOverrides& overrides) {
  if (!fs::is_directory(dir)) throw UserError(fmt::format("--run {}: not a folder", dir.string()));
  RecordedRun run;
  run.dir = dir;
  run.requests_file = dir / "requests.jsonl";
  run.requests = read_requests(run.requests_file);
  run.timeseries = read_timeseries(dir / "timeseries.csv");
  const fs::path meta_file = dir / "meta.json";
  const nlohmann::json meta = read_json_file(meta_file);
  if (!meta.contains("engine_kwargs") || !meta["engine_kwargs"].is_object()) {
    throw UserError(
        fmt::format("{}: no engine_kwargs object (the arguments the engine was started with)", meta_file.string()));
  }
  const nlohmann::json& kw = meta["engine_kwargs"];
  try {
    run.model_id = kwarg<std::string>(kw, "model", meta.value("model", std::string()), meta_file);
    run.vllm_version = meta.value("vllm_version", std::string());
    run.tp = kwarg<int>(kw, "tensor_parallel_size", 1, meta_file);
    run.dp = kwarg<int>(kw, "data_parallel_size", 1, meta_file);
    run.expert_parallel = kwarg<bool>(kw, "enable_expert_parallel", false, meta_file);
    run.max_num_seqs = kwarg<int64_t>(kw, "max_num_seqs", 0, meta_file);
    run.max_num_batched_tokens = kwarg<int64_t>(kw, "max_num_batched_tokens", 0, meta_file);
    run.max_model_len = kwarg<int64_t>(kw, "max_model_len", 0, meta_file);
    run.kv_cache_dtype = kwarg<std::string>(kw, "kv_cache_dtype", "auto", meta_file);
    run.prefix_caching = kwarg<bool>(kw, "enable_prefix_caching", true, meta_file);
    run.gpu_memory_utilization = kwarg<double>(kw, "gpu_memory_utilization", 0.9, meta_file);
    if (meta.contains("kv_cache") && meta["kv_cache"].is_object()) {
      const auto& kv = meta["kv_cache"];
      run.num_gpu_blocks = kwarg<int64_t>(kv, "num_gpu_blocks", 0, meta_file);
      run.block_size = kwarg<int64_t>(kv, "block_size", 16, meta_file);
      run.prefix_caching = kwarg<bool>(kv, "enable_prefix_caching", run.prefix_caching, meta_file);
      run.gpu_memory_utilization = kwarg<double>(kv, "gpu_memory_utilization", run.gpu_memory_utilization, meta_file);
    }
    if (meta.contains("hardware") && meta["hardware"].is_object())
      run.device = meta["hardware"].value("device_name", "");
  } catch (const nlohmann::json::exception& e) {
    throw UserError(
        fmt::format("{}: a field of engine_kwargs or kv_cache has the wrong type: {}", meta_file.string(), e.what()));
  }
  // The model's Hugging Face config.json; LLMServingSim keeps its cluster description under the
  // same name (nodes -> instances -> model_name, hardware), which names the model instead.
  for (const fs::path& candidate : {dir / "config.json", dir.parent_path() / "config.json"}) {
    if (!fs::exists(candidate)) continue;
    const nlohmann::json config = read_json_file(candidate);
    if (config.contains("nodes")) {
      try {
        const auto& instance = config.at("nodes").at(0).at("instances").at(0);
        if (run.model_id.empty()) run.model_id = instance.at("model_name").get<std::string>();
        if (run.device.empty()) run.device = instance.value("hardware", "");
      } catch (const nlohmann::json::exception&) {
        throw UserError(fmt::format("{}: an LLMServingSim cluster config without nodes[0].instances[0].model_name",
                                    candidate.string()));
      }
      continue;
    }
    run.model_config = candidate;
    break;
  }
  if (run.model_config.empty() && run.model_id.empty() && overrides.model.empty()) {
    throw UserError(
        fmt::format("{}: no config.json in the run folder or the one above, and no model in engine_kwargs "
                    "(give --model)",
                    dir.string()));
  }
  apply_overrides_and_note_derived(run, overrides);
  return run;
}

bool is_token_count(double v) {
  // Bounded before any cast: a double beyond int64's range would not convert.
  constexpr double kMaxTokens = 2147483647.0;
  return v >= 1 && v <= kMaxTokens && v == std::floor(v);
}

void apply_overrides_and_note_derived(RecordedRun& run, const ReplayOverrides& overrides) {
  if (!overrides.model.empty()) {
    run.model_id = overrides.model;
    run.model_config.clear();
  }
  if (overrides.tp > 0) run.tp = overrides.tp;
  if (overrides.num_gpu_blocks > 0) run.num_gpu_blocks = overrides.num_gpu_blocks;
  if (overrides.max_model_len > 0) run.max_model_len = overrides.max_model_len;
  constexpr int64_t kMaxArgument = int64_t{1} << 31;
  for (const auto& [key, value] : overrides.policy_opts) {
    const std::string what = "--policy-opt " + key;
    if (key == "max_num_seqs")
      run.max_num_seqs = parse_int(value, what, 1, kMaxArgument);
    else if (key == "max_num_batched_tokens")
      run.max_num_batched_tokens = parse_int(value, what, 1, kMaxArgument);
    else if (key == "block_size")
      run.block_size = parse_int(value, what, 1, kMaxArgument);
    else if (key == "prefix_caching") {
      if (value != "true" && value != "false") {
        throw UserError(fmt::format("--policy-opt prefix_caching={}: must be true or false", value));
      }
      run.prefix_caching = value == "true";
    } else {
      run.policy_opts[key] = value;
    }
  }
  if (run.num_gpu_blocks == 0) {
    run.derived.push_back(
        fmt::format("KV cache: no kv_cache block; sized from GPU memory at gpu_memory_utilization {} "
                    "after a profile run, as vLLM sizes it",
                    run.gpu_memory_utilization));
  }
  if (run.max_model_len == 0)
    run.derived.push_back("max_model_len: null; the model's max_position_embeddings, vLLM's default");
  if (run.max_num_seqs == 0) run.derived.push_back("max_num_seqs: not given; vLLM's default for the GPU");
  if (run.max_num_batched_tokens == 0)
    run.derived.push_back("max_num_batched_tokens: not given; vLLM's default for the GPU");
  if (run.vllm_version.empty())
    run.derived.push_back("vllm_version: not recorded; the current scheduler (vllm preset)");
}

RunConfig replay_config(const RecordedRun& run, const std::string& gpu, const std::string& engine,
                        const std::string& policy) {
  RunConfig c = default_run_config();
  c.model = run.model_config.empty() ? run.model_id : run.model_config.string();
  c.gpu = gpu;
  c.tp = run.tp;
  c.dp = run.expert_parallel ? run.dp : 1;
  if (!run.expert_parallel && run.dp > 1) c.replicas = run.dp;  // dense DP: independent engines
  // vLLM 0.19 on reserves the whole prompt's KV at admission (the vllm preset); earlier v1
  // schedulers admitted on the first chunk (vllm-v1-2025), asynchronously from 0.14.
  const bool old = !run.vllm_version.empty() && run.vllm_version < std::string("0.19");
  c.policy = !policy.empty() ? policy : old ? "vllm-v1-2025" : "vllm";
  if (!engine.empty())
    c.engine = engine;
  else if (old && run.vllm_version >= std::string("0.14"))
    c.engine = "vllm-async";
  if (run.max_num_seqs > 0) c.policy_opts["max_num_seqs"] = std::to_string(run.max_num_seqs);
  if (run.max_num_batched_tokens > 0)
    c.policy_opts["max_num_batched_tokens"] = std::to_string(run.max_num_batched_tokens);
  c.policy_opts["prefix_caching"] = run.prefix_caching ? "true" : "false";
  c.policy_opts["block_size"] = std::to_string(run.block_size);
  for (const auto& [key, value] : run.policy_opts) c.policy_opts[key] = value;
  c.max_model_len = run.max_model_len;
  c.num_gpu_blocks = run.num_gpu_blocks;
  c.gpu_memory_utilization = run.gpu_memory_utilization;
  if (run.kv_cache_dtype != "auto") c.kv_cache_dtype = run.kv_cache_dtype;
  auto columns = std::make_shared<TraceColumns>();
  const double t0 = run.requests.front().queued_s;
  for (const RecordedRequest& r : run.requests) {
    columns->arrival_s.push_back(r.queued_s - t0);
    columns->prompt_tokens.push_back(r.input_tokens);
    columns->output_tokens.push_back(r.output_tokens);
  }
  c.workload.trace = run.requests_file;
  c.workload.trace_columns = std::move(columns);
  // A closed loop that kept no send times: its clients send the requests in order.
  c.max_concurrency = run.closed_loop_clients;
  c.iteration_log = false;
  return c;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("spearman: samples of different lengths");
  auto ranks = [](const std::vector<double>& x) {
    std::vector<size_t> order(x.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return x[i] < x[j]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < order.size();) {
      size_t j = i;
      while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[order[k]] = (static_cast<double>(i + j) / 2) + 1;  // average rank of a tie
      i = j + 1;
    }
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

ordered_json run_replay_report(const RecordedRun& run, const RunConfig& config, const RunOutcome& outcome) {
  const auto& records = outcome.result.requests;  // ids in queued order, as run.requests
  std::vector<double> ttft_m, ttft_p, tpot_m, tpot_p, e2e_m, e2e_p;
  ordered_json rows = ordered_json::array();
  for (size_t i = 0; i < run.requests.size(); ++i) {
    const RecordedRequest& m = run.requests[i];
    const RequestRecord& p = records.at(i);
    ordered_json row = {{"id", m.id},
                        {"input_tokens", m.input_tokens},
                        {"output_tokens", m.output_tokens},
                        {"queued_s", m.queued_s - run.requests.front().queued_s},
                        {"completed", p.completed()}};
    if (!p.completed()) {
      row["reject_reason"] = p.reject_reason;
      rows.push_back(std::move(row));
      continue;
    }
    ttft_m.push_back(m.ttft_s());
    ttft_p.push_back(p.ttft_s());
    e2e_m.push_back(m.e2e_s());
    e2e_p.push_back(p.e2e_s());
    row["ttft_s"] = {{"measured", m.ttft_s()}, {"predicted", p.ttft_s()}};
    row["e2e_s"] = {{"measured", m.e2e_s()}, {"predicted", p.e2e_s()}};
    if (m.output_tokens > 1) {
      tpot_m.push_back(m.tpot_s());
      tpot_p.push_back(p.tpot_s());
      row["tpot_s"] = {{"measured", m.tpot_s()}, {"predicted", p.tpot_s()}};
    }
    rows.push_back(std::move(row));
  }
  ordered_json j;
  j["run"] = run.dir.string();
  j["source"] = {{"format", run.source}, {"file", run.requests_file.string()}};
  if (run.closed_loop_clients > 0) j["closed_loop_clients"] = run.closed_loop_clients;
  j["model"] = config.model;
  j["gpu"] = config.gpu;
  j["engine"] = run_engine_name(config);
  j["policy"] = config.policy;
  j["measured_on"] = {{"device", run.device}, {"vllm_version", run.vllm_version}};
  j["engine_arguments"] = {{"max_num_seqs", run.max_num_seqs},
                           {"max_num_batched_tokens", run.max_num_batched_tokens},
                           {"max_model_len", run.max_model_len},
                           {"prefix_caching", run.prefix_caching},
                           {"num_gpu_blocks", run.num_gpu_blocks},
                           {"block_size", run.block_size},
                           {"tensor_parallel_size", run.tp},
                           {"data_parallel_size", run.dp},
                           {"enable_expert_parallel", run.expert_parallel}};
  j["derived"] = run.derived;
  j["requests_total"] = run.requests.size();
  j["requests_completed"] = ttft_m.size();
  j["ttft"] = figure_errors(ttft_p, ttft_m);
  j["tpot"] = figure_errors(tpot_p, tpot_m);
  j["e2e"] = figure_errors(e2e_p, e2e_m);
  // Output throughput over each side's own span, first queued to last token.
  int64_t out_tokens = 0;
  double measured_end = 0;
  for (const RecordedRequest& r : run.requests) {
    out_tokens += r.output_tokens;
    measured_end = std::max(measured_end, r.last_token_s - run.requests.front().queued_s);
  }
  const double predicted_tps = outcome.result.summary.output_tokens_per_s;
  const double measured_tps = measured_end > 0 ? static_cast<double>(out_tokens) / measured_end : 0;
  j["output_throughput"] = {{"measured_tokens_per_s", measured_tps},
                            {"predicted_tokens_per_s", predicted_tps},
                            {"error_percent", measured_tps > 0 ? 100 * (predicted_tps / measured_tps - 1) : 0}};
  // The engine's queues and KV, second by second: the iteration running at each measured t.
  ordered_json series = ordered_json::array();
  const auto& its = outcome.result.iterations;
  const double capacity = static_cast<double>(std::max<int64_t>(1, outcome.result.kv_capacity_tokens));
  for (const RecordedSample& s : run.timeseries) {
    const SimTime t = SimTime::from_seconds(s.t);
    auto it =
        std::upper_bound(its.begin(), its.end(), t, [](SimTime v, const IterationRecord& r) { return v < r.start; });
    ordered_json row = {{"t", s.t},
                        {"measured", {{"running", s.running}, {"waiting", s.waiting}, {"kv_cache_pct", s.kv_percent}}}};
    if (it != its.begin()) {
      const IterationRecord& r = *std::prev(it);
      const bool idle = t > r.start + r.duration && std::next(std::prev(it)) == its.end();
      row["predicted"] = {{"running", idle ? 0 : r.num_requests},
                          {"waiting", idle ? 0 : r.waiting},
                          {"kv_cache_pct", idle ? 0.0 : 100 * static_cast<double>(r.kv_allocated_tokens) / capacity}};
    }
    series.push_back(std::move(row));
  }
  j["timeseries"] = series;
  j["requests"] = rows;
  return j;
}

int run_replay_command(const RunReplayOptions& o, std::ostream& out) {
  if (o.gpu.empty()) throw UserError("validate-serving --run: give --gpu PROFILE (the GPU to predict with)");
  const RecordedRun run = read_recording(o.run_dir, o.overrides);
  RunConfig config = replay_config(run, o.gpu, o.engine, o.policy);
  if (!o.run_out.empty()) {
    config.out = o.run_out;
    config.iteration_log = config.iteration_log_ids = true;
  }
  validate(config);
  RunHooks hooks;
  hooks.record_iterations = true;
  const BuiltWorkload built = build_workload(config.workload);
  const RunOutcome outcome = run_simulation(config, &built, hooks);
  const ordered_json report = run_replay_report(run, config, outcome);
  fmt::print(out, "replay of {} ({}, {} requests{}{}{}) on {}, engine {}, policy {}\n", o.run_dir, run.source,
             run.requests.size(),
             run.closed_loop_clients > 0 ? fmt::format(", a closed loop of {} clients", run.closed_loop_clients) : "",
             run.device.empty() ? "" : ", measured on " + run.device,
             run.vllm_version.empty() ? "" : ", vLLM " + run.vllm_version, config.gpu,
             report["engine"].get<std::string>(), config.policy);
  for (const std::string& d : run.derived) fmt::print(out, "derived: {}\n", d);
  fmt::print(out, "{:<6} {:>7} {:>11} {:>9} {:>21} {:>21} {:>21}\n", "", "MAPE %", "mean err %", "Spearman",
             "p50 meas / pred", "p90 meas / pred", "p99 meas / pred");
  for (const char* figure : {"ttft", "tpot", "e2e"}) {
    const auto& f = report[figure];
    const double scale = std::string(figure) == "tpot" ? 1e3 : 1;
    const char* unit = std::string(figure) == "tpot" ? "ms" : "s";
    auto pair = [&](const char* q) {
      return fmt::format("{:.3f} / {:.3f} {}", f["measured"][q].get<double>() * scale,
                         f["predicted"][q].get<double>() * scale, unit);
    };
    fmt::print(out, "{:<6} {:>7.1f} {:>+11.1f} {:>9.3f} {:>21} {:>21} {:>21}\n", figure, f["mape"].get<double>(),
               f["mean_error"].get<double>(), f["spearman"].get<double>(), pair("p50"), pair("p90"), pair("p99"));
  }
  const auto& tp = report["output_throughput"];
  fmt::print(out, "output throughput: measured {:.1f} tok/s, predicted {:.1f} tok/s ({:+.1f}%)\n",
             tp["measured_tokens_per_s"].get<double>(), tp["predicted_tokens_per_s"].get<double>(),
             tp["error_percent"].get<double>());
  // Where the largest errors sit: the tenth of requests with the largest e2e error, when they
  // were queued, and how much of their error is in the TTFT (queueing and prefill) rather than
  // in the decode.
  std::vector<std::pair<double, const ordered_json*>> worst;
  for (const auto& row : report["requests"]) {
    if (row.contains("e2e_s")) {
      worst.emplace_back(std::abs(row["e2e_s"]["predicted"].get<double>() - row["e2e_s"]["measured"].get<double>()),
                         &row);
    }
  }
  std::sort(worst.begin(), worst.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  worst.resize(std::max<size_t>(1, worst.size() / 10));
  double ttft_part = 0, total = 0, first = INFINITY, last = 0;
  for (const auto& [err, row] : worst) {
    ttft_part += std::abs((*row)["ttft_s"]["predicted"].get<double>() - (*row)["ttft_s"]["measured"].get<double>());
    total += err;
    first = std::min(first, (*row)["queued_s"].get<double>());
    last = std::max(last, (*row)["queued_s"].get<double>());
  }
  if (total > 0) {
    fmt::print(
        out,
        "largest errors: the {} requests with the largest e2e error (queued {:.0f}-{:.0f} s into the run) "
        "are off by {:.2f} s on average, {:.0f}% of it in their TTFT (queueing and prefill), the rest in decode\n",
        worst.size(), first, last, total / static_cast<double>(worst.size()), std::min(100.0, 100 * ttft_part / total));
  }
  if (!o.out.empty()) {
    auto file = open_for_write(o.out);
    file << report.dump(2) << "\n";
    fmt::print(out, "wrote {}\n", o.out);
  }
  if (!o.run_out.empty()) {
    write_run_outputs(outcome, config.out);
    const std::filesystem::path trace = config.out / "trace.json";
    write_chrome_trace(outcome, trace);
    fmt::print(out, "wrote {} (the replay as `batchsim run --out` writes a run; open {} in https://ui.perfetto.dev)\n",
               o.run_out, trace.string());
  }
  return 0;
}

}  // namespace batchsim
