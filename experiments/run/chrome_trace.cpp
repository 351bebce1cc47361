#include "experiments/run/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "experiments/run/output.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

using Json = nlohmann::ordered_json;

double micros(SimTime t) { return static_cast<double>(t.ns()) / 1e3; }
// Milliseconds to the nanosecond, the resolution of simulated time: no digits past it to store.
double millis(double seconds) { return std::round(seconds * 1e9) / 1e6; }
double millis(SimTime t) { return static_cast<double>(t.ns()) / 1e6; }

// Perfetto reads pid 0 as the kernel's idle process: replicas count from 1. The iterations
// thread of a replica is its main thread (tid = pid), which keeps tids unique across replicas.
int pid_of(int32_t replica) { return replica + 1; }

// An event's fixed fields come first and "args" last: Perfetto's JSON reader finds "ts" by
// scanning an event's keys in order, and gives up on an array that comes before it (arrays
// here are only inside args).
void set_event(Json& e, std::string_view name, char phase, SimTime at, int pid) {
  e["name"] = name;
  e["ph"] = std::string(1, phase);
  e["ts"] = micros(at);
  e["pid"] = pid;
}

Json event(std::string_view name, char phase, SimTime at, int pid) {
  Json e;
  set_event(e, name, phase, at, pid);
  return e;
}

Json metadata(std::string_view what, int pid, Json args) {
  Json e;
  e["name"] = what;
  e["ph"] = "M";
  e["pid"] = pid;
  e["tid"] = pid;
  e["args"] = std::move(args);
  return e;
}

// The events as one JSON object, streamed: "traceEvents" first (Perfetto stops reading at a
// top-level key it does not know, and takes a "displayTimeUnit" for the unit of ts, so there
// is none), then "otherData".
class EventStream {
 public:
  explicit EventStream(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":[\n"; }
  void add(const Json& e) {
    if (events_++ > 0) out_ << ",\n";
    // Serialized into a string and written at once: the stream adapter would make one ostream
    // call per character.
    out_ << e.dump();
  }
  void close(const Json& other_data) { out_ << "\n],\n\"otherData\":" << other_data.dump() << "}\n"; }

 private:
  std::ostream& out_;
  int64_t events_ = 0;
};

// "prefill 2 (3072 tok) + decode 14", "decode 30", "prefill 1 (512 tok)".
std::string iteration_name(const IterationRecord& it) {
  std::string name;
  if (it.num_prefills > 0) name = fmt::format("prefill {} ({} tok)", it.num_prefills, it.prefill_tokens);
  if (it.num_decodes > 0) name += fmt::format("{}decode {}", name.empty() ? "" : " + ", it.num_decodes);
  return name;
}

// Fills `args` in place: the trace reuses one iteration event, which keeps a run of a hundred
// thousand iterations from allocating and freeing as many JSON trees.
void set_iteration_args(Json& args, const IterationRecord& it, const std::vector<IterationItem>& items) {
  args["iteration"] = it.index;
  args["num_requests"] = it.num_requests;
  args["num_prefills"] = it.num_prefills;
  args["prefill_tokens"] = it.prefill_tokens;
  args["num_decodes"] = it.num_decodes;
  args["bubble_slots"] = it.bubble_slots;
  args["kv_used_tokens"] = it.kv_used_tokens;
  args["kv_allocated_tokens"] = it.kv_allocated_tokens;
  args["waiting"] = it.waiting;
  const IterationCost& c = it.cost;
  Json& cost = args["cost_ms"];
  cost["gemm"] = millis(c.gemm_s);
  cost["prefill_attention"] = millis(c.prefill_attention_s);
  cost["decode_attention"] = millis(c.decode_attention_s);
  cost["lm_head"] = millis(c.lm_head_s);
  cost["elementwise"] = millis(c.elementwise_s);
  cost["communication"] = millis(c.communication_s);
  cost["overhead"] = millis(c.overhead_s);
  cost["total"] = millis(c.total_s);
  args["gemm_compute_bound"] = c.gemm_compute_bound;
  // Time the iteration took beyond the cost model's (swap transfers: Batch::extra_time); a
  // nanosecond or two is the rounding of the model's seconds.
  const SimTime beyond_cost = it.duration - SimTime::from_seconds(c.total_s);
  if (beyond_cost > SimTime::from_ns(1)) {
    args["extra_ms"] = millis(beyond_cost);
  } else {
    args.erase("extra_ms");
  }
  // Whose prefill chunks shared (and stretched) this iteration.
  Json& ids = args["prefill_request_ids"];
  Json& tokens = args["prefill_chunk_tokens"];
  ids = Json::array();
  tokens = Json::array();
  const auto first = static_cast<size_t>(it.first_item);
  if (first + static_cast<size_t>(it.num_requests) > items.size()) return;  // items not recorded
  for (size_t k = first; k < first + static_cast<size_t>(it.num_requests); ++k) {
    if (!items[k].prefill) continue;
    ids.push_back(items[k].request);
    tokens.push_back(items[k].new_tokens);
  }
}

// The figures a "request N" slice shows (requests.csv's, in ms).
Json request_args(const RequestRecord& r) {
  Json args;
  args["prompt_tokens"] = r.prompt_tokens;
  args["output_tokens"] = r.output_tokens;
  args["state"] = request_state_name(r.state);
  args["preemptions"] = r.preemptions;
  args["cached_tokens"] = r.cached_tokens;
  if (r.completed()) {
    args["ttft_ms"] = millis(r.ttft_s());
    args["e2e_ms"] = millis(r.e2e_s());
    args["queueing_ms"] = millis(r.queueing_s());
    args["tpot_ms"] = millis(r.tpot_s());
    args["max_tbt_ms"] = millis(r.max_tbt);
    // Where its e2e went (requests.csv's breakdown_<part>_s), beside the slices that show when.
    Json breakdown;
    for (LatencyPart part : kLatencyParts) {
      breakdown[std::string(latency_part_name(part))] = millis(SimTime::from_ns(r.breakdown[part]));
    }
    args["breakdown_ms"] = breakdown;
  }
  if (!r.reject_reason.empty()) args["reject_reason"] = r.reject_reason;
  return args;
}

// The last counter values written per replica: a counter is written only when it changes.
struct CounterState {
  std::pair<int64_t, int64_t> kv{-1, -1}, requests{-1, -1};  // (used, allocated), (running, waiting)
};

// What is written at a time: ordered by time, each kind's events made from its record.
enum class Step : uint8_t { kIdle, kIteration, kRequestBegin, kPhaseBegin, kPhaseEnd, kRequestEnd };
struct ScheduledStep {
  int64_t at_ns;
  Step step;
  int64_t index;  // into idle_samples, iterations, or request_phases (the change concerned)
};

// Every step of the trace in the order it is written. Idle samples come before iterations
// that start at the same time (the replica was idle, then started one), and a request's steps
// in the order they nest.
std::vector<ScheduledStep> schedule_steps(const SimulationResult& result) {
  std::vector<ScheduledStep> steps;
  const auto& phases = result.request_phases;
  steps.reserve(result.idle_samples.size() + result.iterations.size() + 2 * phases.size() + 2);
  for (size_t j = 0; j < result.idle_samples.size(); ++j) {
    steps.push_back({result.idle_samples[j].at.ns(), Step::kIdle, static_cast<int64_t>(j)});
  }
  for (size_t i = 0; i < result.iterations.size(); ++i) {
    steps.push_back({result.iterations[i].start.ns(), Step::kIteration, static_cast<int64_t>(i)});
  }
  for (size_t first = 0; first < phases.size();) {
    size_t last = first;
    while (last + 1 < phases.size() && phases[last + 1].request == phases[first].request) ++last;
    steps.push_back({phases[first].at.ns(), Step::kRequestBegin, static_cast<int64_t>(first)});
    for (size_t k = first; k < last; ++k) {
      // A phase that took no time (queued for an instant) would be an empty slice.
      if (phases[k + 1].at == phases[k].at) continue;
      steps.push_back({phases[k].at.ns(), Step::kPhaseBegin, static_cast<int64_t>(k)});
      steps.push_back({phases[k + 1].at.ns(), Step::kPhaseEnd, static_cast<int64_t>(k)});
    }
    steps.push_back({phases[last].at.ns(), Step::kRequestEnd, static_cast<int64_t>(last)});
    first = last + 1;
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const ScheduledStep& a, const ScheduledStep& b) { return a.at_ns < b.at_ns; });
  return steps;
}

class TraceBuilder {
 public:
  TraceBuilder(const RunOutcome& run, EventStream& stream)
      : run_(run),
        result_(run.result),
        stream_(stream),
        counters_(std::max<size_t>({1, static_cast<size_t>(run.config.replicas), run.result.summary.replicas.size()})) {
  }

  void write() {
    write_metadata();
    for (const ScheduledStep& s : schedule_steps(result_)) {
      const auto i = static_cast<size_t>(s.index);
      switch (s.step) {
        case Step::kIdle: {
          const IdleSample& idle = result_.idle_samples[i];
          write_counters(idle.replica, idle.at, idle.kv_used_tokens, idle.kv_allocated_tokens, 0, idle.waiting);
          break;
        }
        case Step::kIteration:
          write_iteration(result_.iterations[i]);
          break;
        case Step::kRequestBegin: {
          const RequestRecord& r = record_of(i);
          write_request_event('b', fmt::format("request {}", r.id), r, result_.request_phases[i].at, request_args(r));
          break;
        }
        case Step::kPhaseBegin:
          write_request_event('b', phase_name(result_.request_phases[i].phase), record_of(i),
                              result_.request_phases[i].at);
          break;
        case Step::kPhaseEnd:
          write_request_event('e', phase_name(result_.request_phases[i].phase), record_of(i),
                              result_.request_phases[i + 1].at);
          break;
        case Step::kRequestEnd: {
          const RequestRecord& r = record_of(i);
          write_request_event('e', fmt::format("request {}", r.id), r, result_.request_phases[i].at);
          break;
        }
      }
    }
    Json other;
    other["generator"] = "batchsim";
    other["time_unit"] = "simulated microseconds";
    other["traced_requests"] = traced_requests();
    other["kv_capacity_tokens"] = result_.kv_capacity_tokens;
    other["config"] = config_to_json(run_.config);
    stream_.close(other);
  }

 private:
  const RequestRecord& record_of(size_t phase_index) const {
    return result_.requests[static_cast<size_t>(result_.request_phases[phase_index].request)];
  }

  int64_t traced_requests() const {
    int64_t n = 0;
    for (size_t k = 0; k < result_.request_phases.size(); ++k) {
      n += k == 0 || result_.request_phases[k].request != result_.request_phases[k - 1].request;
    }
    return n;
  }

  void write_metadata() {
    const RunConfig& c = run_.config;
    for (size_t r = 0; r < counters_.size(); ++r) {
      const int pid = pid_of(static_cast<int32_t>(r));
      stream_.add(
          metadata("process_name", pid,
                   {{"name", fmt::format("replica {} ({}, {} on {}, tp {})", r, c.policy, c.model, c.gpu, c.tp)}}));
      stream_.add(metadata("process_sort_index", pid, {{"sort_index", r}}));
      stream_.add(metadata("thread_name", pid, {{"name", "iterations"}}));
    }
  }

  void write_iteration(const IterationRecord& it) {
    const int pid = pid_of(it.replica);
    Json& e = iteration_event_;
    set_event(e, iteration_name(it), 'X', it.start, pid);
    e["tid"] = pid;
    e["dur"] = micros(it.duration);
    e["cat"] = "iteration";
    set_iteration_args(e["args"], it, result_.iteration_items);
    stream_.add(e);
    write_counters(it.replica, it.start, it.kv_used_tokens, it.kv_allocated_tokens, it.num_requests, it.waiting);
  }

  void write_counters(int32_t replica, SimTime at, int64_t kv_used, int64_t kv_allocated, int64_t running,
                      int64_t waiting) {
    CounterState& last = counters_.at(static_cast<size_t>(replica));
    const int pid = pid_of(replica);
    write_counter(kv_event_, "KV cache", at, pid, {"used_tokens", "allocated_tokens"}, {kv_used, kv_allocated},
                  last.kv);
    write_counter(requests_event_, "requests", at, pid, {"running", "waiting"}, {running, waiting}, last.requests);
  }

  // Counter `name`, a track per series in a viewer, written when a value differs from `last`.
  void write_counter(Json& e, std::string_view name, SimTime at, int pid, std::pair<const char*, const char*> series,
                     std::pair<int64_t, int64_t> values, std::pair<int64_t, int64_t>& last) {
    if (values == last) return;
    set_event(e, name, 'C', at, pid);
    e["args"][series.first] = values.first;
    e["args"][series.second] = values.second;
    stream_.add(e);
    last = values;
  }

  // A nestable async event on request `r`'s track: every event of one request shares its
  // category and id, so a viewer draws them on one track, phases nested in "request N".
  void write_request_event(char phase, std::string_view name, const RequestRecord& r, SimTime at, Json args = nullptr) {
    Json e = event(name, phase, at, pid_of(r.replica));
    e["cat"] = "request";
    e["id"] = r.id;
    if (!args.is_null()) e["args"] = std::move(args);
    stream_.add(e);
  }

  const RunOutcome& run_;
  const SimulationResult& result_;
  EventStream& stream_;
  std::vector<CounterState> counters_;  // per replica
  // Reused for every event of their kind (set_iteration_args says why).
  Json iteration_event_, kv_event_, requests_event_;
};

}  // namespace

void write_chrome_trace(const RunOutcome& run, std::ostream& out) {
  EventStream stream(out);
  TraceBuilder(run, stream).write();
}

void write_chrome_trace(const RunOutcome& run, const std::filesystem::path& file) {
  auto out = open_for_write(file, "--chrome-trace");
  write_chrome_trace(run, out);
  out.flush();
  if (!out) throw UserError(fmt::format("--chrome-trace: writing {} failed (disk full?)", file.string()));
}

}  // namespace batchsim
