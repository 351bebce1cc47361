#include "experiments/fidelity/benchmark_readers.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hwmodel/base/error.h"
#include "hwmodel/base/json_file.h"
#include "hwmodel/base/line_reader.h"

namespace batchsim {

namespace fs = std::filesystem;

namespace {

// A token count (is_token_count) of a JSON value.
int64_t token_count(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number() || !is_token_count(v.get<double>())) {
    throw UserError(fmt::format("{}: must be a whole number of tokens from 1 to 2^31-1, got {}", where, v.dump()));
  }
  return static_cast<int64_t>(v.get<double>());
}

// A time in seconds: a finite number >= 0.
double seconds(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
    throw UserError(fmt::format("{}: must be a finite number of seconds >= 0, got {}", where, v.dump()));
  }
  return v.get<double>();
}

// The requests in send order (stable: a closed loop's all start at 0), timed from the first send,
// which need not be the first request listed.
void start_at_first_send(RecordedRun& run) {
  std::stable_sort(run.requests.begin(), run.requests.end(),
                   [](const RecordedRequest& a, const RecordedRequest& b) { return a.queued_s < b.queued_s; });
  const double t0 = run.requests.front().queued_s;
  for (RecordedRequest& r : run.requests) {
    r.queued_s -= t0;
    r.scheduled_s -= t0;
    r.first_token_s -= t0;
    r.last_token_s -= t0;
  }
}

// aiperf's {"value": V, "unit": U} of `metrics[name]`, converted to seconds for a time; null
// when absent.
const nlohmann::json* metric(const nlohmann::json& metrics, const char* name) {
  if (!metrics.contains(name) || !metrics[name].is_object() || !metrics[name].contains("value")) return nullptr;
  return &metrics[name]["value"];
}

double metric_seconds(const nlohmann::json& metrics, const char* name, const std::string& where) {
  const nlohmann::json* v = metric(metrics, name);
  if (v == nullptr) throw UserError(fmt::format("{}: no metric '{}'", where, name));
  const std::string unit = metrics[name].value("unit", std::string("ms"));
  const double scale = unit == "ms"                   ? 1e-3
                       : unit == "s" || unit == "sec" ? 1
                       : unit == "ns"                 ? 1e-9
                       : unit == "us"                 ? 1e-6
                                                      : -1;
  if (scale < 0)
    throw UserError(fmt::format("{}: metric '{}' in unit '{}' (expected ms, s, us or ns)", where, name, unit));
  return seconds(*v, fmt::format("{}: metric '{}'", where, name)) * scale;
}

// One successful aiperf record into `run` (its start relative to the first record's, in ns, so
// that epoch nanoseconds keep their precision); false for a record outside the profiling phase
// (a warmup request).
bool read_aiperf_record(const nlohmann::json& j, const std::string& where, int64_t& first_start_ns, RecordedRun& run) {
  const nlohmann::json& meta = j["metadata"];
  if (meta.value("benchmark_phase", std::string("profiling")) != "profiling") return false;
  const nlohmann::json metrics = j.value("metrics", nlohmann::json::object());
  if (!meta.contains("request_start_ns") || !meta["request_start_ns"].is_number_integer()) {
    throw UserError(fmt::format("{}: metadata.request_start_ns must be a whole number of ns", where));
  }
  RecordedRequest r;
  r.id = meta.contains("x_request_id") && meta["x_request_id"].is_string()
             ? meta["x_request_id"].get<std::string>()
             : fmt::format("record-{}", run.requests.size());
  const nlohmann::json* isl = metric(metrics, "input_sequence_length");
  const nlohmann::json* osl = metric(metrics, "output_sequence_length");
  if (osl == nullptr) osl = metric(metrics, "output_token_count");
  if (isl == nullptr || osl == nullptr) {
    throw UserError(fmt::format("{}: no input_sequence_length or output_sequence_length metric", where));
  }
  r.input_tokens = token_count(*isl, where + ": input_sequence_length");
  r.output_tokens = token_count(*osl, where + ": output_sequence_length");
  const double ttft = metric_seconds(metrics, "time_to_first_token", where);
  const double latency = metric_seconds(metrics, "request_latency", where);
  if (latency < ttft) throw UserError(fmt::format("{}: request_latency is below time_to_first_token", where));
  const int64_t start_ns = meta["request_start_ns"].get<int64_t>();
  if (run.requests.empty()) first_start_ns = start_ns;
  r.queued_s = r.scheduled_s = static_cast<double>(start_ns - first_start_ns) * 1e-9;
  r.first_token_s = r.queued_s + ttft;
  r.last_token_s = r.queued_s + latency;
  run.requests.push_back(std::move(r));
  return true;
}

}  // namespace

RecordedRun read_vllm_bench_result(const fs::path& file) {
  const nlohmann::json j = read_json_file(file);
  if (!j.is_object()) throw UserError(fmt::format("{}: not a vLLM bench serve result (a JSON object)", file.string()));
  for (const char* key : {"input_lens", "output_lens", "ttfts", "itls"}) {
    if (!j.contains(key) || !j[key].is_array()) {
      throw UserError(
          fmt::format("{}: no per-request '{}': a vLLM bench serve result keeps its requests only when "
                      "saved with --save-result --save-detailed",
                      file.string(), key));
    }
  }
  const size_t n = j["input_lens"].size();
  const bool has_starts = j.contains("start_times") && j["start_times"].is_array();
  for (const char* key : {"output_lens", "ttfts", "itls", "errors", "start_times"}) {
    if (j.contains(key) && j[key].is_array() && j[key].size() != n) {
      throw UserError(fmt::format("{}: '{}' has {} entries, 'input_lens' {}", file.string(), key, j[key].size(), n));
    }
  }
  RecordedRun run;
  run.dir = file;
  run.requests_file = file;
  run.source = "vLLM bench serve result";
  if (j.contains("model_id") && j["model_id"].is_string()) run.model_id = j["model_id"].get<std::string>();
  // vLLM writes an unlimited rate as the string "inf", and no client limit as null.
  const bool unlimited_rate = !j.contains("request_rate") || j["request_rate"].is_string() ||
                              (j["request_rate"].is_number() && std::isinf(j["request_rate"].get<double>()));
  int64_t clients = 0;
  if (j.contains("max_concurrency") && !j["max_concurrency"].is_null()) {
    if (!j["max_concurrency"].is_number_integer() || j["max_concurrency"].get<int64_t>() < 1) {
      throw UserError(fmt::format("{}: max_concurrency must be a whole number >= 1 or null, got {}", file.string(),
                                  j["max_concurrency"].dump()));
    }
    clients = j["max_concurrency"].get<int64_t>();
  }
  if (!has_starts) {
    if (!unlimited_rate) {
      throw UserError(
          fmt::format("{}: no start_times (vLLM before 0.11 kept none), and the run sent requests at "
                      "request_rate {}, so when each was sent is not known; rerun the benchmark with a "
                      "vLLM that saves start_times, or with --max-concurrency and no rate",
                      file.string(), j["request_rate"].dump()));
    }
    run.closed_loop_clients = clients;
    run.derived.push_back(
        clients > 0 ? fmt::format("send times: not recorded (no start_times); replayed as the closed loop it ran, {} "
                                  "clients sending the requests in order",
                                  clients)
                    : "send times: not recorded (no start_times); every request sent at once, as request_rate inf "
                      "without max_concurrency sends them");
  }
  int64_t failed = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string where = fmt::format("{}: request {}", file.string(), i);
    if (j.contains("errors") && j["errors"].is_array() && j["errors"][i].is_string() &&
        !j["errors"][i].get<std::string>().empty()) {
      ++failed;  // failed at the server or the client: nothing measured
      continue;
    }
    RecordedRequest r;
    r.id = std::to_string(i);
    r.input_tokens = token_count(j["input_lens"][i], where + " input_lens");
    r.output_tokens = token_count(j["output_lens"][i], where + " output_lens");
    const double ttft = seconds(j["ttfts"][i], where + " ttfts");
    if (!j["itls"][i].is_array()) throw UserError(fmt::format("{} itls: must be a list of seconds", where));
    double decode = 0;
    for (const auto& gap : j["itls"][i]) decode += seconds(gap, where + " itls");
    double start = 0;
    if (has_starts) {
      // perf_counter seconds: any origin, so only differences count.
      if (!j["start_times"][i].is_number() || !std::isfinite(j["start_times"][i].get<double>())) {
        throw UserError(
            fmt::format("{} start_times: must be a finite number, got {}", where, j["start_times"][i].dump()));
      }
      start = j["start_times"][i].get<double>();
    }
    r.queued_s = r.scheduled_s = start;
    r.first_token_s = start + ttft;
    r.last_token_s = r.first_token_s + decode;
    run.requests.push_back(std::move(r));
  }
  if (run.requests.empty()) throw UserError(fmt::format("{}: no request succeeded", file.string()));
  if (failed > 0) run.derived.push_back(fmt::format("{} failed requests (errors) left out", failed));
  start_at_first_send(run);
  return run;
}

RecordedRun read_aiperf_export(const fs::path& path) {
  const fs::path file = fs::is_directory(path) ? path / "profile_export.jsonl" : path;
  RecordedRun run;
  run.dir = path;
  run.requests_file = file;
  run.source = "aiperf profile export";
  // The aggregate beside it names the model and the concurrency.
  if (const fs::path summary = file.parent_path() / "profile_export_aiperf.json"; fs::exists(summary)) {
    const nlohmann::json s = read_json_file(summary);
    const nlohmann::json config = s.is_object() ? s.value("input_config", nlohmann::json::object()) : nlohmann::json();
    if (config.is_object()) {
      const auto names =
          config.value("endpoint", nlohmann::json::object()).value("model_names", nlohmann::json::array());
      if (names.is_array() && !names.empty() && names[0].is_string()) run.model_id = names[0].get<std::string>();
    }
  }
  LineReader reader(file, "aiperf profile export");
  std::string line;
  int64_t failed = 0;
  int64_t first_start_ns = 0;
  while (reader.next(line)) {
    const int64_t n = reader.line_number();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw UserError(fmt::format("{}: not a JSON object (a truncated line?)", where));
    }
    if (!j.is_object() || !j.contains("metadata") || !j["metadata"].is_object()) {
      throw UserError(fmt::format("{}: not an aiperf record (no metadata object)", where));
    }
    if (j.contains("error") && !j["error"].is_null()) {
      ++failed;
      continue;
    }
    try {
      read_aiperf_record(j, where, first_start_ns, run);
    } catch (const nlohmann::json::exception& e) {
      throw UserError(fmt::format("{}: a field has the wrong type: {}", where, e.what()));
    }
  }
  if (run.requests.empty()) throw UserError(fmt::format("{}: no request succeeded", file.string()));
  if (failed > 0) run.derived.push_back(fmt::format("{} failed requests (errors) left out", failed));
  start_at_first_send(run);
  return run;
}

RecordedRun read_recording(const fs::path& path, const ReplayOverrides& overrides) {
  if (fs::is_directory(path)) {
    if (fs::exists(path / "requests.jsonl")) return read_recorded_run(path, overrides);
    if (!fs::exists(path / "profile_export.jsonl")) {
      throw UserError(
          fmt::format("--run {}: neither requests.jsonl (LLMServingSim's bench layout) nor "
                      "profile_export.jsonl (aiperf) in the folder",
                      path.string()));
    }
  } else if (!fs::exists(path)) {
    throw UserError(fmt::format("--run {}: no such file or folder", path.string()));
  }
  const bool aiperf = fs::is_directory(path) || path.extension() == ".jsonl";
  if (!aiperf && path.extension() != ".json") {
    throw UserError(
        fmt::format("--run {}: expected a run folder, an aiperf profile_export.jsonl or a vLLM bench "
                    "serve result (.json)",
                    path.string()));
  }
  RecordedRun run = aiperf ? read_aiperf_export(path) : read_vllm_bench_result(path);
  if (run.model_id.empty() && overrides.model.empty()) {
    throw UserError(fmt::format("--run {}: the {} does not name the model; give --model", path.string(), run.source));
  }
  apply_overrides_and_note_derived(run, overrides);
  return run;
}

}  // namespace batchsim
