#include "experiments/run/output.h"

#include <algorithm>
#include <cctype>

#include <array>
#include <charconv>
#include <fstream>
#include <stdexcept>
#include <ostream>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "experiments/run/bench_result.h"
#include "experiments/run/csv_buffer.h"
#include "experiments/run/latency_diagnosis.h"
#include "experiments/run/slo.h"
#include "hwmodel/speculative.h"
#include "hwmodel/base/error.h"
#include "hwmodel/engine_profile.h"
#include "sim/kv_transfer.h"

namespace batchsim {

namespace {

nlohmann::ordered_json dist_json(const Distribution& d) {
  nlohmann::ordered_json j;
  j["mean"] = d.mean;
  j["p50"] = d.p50;
  j["p90"] = d.p90;
  j["p99"] = d.p99;
  j["max"] = d.max;
  j["count"] = d.count;
  return j;
}

}  // namespace

std::string run_diagnosis(const RunOutcome& outcome) {
  // The diagnosis reads the p99 requests' shares, which a streaming run cannot know.
  if (streamed(outcome))
    return "none: a streaming run keeps no records to find its p99 requests by (run with --no-streaming)";
  DiagnosisInputs in =
      diagnosis_inputs(outcome.result.summary, policy_traits(outcome.config.policy, outcome.config.policy_opts),
                       sends_all_at_once(outcome.config.workload.arrival, outcome.config.max_concurrency));
  in.client_connections =
      limiting_client_connections(outcome.config.max_concurrency, outcome.config.client_connections);
  return latency_diagnosis(in);
}

nlohmann::ordered_json latency_breakdown_json(const RunOutcome& outcome) {
  const Summary& s = outcome.result.summary;
  nlohmann::ordered_json j;
  for (LatencyPart part : kLatencyParts) {
    const LatencyPartSummary& p = s.latency_breakdown[part];
    // A streaming run kept no records to find the p99 requests by: null, not a wrong 0.
    j[std::string(latency_part_name(part))] = {
        {"mean", p.mean_s},
        {"p99", p.p99_s},
        {"share", p.share},
        {"share_of_p99_requests",
         streamed(outcome) ? nlohmann::ordered_json() : nlohmann::ordered_json(p.share_of_p99)}};
  }
  j["p99_requests"] =
      streamed(outcome) ? nlohmann::ordered_json() : nlohmann::ordered_json(s.latency_breakdown.p99_requests);
  j["diagnosis"] = run_diagnosis(outcome);
  return j;
}

std::string latency_breakdown_line(const Summary& s) {
  std::vector<std::string> parts;
  const bool whole_run = s.percentile_relative_error > 0;  // streaming: no p99 requests (metrics.h)
  for (LatencyPart part : kLatencyParts) {
    const double share = whole_run ? s.latency_breakdown[part].share : s.latency_breakdown[part].share_of_p99;
    // A part the run never had (kv_transfer without disaggregation) would only be noise.
    if (share > 0) parts.push_back(fmt::format("{} {:.1f}%", latency_part_name(part), 100 * share));
  }
  if (whole_run) {
    return fmt::format(
        "latency breakdown of all completed requests (streaming keeps no records to pick the p99 "
        "requests from): {}",
        fmt::join(parts, ", "));
  }
  return fmt::format("latency breakdown of the p99 requests ({}, e2e >= {:.2f}s): {}", s.latency_breakdown.p99_requests,
                     s.e2e_s.p99, fmt::join(parts, ", "));
}

const char* request_state_name(RequestState s) {
  switch (s) {
    case RequestState::kPending:
      return "pending";
    case RequestState::kWaiting:
      return "waiting";
    case RequestState::kRunning:
      return "running";
    case RequestState::kFinished:
      return "finished";
    case RequestState::kRejected:
      return "rejected";
  }
  return "?";
}

std::ofstream open_for_write(const std::filesystem::path& path, std::string_view option) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UserError(fmt::format("{}: cannot write {}", option, path.string()));
  return out;
}

nlohmann::ordered_json config_to_json(const RunConfig& c) {
  nlohmann::ordered_json j;
  j["model"] = c.model;
  j["gpu"] = c.gpu;
  j["engine"] = run_engine_name(c);
  j["tp"] = c.tp;
  // Written only when set, so that a run without them reads as it always did.
  if (c.dp != 1) j["dp"] = c.dp;
  if (c.ep != 1) j["ep"] = c.ep;
  if (c.moe_tp != 0) j["moe_tp"] = c.moe_tp;
  if (c.moe_routing != "auto") j["moe_routing"] = c.moe_routing;
  if (c.eplb) j["eplb"] = true;
  if (!c.spec_decode.empty()) j["spec_decode"] = c.spec_decode;
  if (!c.kv_offload.empty()) j["kv_offload"] = c.kv_offload;
  j["replicas"] = c.replicas;
  j["router"] = c.router;
  j["weight_dtype"] = c.weight_dtype;
  j["kv_cache_dtype"] = c.kv_cache_dtype;
  j["policy"] = c.policy;
  j["policy_opts"] = c.policy_opts;
  j["arrival"] = c.workload.arrival;
  j["trace"] = c.workload.trace.string();
  j["num_requests"] = c.workload.num_requests;
  // A trace gives each request's lengths: the length distributions did not run.
  if (c.workload.trace.empty()) {
    j["prompt_len"] = c.workload.prompt_len;
    j["output_len"] = c.workload.output_len;
  }
  j["trace_speedup"] = c.workload.trace_speedup;
  j["seed"] = c.workload.seed;
  j["prefix"] = c.workload.prefix;
  j["max_tokens"] = c.workload.max_tokens;
  j["ignore_eos"] = c.workload.ignore_eos;
  j["priority"] = c.workload.priority;
  j["gpu_memory_utilization"] = c.gpu_memory_utilization;
  j["max_concurrency"] = c.max_concurrency;
  j["think_time"] = c.workload.think_time;
  if (!c.workload.session_turns.empty())
    j["session_turns"] = c.workload.session_turns;            // only when set: older files stay as they were
  if (c.workload.trace_sessions) j["trace_sessions"] = true;  // likewise
  if (c.client_connections > 0)
    j["client_connections"] = c.client_connections;  // only when set: older files stay as they were
  if (!c.workload.resample.empty())
    j["resample"] = c.workload.resample;  // only when set: older files stay as they were
  j["num_gpu_blocks"] = c.num_gpu_blocks;
  if (c.max_model_len > 0) j["max_model_len"] = c.max_model_len;  // only when set: older files stay as they were
  // Written only for disaggregated runs, so that a colocated run's config reads as it always did.
  if (is_disaggregated(c)) {
    j["prefill_replicas"] = c.prefill_replicas;
    j["decode_replicas"] = c.decode_replicas;
    for (const char* role : {"prefill", "decode"}) {
      const RunConfig pool = pool_run_config(c, role);
      const PoolConfig& own = std::string(role) == "prefill" ? c.prefill : c.decode;
      nlohmann::ordered_json pj;
      pj["gpu"] = pool.gpu;
      pj["tp"] = pool.tp;
      if (pool.dp != 1) pj["dp"] = pool.dp;
      if (pool.ep != 1) pj["ep"] = pool.ep;
      if (pool.moe_tp != 0) pj["moe_tp"] = pool.moe_tp;
      pj["policy"] = pool.policy;
      pj["policy_opts"] = own.policy_opts;
      pj["engine"] = run_engine_name(pool);
      pj["num_gpu_blocks"] = pool.num_gpu_blocks;
      j[std::string(role)] = pj;
    }
    j["decode_router"] = c.decode_router.empty() ? c.router : c.decode_router;
    j["kv_link"] = c.kv_link;
    if (c.kv_link_gbps) j["kv_link_gbps"] = *c.kv_link_gbps;
    if (c.kv_link_latency_us) j["kv_link_latency_us"] = *c.kv_link_latency_us;
    j["kv_transfer"] = c.kv_transfer;
  }
  return j;
}

int64_t run_gpus(const RunConfig& c) {
  if (!is_disaggregated(c)) return static_cast<int64_t>(c.replicas) * c.tp * c.dp;
  return static_cast<int64_t>(c.prefill_replicas) * pool_run_config(c, "prefill").tp +
         static_cast<int64_t>(c.decode_replicas) * pool_run_config(c, "decode").tp;
}

namespace {

// "vllm" of "vllm 0.24.0", "vllm-async", "vllm-v0"; "sarathi" of "sarathi-serve (...)".
std::string software_root(std::string_view name) {
  const size_t end = name.find_first_of(" -_(");
  std::string root(name.substr(0, end));
  std::transform(root.begin(), root.end(), root.begin(), [](unsigned char c) { return std::tolower(c); });
  return root;
}

}  // namespace

nlohmann::ordered_json trust_json(const HardwareProfile& gpu, const std::string& engine) {
  nlohmann::ordered_json j;
  j["profile"] = gpu.name;
  j["source"] = gpu.source;
  if (!gpu.kernels.empty()) {
    j["kernels"] = gpu.kernels;
    // A profile is its GPU and the kernels it timed: another framework's attention and GEMM
    // kernels are not what its figures were measured on.
    const std::string family = engine.empty() ? "" : resolve_engine(engine).family;
    if (!family.empty() && family != "bare" && software_root(family) != software_root(gpu.kernels)) {
      j["kernels_note"] = fmt::format(
          "the profile timed {}'s kernels; this run's engine is {}, whose kernels may "
          "differ from those its error figures were measured on",
          gpu.kernels, engine);
    }
  }
  const ProfileValidation& v = gpu.validation;
  j["validated"] = !v.empty();
  if (!gpu.transferred_from.empty()) j["transferred_from"] = gpu.transferred_from;
  if (v.empty() && !gpu.transferred_from.empty()) {
    // Not the source's figures, which another GPU earned: the transfer and what transfers lose.
    j["reason"] = measured_transfer_error(gpu);
    nlohmann::ordered_json measured = nlohmann::ordered_json::array();
    for (const MeasuredTransfer& m : kMeasuredTransfers) {
      measured.push_back({{"direction", m.direction},
                          {"gemm_mape", m.gemm_mape_percent},
                          {"iteration_mape", m.iteration_mape_percent}});
    }
    j["transfer_error_measured"] = measured;
    return j;
  }
  if (v.empty()) {
    // Said outright rather than left out: a reader must not take silence for a good score.
    j["reason"] = gpu.source == "datasheet"
                      ? "datasheet ceilings and default efficiencies, never compared with measurements "
                        "(a fitted profile records its error: batchsim list gpus)"
                      : "the profile records no validation figures (no `validation` block, hwmodel/README.md)";
    return j;
  }
  j["measured_on"] = v.measured_on;
  j["held_out"] = v.held_out;
  j["scored_on"] = v.scored_on;
  nlohmann::ordered_json ops = nlohmann::ordered_json::object();
  for (const OperatorError& e : v.operators) {
    ops[e.op] = {{"mape", e.mape_percent}, {"p90", e.p90_percent}, {"count", e.count}};
  }
  j["operators"] = ops;
  if (!v.serving.empty()) {
    nlohmann::ordered_json backends = nlohmann::ordered_json::object();
    for (const ServingError& e : v.serving.backends) {
      nlohmann::ordered_json b = {{"ttft_mape", e.ttft_mape_percent}, {"tpot_mape", e.tpot_mape_percent}};
      if (e.ttft_median_ratio > 0) b["ttft_median_ratio"] = e.ttft_median_ratio;
      if (e.tpot_median_ratio > 0) b["tpot_median_ratio"] = e.tpot_median_ratio;
      b["count"] = e.count;
      backends[e.backend] = b;
    }
    j["serving"] = {{"measured_on", v.serving.measured_on}, {"backends", backends}};
  }
  return j;
}

std::string trust_line(const nlohmann::ordered_json& trust) {
  const std::string profile = trust.value("profile", "");
  if (!trust.value("validated", false)) {
    return fmt::format("trust: {} not validated: {}", profile, trust.value("reason", ""));
  }
  std::vector<std::string> ops;
  for (const auto& [name, e] : trust.at("operators").items()) {
    ops.push_back(fmt::format("{} {:.1f}%", name, e.at("mape").get<double>()));
  }
  std::string line = fmt::format(
      "trust: {}{}, {} MAPE on {}: {}", profile,
      trust.contains("kernels") ? fmt::format(" ({} kernels)", trust.at("kernels").get<std::string>()) : "",
      trust.value("held_out", false) ? "held-out" : "in-sample", trust.value("measured_on", ""), fmt::join(ops, ", "));
  if (trust.contains("serving")) {
    std::vector<std::string> engines;
    // "TTFT 30.3% (0.72x)": the MAPE, and the median predicted / measured where the profile
    // records it (the error's sign). `key` is the figures' prefix, "ttft" or "tpot".
    auto figure = [](const nlohmann::ordered_json& e, const std::string& label, const std::string& key) {
      std::string text = fmt::format("{} {:.1f}%", label, e.at(key + "_mape").get<double>());
      if (e.contains(key + "_median_ratio"))
        text += fmt::format(" ({:.2f}x)", e.at(key + "_median_ratio").get<double>());
      return text;
    };
    for (const auto& [name, e] : trust.at("serving").at("backends").items()) {
      engines.push_back(fmt::format("{} {} {}", name, figure(e, "TTFT", "ttft"), figure(e, "TPOT", "tpot")));
    }
    // What the end-to-end figures were measured on (the file, its rows, how they were replayed):
    // figures from closed-loop benchmarks of a few models are not those of any run.
    line += fmt::format("; end to end on {} (MAPE, median predicted/measured): {}",
                        trust.at("serving").value("measured_on", std::string("measured serving benchmarks")),
                        fmt::join(engines, ", "));
  }
  if (trust.contains("kernels_note")) line += "; note: " + trust.at("kernels_note").get<std::string>();
  return line;
}

namespace {

// summary.json's `pools`: {prefill: {...}, decode: {...}, kv_transfer: {...}} (a disaggregated
// run only).
nlohmann::ordered_json pools_json(const RunOutcome& outcome) {
  const Summary& s = outcome.result.summary;
  nlohmann::ordered_json j;
  for (const PoolSummary& p : s.pools) {
    const RunConfig pool = pool_run_config(outcome.config, p.role);
    nlohmann::ordered_json pj;
    pj["replicas"] = p.replicas;
    pj["gpu"] = pool.gpu;
    pj["tp"] = pool.tp;
    pj["policy"] = pool.policy;
    pj["engine"] = run_engine_name(pool);
    pj["requests"] = p.requests;
    pj["iterations"] = p.iterations;
    pj["busy_fraction"] = p.busy_fraction;
    pj["preemptions"] = p.preemptions;
    pj["kv"] = {{"capacity_tokens", p.kv_capacity_tokens},
                {"capacity_rule", p.kv_capacity_rule},
                {"allocated_fraction_mean", p.kv_allocated_fraction_mean},
                {"allocated_fraction_peak", p.kv_allocated_fraction_peak}};
    j[p.role] = pj;
  }
  const KvTransferSummary& t = s.kv_transfer;
  const KvLink link =
      resolve_kv_link(outcome.config.kv_link, outcome.config.kv_link_gbps, outcome.config.kv_link_latency_us);
  j["kv_transfer"] = {{"link", link.name},
                      {"gbps_per_gpu", link.gbps},
                      {"latency_us", link.latency_us},
                      {"mode", outcome.config.kv_transfer},
                      {"transfers", t.transfers},
                      {"bytes", t.bytes},
                      {"wait_s", dist_json(t.wait_s)},
                      {"queue_s", dist_json(t.queue_s)},
                      {"transfer_s", dist_json(t.transfer_s)},
                      {"handoff_gap_s", dist_json(t.handoff_gap_s)},
                      {"ttft_at_decode_s", dist_json(t.ttft_at_decode_s)}};
  return j;
}

// KV offload's tiers (docs/kv-offload.md): what each held and served, the host's as `cpu`, the
// disk's (when the run has one) as `disk`.
nlohmann::ordered_json kv_offload_json(const SimulationResult& result) {
  auto tier_json = [](const KvOffloadStats& o) {
    return nlohmann::ordered_json{{"capacity_tokens", o.capacity_tokens}, {"stored_tokens", o.stored_tokens},
                                  {"hit_tokens", o.hit_tokens},           {"evicted_tokens", o.evicted_tokens},
                                  {"load_bytes", o.load_bytes},           {"load_s", o.load_s}};
  };
  nlohmann::ordered_json j;
  if (result.kv_offload) j["cpu"] = tier_json(*result.kv_offload);
  if (result.kv_offload_disk) j["disk"] = tier_json(*result.kv_offload_disk);
  return j;
}

// What --spec-decode ran with and what it bought: the method, k and rates, and over the
// decode steps that verified drafts the mean acceptance length (1 + accepted / steps, as vLLM's
// spec_decode metrics report it) and the tokens each such step emitted.
nlohmann::ordered_json speculative_json(const RunOutcome& outcome) {
  const SpeculativeDecoding spec = parse_speculative_decoding(outcome.config.spec_decode, "--spec-decode");
  const SimulationResult::SpeculativeCounts& c = outcome.result.speculative;
  const double steps = static_cast<double>(std::max<int64_t>(c.steps, 1));
  nlohmann::ordered_json j;
  j["method"] = std::string(draft_method_name(spec.method));
  if (!spec.draft_model.empty()) j["draft_model"] = spec.draft_model;
  j["k"] = spec.k;
  j["acceptance_rates"] = spec.accept;
  j["acceptance_source"] = spec.accept_source;
  j["verification_steps"] = c.steps;
  j["draft_tokens"] = c.draft_tokens;
  j["accepted_tokens"] = c.accepted_tokens;
  j["acceptance_rate"] = c.draft_tokens > 0 ? static_cast<double>(c.accepted_tokens) / c.draft_tokens : 0.0;
  j["mean_acceptance_length"] = 1 + static_cast<double>(c.accepted_tokens) / steps;
  j["tokens_per_step"] = static_cast<double>(c.emitted_tokens) / steps;
  return j;
}

}  // namespace

nlohmann::ordered_json summary_to_json(const RunOutcome& outcome) {
  const Summary& s = outcome.result.summary;
  nlohmann::ordered_json j;
  j["batchsim_version"] = "0.1.0";
  j["config"] = config_to_json(outcome.config);
  j["seed"] = outcome.config.workload.seed;
  j["requests"] = {{"total", s.requests_total}, {"completed", s.requests_completed}, {"rejected", s.requests_rejected}};
  // Of the rejected, those no deployment of the model serves (an SLO verdict leaves them out).
  if (s.requests_rejected > 0) j["requests"]["beyond_context"] = outcome.result.rejected_beyond_context;
  j["tokens"] = {{"prompt", s.prompt_tokens}, {"output", s.output_tokens}};
  j["throughput"] = {{"output_tokens_per_s", s.output_tokens_per_s},
                     {"total_tokens_per_s", s.total_tokens_per_s},
                     {"requests_per_s", s.requests_per_s}};
  nlohmann::ordered_json lat;
  lat["e2e_s"] = dist_json(s.e2e_s);
  lat["ttft_s"] = dist_json(s.ttft_s);
  lat["tpot_s"] = dist_json(s.tpot_s);
  lat["tbt_s"] = dist_json(s.tbt_s);
  lat["normalized_s_per_token"] = dist_json(s.normalized_latency_s_per_token);
  lat["queueing_s"] = dist_json(s.queueing_s);
  j["latency"] = lat;
  if (streamed(outcome)) {
    // Added only to streaming runs, so that an exact run's summary.json stays as it was.
    j["percentiles"] = {{"method", "ddsketch"},
                        {"relative_error", s.percentile_relative_error},
                        {"note",
                         "streaming run: percentiles within relative_error of the exact nearest-rank "
                         "ones; counts, means and totals exact"}};
    j["streaming"] = {{"slots", outcome.config.streaming_slots}};
  }
  // Where the requests' time went, and what would have helped the slowest (README "Outputs").
  j["latency_breakdown"] = latency_breakdown_json(outcome);
  j["makespan_s"] = s.makespan_s;
  j["iterations"] = s.iterations;
  j["preemptions"] = s.preemptions;
  j["bubble_fraction"] = s.bubble_fraction;
  j["busy_fraction"] = s.busy_fraction;
  j["kv"] = {{"capacity_tokens", outcome.result.kv_capacity_tokens},
             {"capacity_rule", outcome.result.kv_capacity_rule},
             {"used_fraction_mean", s.kv_used_fraction_mean},
             {"used_fraction_peak", s.kv_used_fraction_peak},
             {"allocated_fraction_mean", s.kv_allocated_fraction_mean},
             {"allocated_fraction_peak", s.kv_allocated_fraction_peak}};
  // Over the admissions that had to prefill (see Summary): 0 without prefix caching.
  j["prefix_cache"] = {{"hit_rate", s.prefix_hit_rate},
                       {"cached_tokens", s.prefill_cached_tokens},
                       {"prefill_tokens_admitted", s.prefill_admitted_tokens}};
  // KV offload, when the run has a host tier: what it held and served (docs/kv-offload.md).
  if (outcome.result.kv_offload) j["kv_offload"] = kv_offload_json(outcome.result);
  // Speculative decoding, when the run speculates: the rates it ran with, and what they bought.
  if (!outcome.config.spec_decode.empty()) j["speculative_decoding"] = speculative_json(outcome);
  // A cluster's replicas one by one (the figures above are cluster-wide); a single replica's
  // would repeat them.
  if (s.replicas.size() > 1) {
    nlohmann::ordered_json replicas = nlohmann::ordered_json::array();
    for (const ReplicaSummary& r : s.replicas) {
      replicas.push_back({{"requests", r.requests},
                          {"completed", r.completed},
                          {"iterations", r.iterations},
                          {"busy_fraction", r.busy_fraction},
                          {"kv_allocated_fraction_mean", r.kv_allocated_fraction_mean},
                          {"prefix_hit_rate", r.prefix_hit_rate}});
    }
    j["replicas"] = replicas;
  }
  // Per priority class, when the requests have more than one priority: what a priority-ordered
  // scheduler bought the urgent ones and what it cost the rest. Keyed by the priority, most
  // urgent first, so that a path such as priority_classes.0.ttft_s.p99 names a figure.
  if (!s.priority_classes.empty()) {
    nlohmann::ordered_json classes = nlohmann::ordered_json::object();
    for (const PriorityClassSummary& c : s.priority_classes) {
      classes[std::to_string(c.priority)] = {{"requests", c.requests},        {"completed", c.completed},
                                             {"rejected", c.rejected},        {"preemptions", c.preemptions},
                                             {"e2e_s", dist_json(c.e2e_s)},   {"ttft_s", dist_json(c.ttft_s)},
                                             {"tpot_s", dist_json(c.tpot_s)}, {"queueing_s", dist_json(c.queueing_s)}};
    }
    j["priority_classes"] = classes;
  }
  // Judged on the figures above (experiments/run/slo.h), when the run was given objectives.
  if (!outcome.config.slo.empty()) j["slo"] = slo_json(evaluate_slo(j, outcome.config.slo), outcome.config.slo);
  const int64_t gpus = run_gpus(outcome.config);
  j["gpus"] = gpus;
  if (!s.pools.empty()) j["pools"] = pools_json(outcome);
  if (!outcome.config.goodput.empty()) {
    j["goodput"] =
        goodput_json(outcome.streamed_goodput ? *outcome.streamed_goodput
                                              : compute_goodput(outcome.result, outcome.config.goodput, s.makespan_s),
                     outcome.config.goodput);
    // DistServe's figure of merit (OSDI'24 section 2.3): goodput per provisioned GPU, so that
    // deployments of different sizes and splits compare.
    j["goodput"]["requests_per_s_per_gpu"] = j["goodput"]["requests_per_s"].get<double>() / static_cast<double>(gpus);
  }
  j["trust"] = trust_json(outcome.gpu, run_engine_name(outcome.config));
  return j;
}

namespace {

// requests.csv: its header, and one request's row. `cluster` adds the replica column;
// `handoffs` (a disaggregated run's, by request id; else empty) the hand-off columns.
void write_requests_csv_header(CsvBuffer& csv, bool cluster, bool pooled) {
  csv.put(
      "id,arrival_s,prompt_tokens,output_tokens,max_tokens,state,first_scheduled_s,first_token_s,"
      "finished_s,ttft_s,e2e_s,tpot_s,max_tbt_s,queueing_s,preemptions,reject_reason,"
      "cached_tokens,priority");
  for (LatencyPart part : kLatencyParts) csv.format(",breakdown_{}_s", latency_part_name(part));
  csv.put(cluster ? ",replica" : "");
  csv.put(pooled ? ",prefill_replica,handoff_s,kv_wait_s,kv_queue_s,kv_transfer_s,kv_bytes" : "");
  csv.end_row();
}

void write_requests_csv_row(CsvBuffer& csv, const RequestRecord& r, bool cluster,
                            const std::vector<HandoffRecord>& handoffs) {
  const bool done = r.completed();
  csv.integer(r.id);
  csv.put(',');
  csv.seconds(r.arrival);
  for (const int64_t v : {int64_t{r.prompt_tokens}, int64_t{r.output_tokens}, int64_t{r.output_limit()}}) {
    csv.put(',');
    csv.integer(v);
  }
  csv.put(',');
  csv.put(request_state_name(r.state));
  csv.put(',');
  csv.seconds_or_empty(r.first_scheduled);
  csv.put(',');
  csv.seconds_or_empty(r.first_token);
  csv.put(',');
  csv.seconds_or_empty(r.finished);
  csv.put(',');
  if (done) {
    for (const SimTime t : {r.ttft(), r.e2e()}) {
      csv.seconds(t);
      csv.put(',');
    }
    csv.fixed9(r.tpot_s());  // a quotient, not a time
    for (const SimTime t : {r.max_tbt, r.queueing()}) {
      csv.put(',');
      csv.seconds(t);
    }
    csv.put(',');
  } else {
    csv.put(",,,,,");
  }
  csv.integer(r.preemptions);
  csv.put(",\"");
  csv.put(r.reject_reason);
  csv.put("\",");
  csv.integer(r.cached_tokens);
  csv.put(',');
  csv.integer(r.priority);
  // In ns printed as seconds to the ns: the parts add up to e2e_s digit for digit.
  for (LatencyPart part : kLatencyParts) {
    csv.put(',');
    if (done) csv.seconds(r.breakdown.time(part));
  }
  if (cluster) {
    csv.put(',');
    csv.integer(r.replica);
  }
  if (!handoffs.empty()) {
    const HandoffRecord& h = handoffs[static_cast<size_t>(r.id)];
    const bool moved = h.transferred();
    csv.put(',');
    csv.integer(h.prefill_replica);
    csv.put(',');
    csv.seconds_or_empty(h.handoff);
    if (moved) {
      for (const SimTime t : {h.wait(), h.queue(), h.transfer()}) {
        csv.put(',');
        csv.seconds(t);
      }
      csv.put(',');
      csv.integer(h.transfer_bytes);
    } else {
      csv.put(",,,,");
    }
  }
  csv.end_row();
}

}  // namespace

RequestsCsvWriter::RequestsCsvWriter(const std::filesystem::path& dir, bool cluster) : cluster_(cluster) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(fmt::format("--out {}: cannot create the directory: {}", dir.string(), ec.message()));
  path_ = dir / "requests.csv";
  out_ = open_for_write(path_);
  write_requests_csv_header(csv_, cluster_, /*pooled=*/false);
}

void RequestsCsvWriter::add(const RequestRecord& r) { write_requests_csv_row(csv_, r, cluster_, {}); }

void RequestsCsvWriter::finish() {
  csv_.flush();
  out_.flush();
  if (!out_) throw UserError(fmt::format("--out: cannot write {}", path_.string()));
}

void write_run_outputs(const RunOutcome& outcome, const std::filesystem::path& dir) {
  write_run_outputs(outcome, dir, summary_to_json(outcome));
}

void write_run_outputs(const RunOutcome& outcome, const std::filesystem::path& dir,
                       const nlohmann::ordered_json& summary) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(fmt::format("--out {}: cannot create the directory: {}", dir.string(), ec.message()));

  {
    auto out = open_for_write(dir / "summary.json");
    out << summary.dump(2) << '\n';
  }
  if (!streamed(outcome)) {  // bench.json's figures (numpy percentiles, std) need every record
    // The same run under `vllm bench serve --save-result`'s keys (experiments/run/bench_result.h).
    auto out = open_for_write(dir / "bench.json");
    out << bench_json(outcome).dump(2) << '\n';
  }
  // A cluster's files get a replica column; a single replica's stay as they always were.
  const bool cluster = outcome.result.summary.replicas.size() > 1;
  // A disaggregated run's hand-off, per request (HandoffRecord): where it was prefilled, when its
  // prefill ended, how long its transfer waited for decode memory, queued for the link and
  // took, and its bytes; empty where it never got that far.
  const bool pooled = !outcome.result.handoffs.empty();
  if (!streamed(outcome)) {  // a streaming run wrote its rows as they settled (RequestsCsvWriter)
    auto out = open_for_write(dir / "requests.csv");
    CsvBuffer csv(out);
    write_requests_csv_header(csv, cluster, pooled);
    for (const RequestRecord& r : outcome.result.requests)
      write_requests_csv_row(csv, r, cluster, outcome.result.handoffs);
    csv.flush();
  }
  if (outcome.config.iteration_log && !outcome.result.iterations.empty()) {
    const bool ids = outcome.config.iteration_log_ids;
    const std::vector<IterationItem>& items = outcome.result.iteration_items;
    auto out = open_for_write(dir / "iterations.csv");
    CsvBuffer csv(out);
    csv.put(
        "index,start_s,duration_s,num_requests,num_prefills,prefill_tokens,num_decodes,"
        "bubble_slots,kv_used_tokens,kv_allocated_tokens,gemm_s,prefill_attention_s,"
        "decode_attention_s,lm_head_s,communication_s,overhead_s,gemm_compute_bound,waiting");
    csv.put(cluster ? ",replica" : "");
    csv.put(ids ? ",prefill_chunks,decode_ids" : "");
    csv.end_row();
    for (const IterationRecord& it : outcome.result.iterations) {
      const IterationCost& c = it.cost;
      csv.integer(it.index);
      csv.put(',');
      csv.seconds(it.start);
      csv.put(',');
      csv.seconds(it.duration);
      for (const int64_t v :
           {int64_t{it.num_requests}, int64_t{it.num_prefills}, it.prefill_tokens, int64_t{it.num_decodes},
            int64_t{it.bubble_slots}, it.kv_used_tokens, it.kv_allocated_tokens}) {
        csv.put(',');
        csv.integer(v);
      }
      csv.put(',');
      for (const double v :
           {c.gemm_s, c.prefill_attention_s, c.decode_attention_s, c.lm_head_s, c.communication_s, c.overhead_s}) {
        csv.general9(v);
        csv.put(',');
      }
      csv.put(c.gemm_compute_bound ? "1," : "0,");
      csv.integer(it.waiting);
      if (cluster) {
        csv.put(',');
        csv.integer(it.replica);
      }
      if (ids) {
        // Space-separated in batch order: prefill chunks as REQUEST:TOKENS, then decodes as
        // REQUEST; two passes over the iteration's items, so nothing is built aside.
        const auto first = static_cast<size_t>(it.first_item);
        const auto last = first + static_cast<size_t>(it.num_requests);
        if (last > items.size()) throw std::out_of_range("iteration items");
        for (const bool prefill : {true, false}) {
          csv.put(',');
          bool any = false;
          for (size_t k = first; k < last; ++k) {
            const IterationItem& item = items[k];
            if (item.prefill != prefill) continue;
            if (any) csv.put(' ');
            any = true;
            csv.integer(item.request);
            if (prefill) {
              csv.put(':');
              csv.integer(item.new_tokens);
            }
          }
        }
      }
      csv.end_row();
    }
    csv.flush();
  }
}

void print_priority_classes(std::ostream& out, const Summary& summary) {
  if (summary.priority_classes.empty()) return;
  fmt::print(out, "{:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}\n", "priority", "done/rej", "ttft p50", "ttft p99",
             "e2e p50", "e2e p99", "preempt");
  for (const PriorityClassSummary& c : summary.priority_classes) {
    fmt::print(out, "{:>10} {:>9} {:>8.3f}s {:>8.3f}s {:>8.2f}s {:>8.2f}s {:>8}\n", c.priority,
               fmt::format("{}/{}", c.completed, c.rejected), c.ttft_s.p50, c.ttft_s.p99, c.e2e_s.p50, c.e2e_s.p99,
               c.preemptions);
  }
}

void print_comparison_table(std::ostream& out, const std::vector<const RunOutcome*>& runs) {
  fmt::print(out, "{:<18} {:>9} {:>11} {:>11} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}\n", "policy", "done/rej",
             "out tok/s", "tot tok/s", "req/s", "e2e p50", "e2e p99", "ttft p50", "ttft p99", "tbt p99", "preempt",
             "bubble");
  for (const RunOutcome* run : runs) {
    const Summary& s = run->result.summary;
    fmt::print(out,
               "{:<18} {:>9} {:>11.1f} {:>11.1f} {:>8.2f} {:>8.2f}s {:>8.2f}s {:>8.3f}s {:>8.3f}s "
               "{:>7.1f}ms {:>8} {:>6.1f}%\n",
               run->config.policy, fmt::format("{}/{}", s.requests_completed, s.requests_rejected),
               s.output_tokens_per_s, s.total_tokens_per_s, s.requests_per_s, s.e2e_s.p50, s.e2e_s.p99, s.ttft_s.p50,
               s.ttft_s.p99, s.tbt_s.p99 * 1e3, s.preemptions, s.bubble_fraction * 100);
  }
}

nlohmann::ordered_json::json_pointer json_path_pointer(const std::string& dotted_path) {
  // Each dotted part is one key: a '~' or '/' in it is escaped (RFC 6901), so a path of any
  // text is a valid pointer, that merely names no figure ("a~b" is the key "a~b").
  std::string pointer = "/";
  for (char ch : dotted_path) {
    if (ch == '.')
      pointer += '/';
    else if (ch == '~')
      pointer += "~0";
    else if (ch == '/')
      pointer += "~1";
    else
      pointer += ch;
  }
  return nlohmann::ordered_json::json_pointer(pointer);
}

}  // namespace batchsim
