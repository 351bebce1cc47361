// batchsim._core — the C++ side of the `batchsim` Python package (python/batchsim/).
//
// Thin on purpose: every run goes through the CLI's own code (run_config_from_args parses the
// keywords as `batchsim run` flags, run_simulation simulates, summary_to_json makes summary.json,
// run_experiment runs an experiment), so Python and the CLI cannot drift apart. What lives here
// is only what Python needs in its own shape: result columns as numpy arrays, a trace given as
// arrays, and the adapter that lets a policy written in Python sit behind the C++ Policy
// interface.
//
// The GIL is released while a simulation or an experiment runs, so that runs on several Python
// threads use several cores; a Python policy takes it back for each call it makes into Python.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "experiments/cli/cli.h"
#include "experiments/run/chrome_trace.h"
#include "experiments/run/output.h"
#include "experiments/run/run_config.h"
#include "experiments/run/runner.h"
#include "experiments/study/compare.h"
#include "experiments/study/experiment.h"
#include "experiments/study/report.h"
#include "hwmodel/base/error.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "policies/continuous/continuous_policy.h"
#include "policies/registry.h"
#include "sim/kv_cache.h"
#include "sim/latency_breakdown.h"
#include "sim/policy.h"

namespace py = pybind11;

namespace batchsim {
namespace {

// ---------------------------------------------------------------------------------------------
// Results as columns.

// A column of `n` values of T, filled by `value(i)`.
template <typename T, typename F>
py::array_t<T> column(size_t n, F&& value) {
  py::array_t<T> a(static_cast<py::ssize_t>(n));
  T* out = a.mutable_data();
  for (size_t i = 0; i < n; ++i) out[i] = value(i);
  return a;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Seconds of a SimTime, NaN for "never" (requests.csv leaves such cells empty).
double seconds_or_nan(SimTime t) { return t == SimTime::max() ? kNaN : t.seconds(); }

// requests.csv's columns, in its order and with its names (experiments/run/output.cpp,
// write_run_outputs); a test compares them with the file the CLI writes for the same run.
py::dict request_columns(const RunOutcome& outcome) {
  const std::vector<RequestRecord>& r = outcome.result.requests;
  const size_t n = r.size();
  const bool cluster = outcome.result.summary.replicas.size() > 1;
  const bool pooled = !outcome.result.handoffs.empty();
  const auto done = [&](size_t i) { return r[i].completed(); };
  py::dict c;
  c["id"] = column<int32_t>(n, [&](size_t i) { return r[i].id; });
  c["arrival_s"] = column<double>(n, [&](size_t i) { return r[i].arrival.seconds(); });
  c["prompt_tokens"] = column<int32_t>(n, [&](size_t i) { return r[i].prompt_tokens; });
  c["output_tokens"] = column<int32_t>(n, [&](size_t i) { return r[i].output_tokens; });
  c["max_tokens"] = column<int32_t>(n, [&](size_t i) { return r[i].output_limit(); });
  py::list states, reasons;
  for (const RequestRecord& rec : r) {
    states.append(request_state_name(rec.state));
    reasons.append(rec.reject_reason);
  }
  c["state"] = states;
  c["first_scheduled_s"] = column<double>(n, [&](size_t i) { return seconds_or_nan(r[i].first_scheduled); });
  c["first_token_s"] = column<double>(n, [&](size_t i) { return seconds_or_nan(r[i].first_token); });
  c["finished_s"] = column<double>(n, [&](size_t i) { return seconds_or_nan(r[i].finished); });
  c["ttft_s"] = column<double>(n, [&](size_t i) { return done(i) ? r[i].ttft_s() : kNaN; });
  c["e2e_s"] = column<double>(n, [&](size_t i) { return done(i) ? r[i].e2e_s() : kNaN; });
  c["tpot_s"] = column<double>(n, [&](size_t i) { return done(i) ? r[i].tpot_s() : kNaN; });
  c["max_tbt_s"] = column<double>(n, [&](size_t i) { return done(i) ? r[i].max_tbt.seconds() : kNaN; });
  c["queueing_s"] = column<double>(n, [&](size_t i) { return done(i) ? r[i].queueing_s() : kNaN; });
  c["preemptions"] = column<int32_t>(n, [&](size_t i) { return r[i].preemptions; });
  c["reject_reason"] = reasons;
  c["cached_tokens"] = column<int64_t>(n, [&](size_t i) { return r[i].cached_tokens; });
  c["priority"] = column<int32_t>(n, [&](size_t i) { return r[i].priority; });
  for (LatencyPart part : kLatencyParts) {
    c[py::str(fmt::format("breakdown_{}_s", latency_part_name(part)))] =
        column<double>(n, [&](size_t i) { return done(i) ? r[i].breakdown.seconds(part) : kNaN; });
  }
  if (cluster) c["replica"] = column<int32_t>(n, [&](size_t i) { return r[i].replica; });
  if (pooled) {
    const std::vector<HandoffRecord>& h = outcome.result.handoffs;
    const auto moved = [&](size_t i) { return h[static_cast<size_t>(r[i].id)].transferred(); };
    const auto of = [&](size_t i) -> const HandoffRecord& { return h[static_cast<size_t>(r[i].id)]; };
    c["prefill_replica"] = column<int32_t>(n, [&](size_t i) { return of(i).prefill_replica; });
    c["handoff_s"] = column<double>(n, [&](size_t i) { return seconds_or_nan(of(i).handoff); });
    c["kv_wait_s"] = column<double>(n, [&](size_t i) { return moved(i) ? of(i).wait_s() : kNaN; });
    c["kv_queue_s"] = column<double>(n, [&](size_t i) { return moved(i) ? of(i).queue_s() : kNaN; });
    c["kv_transfer_s"] = column<double>(n, [&](size_t i) { return moved(i) ? of(i).transfer_s() : kNaN; });
    c["kv_bytes"] =
        column<double>(n, [&](size_t i) { return moved(i) ? static_cast<double>(of(i).transfer_bytes) : kNaN; });
  }
  return c;
}

// iterations.csv's columns (without --iteration-log=ids' lists), in its order.
py::dict iteration_columns(const RunOutcome& outcome) {
  const std::vector<IterationRecord>& it = outcome.result.iterations;
  const size_t n = it.size();
  py::dict c;
  c["index"] = column<int64_t>(n, [&](size_t i) { return it[i].index; });
  c["start_s"] = column<double>(n, [&](size_t i) { return it[i].start.seconds(); });
  c["duration_s"] = column<double>(n, [&](size_t i) { return it[i].duration.seconds(); });
  c["num_requests"] = column<int32_t>(n, [&](size_t i) { return it[i].num_requests; });
  c["num_prefills"] = column<int32_t>(n, [&](size_t i) { return it[i].num_prefills; });
  c["prefill_tokens"] = column<int64_t>(n, [&](size_t i) { return it[i].prefill_tokens; });
  c["num_decodes"] = column<int32_t>(n, [&](size_t i) { return it[i].num_decodes; });
  c["bubble_slots"] = column<int64_t>(n, [&](size_t i) { return it[i].bubble_slots; });
  c["kv_used_tokens"] = column<int64_t>(n, [&](size_t i) { return it[i].kv_used_tokens; });
  c["kv_allocated_tokens"] = column<int64_t>(n, [&](size_t i) { return it[i].kv_allocated_tokens; });
  c["gemm_s"] = column<double>(n, [&](size_t i) { return it[i].cost.gemm_s; });
  c["prefill_attention_s"] = column<double>(n, [&](size_t i) { return it[i].cost.prefill_attention_s; });
  c["decode_attention_s"] = column<double>(n, [&](size_t i) { return it[i].cost.decode_attention_s; });
  c["lm_head_s"] = column<double>(n, [&](size_t i) { return it[i].cost.lm_head_s; });
  c["communication_s"] = column<double>(n, [&](size_t i) { return it[i].cost.communication_s; });
  c["overhead_s"] = column<double>(n, [&](size_t i) { return it[i].cost.overhead_s; });
  c["gemm_compute_bound"] = column<bool>(n, [&](size_t i) { return it[i].cost.gemm_compute_bound; });
  c["waiting"] = column<int32_t>(n, [&](size_t i) { return it[i].waiting; });
  if (outcome.result.summary.replicas.size() > 1) {
    c["replica"] = column<int32_t>(n, [&](size_t i) { return it[i].replica; });
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Workloads given as arrays.

template <typename T>
std::vector<T> to_vector(const py::object& values) {
  if (values.is_none()) return {};
  const auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(values);
  if (!a) throw UserError("workload: a column is not an array of numbers");
  return std::vector<T>(a.data(), a.data() + a.size());
}

// The columns the Python side checked for dtype and integrality (batchsim/_workload.py).
std::shared_ptr<const TraceColumns> trace_columns(const py::dict& columns) {
  auto t = std::make_shared<TraceColumns>();
  const auto get = [&](const char* key) -> py::object {
    return columns.contains(key) ? py::reinterpret_borrow<py::object>(columns[key]) : py::none();
  };
  t->arrival_s = to_vector<double>(get("arrival_s"));
  t->prompt_tokens = to_vector<int64_t>(get("prompt_tokens"));
  t->output_tokens = to_vector<int64_t>(get("output_tokens"));
  t->max_tokens = to_vector<int64_t>(get("max_tokens"));
  t->priority = to_vector<int64_t>(get("priority"));
  return t;
}

// Puts an in-memory trace in `config` as --trace FILE would put a file: named `name`, read
// whole unless the caller gave num_requests.
void use_trace_columns(RunConfig& config, const py::dict& columns, const std::string& name, bool num_requests_given) {
  if (!config.workload.trace.empty()) {
    throw UserError(fmt::format("workload: not with trace={} (give one of them)", config.workload.trace.string()));
  }
  config.workload.trace = name;
  config.workload.trace_columns = trace_columns(columns);
  if (!num_requests_given) config.workload.num_requests = 0;
}

// ---------------------------------------------------------------------------------------------
// Policies written in Python.

// Refuses a request id that is not one of the run's, naming the object (`what`) it came to.
void check_request_id(const PolicyEnv& env, RequestId id, std::string_view what) {
  if (id < 0 || static_cast<size_t>(id) >= env.requests->size()) {
    throw UserError(fmt::format("{}: no request {} (the run has {})", what, id, env.requests->size()));
  }
}

// What a Python policy's prefix-caching KV cache reads (PrefixCacheSource): copies of the run's
// requests and their prompt-block hashes, owned by the cache's Python object, so that Python may
// keep the cache past the run.
struct PrefixSourceCopy {
  Workload requests;
  PrefixBlockHashes hashes;
};

// What a Python policy sees of the simulation (PolicyEnv), valid while the run lasts: the
// adapter clears `env` when the run is over, so that a view kept past it raises instead of
// reading freed memory.
struct EnvView {
  PolicyEnv* env = nullptr;
  PolicyEnv& get() const {
    if (env == nullptr) throw UserError("policy env: used outside the run it was attached to");
    return *env;
  }
  void check_id(RequestId id) const { check_request_id(get(), id, "policy env"); }
};

// The batch being built (schedule) or just applied (on_iteration_end), valid during that call.
struct BatchView {
  Batch* batch = nullptr;
  const PolicyEnv* env = nullptr;
  Batch& get() const {
    if (batch == nullptr) throw UserError("batch: used after the call it was passed to");
    return *batch;
  }
  void check_id(RequestId id) const { check_request_id(*env, id, "batch"); }
};

// A view of `batch` for one call into Python, cleared when the call returns, however it
// returns. Shared with Python, so that a view kept past the call raises instead of crashing.
struct BatchCall {
  std::shared_ptr<BatchView> view;
  BatchCall(Batch& batch, const PolicyEnv* env) : view(std::make_shared<BatchView>(BatchView{&batch, env})) {}
  ~BatchCall() { view->batch = nullptr; }
  py::object object() const { return py::cast(view); }
};

// A Policy whose decisions are made by a Python object with the methods of batchsim.Policy
// (python/batchsim/_policy.py): attach(env), on_arrival(id, now_s), schedule(now_s, batch),
// on_iteration_end(batch, finished, now_s), idle(), and a `kv_cache` attribute set in attach.
class PythonPolicy final : public Policy {
 public:
  PythonPolicy(py::object impl, std::string name) : impl_(std::move(impl)), name_(std::move(name)) {}
  ~PythonPolicy() override {
    py::gil_scoped_acquire gil;
    if (env_view_) env_view_->env = nullptr;
    kv_holder_ = py::object();
    impl_ = py::object();
  }

  std::string_view name() const override { return name_; }

  void attach(PolicyEnv& env) override {
    py::gil_scoped_acquire gil;
    env_view_ = std::make_shared<EnvView>();
    env_view_->env = &env;
    py::object env_object = py::cast(env_view_);
    env_ = &env;
    impl_.attr("attach")(env_object);
    if (!py::hasattr(impl_, "kv_cache") || impl_.attr("kv_cache").is_none()) {
      throw UserError(
          fmt::format("policy {}: attach() must set self.kv_cache to a batchsim.PagedKvCache "
                      "or batchsim.ReservedKvCache (the simulation reads KV use from it)",
                      name_));
    }
    kv_holder_ = impl_.attr("kv_cache");
    try {
      kv_ = kv_holder_.cast<KvCacheManager*>();
    } catch (const py::cast_error&) {
      throw UserError(
          fmt::format("policy {}: self.kv_cache must be a batchsim.PagedKvCache or "
                      "batchsim.ReservedKvCache, not {}",
                      name_, py::str(kv_holder_.get_type()).cast<std::string>()));
    }
  }

  void on_arrival(RequestId id, SimTime now) override {
    py::gil_scoped_acquire gil;
    impl_.attr("on_arrival")(id, now.seconds());
  }

  void schedule(SimTime now, Batch& batch) override {
    py::gil_scoped_acquire gil;
    const BatchCall call(batch, env_);
    impl_.attr("schedule")(now.seconds(), call.object());
  }

  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) override {
    py::gil_scoped_acquire gil;
    // Read-only by contract (sim/policy.h); the view offers items and len only to read.
    const BatchCall call(const_cast<Batch&>(batch), env_);
    py::list done;
    for (RequestId id : finished) done.append(id);
    impl_.attr("on_iteration_end")(call.object(), done, now.seconds());
  }

  bool idle() const override {
    py::gil_scoped_acquire gil;
    return impl_.attr("idle")().cast<bool>();
  }

  const KvCacheManager& kv_cache() const override { return *kv_; }

  // Disaggregated pools (sim/policy.h): the Python object says whether it serves `role`
  // (batchsim.Policy refuses every pool unless a subclass overrides it) and handles the pool
  // roles' two calls.
  std::string unsupported_role_reason(PoolRole role) const override {
    if (role == PoolRole::kColocated) return "";
    py::gil_scoped_acquire gil;
    if (!py::hasattr(impl_, "unsupported_role_reason")) return Policy::unsupported_role_reason(role);
    const py::object why = impl_.attr("unsupported_role_reason")(std::string(pool_role_name(role)));
    return why.is_none() ? "" : why.cast<std::string>();
  }
  void release_held_kv(RequestId id) override {
    py::gil_scoped_acquire gil;
    impl_.attr("release_held_kv")(id);
  }
  void on_kv_received(RequestId id, SimTime now) override {
    py::gil_scoped_acquire gil;
    impl_.attr("on_kv_received")(id, now.seconds());
  }

  // The policy's largest step, from its profile_step(max_model_len) (batchsim.Policy), sizes
  // the KV pool as vLLM's profile run does; None keeps the default profile run.
  std::optional<KvSizing> kv_sizing(const CostModel& cost_model, double gpu_memory_utilization) const override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(impl_, "profile_step")) return std::nullopt;
    const py::object step = impl_.attr("profile_step")(cost_model.model().max_context_tokens);
    if (step.is_none()) return std::nullopt;
    std::pair<int64_t, int64_t> tokens_sequences;
    try {
      tokens_sequences = step.cast<std::pair<int64_t, int64_t>>();
    } catch (const py::cast_error&) {
      throw UserError(
          fmt::format("policy {}: profile_step() must return None or (tokens, sequences), two "
                      "integers, not {}",
                      name_, py::repr(step).cast<std::string>()));
    }
    const auto [tokens, sequences] = tokens_sequences;
    if (tokens < 1 || sequences < 1 || sequences > tokens) {
      throw UserError(
          fmt::format("policy {}: profile_step() returned ({}, {}): a step needs at least one token "
                      "and 1 to `tokens` sequences",
                      name_, tokens, sequences));
    }
    return after_profile_run(cost_model, gpu_memory_utilization, tokens, sequences);
  }

 private:
  py::object impl_;
  std::string name_;
  std::shared_ptr<EnvView> env_view_;  // shared with Python, cleared when the run ends
  PolicyEnv* env_ = nullptr;
  py::object kv_holder_;  // keeps the Python-owned cache alive for the run
  KvCacheManager* kv_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Runs.

// A finished run: the outcome and what the CLI would have printed as warnings.
struct RunHandle {
  RunOutcome outcome;
  std::vector<std::string> warnings;
};

// A Python policy's factory for RunHooks::make_policy and Experiment::policy_factories: each run builds
// its policy with the GIL held.
std::function<std::unique_ptr<Policy>()> python_policy_factory(const py::object& factory, const std::string& name) {
  return [factory, name]() -> std::unique_ptr<Policy> {
    py::gil_scoped_acquire gil;
    return std::make_unique<PythonPolicy>(factory(), name);
  };
}

std::shared_ptr<RunHandle> run_from_python(const std::vector<std::string>& args, const py::object& workload_columns,
                                           bool num_requests_given, const py::object& policy_factory,
                                           const std::string& policy_name, bool record_iterations) {
  RunConfig config = run_config_from_args(args);
  if (!workload_columns.is_none()) {
    use_trace_columns(config, workload_columns.cast<py::dict>(), "workload", num_requests_given);
  }
  RunHooks hooks;
  hooks.record_iterations = record_iterations;
  if (!policy_factory.is_none()) {
    // Named for the outputs. A registered policy brings its engine; this one runs as the base
    // policies do, as current vLLM, unless engine= says otherwise.
    config.policy = policy_name;
    if (config.engine.empty()) config.engine = "vllm";
    hooks.make_policy = python_policy_factory(policy_factory, policy_name);
  }
  auto handle = std::make_shared<RunHandle>();
  {
    py::gil_scoped_release release;
    const BuiltWorkload built = build_workload(config.workload);
    handle->warnings = built.warnings;
    handle->outcome = run_simulation(config, &built, hooks);
    if (const std::string line = rejection_warning(handle->outcome.result); !line.empty()) {
      handle->warnings.push_back(fmt::format("{}: {}", config.policy, line));
    }
    if (!config.out.empty()) write_run_outputs(handle->outcome, config.out);
    if (!config.chrome_trace.empty()) write_chrome_trace(handle->outcome, config.chrome_trace);
  }
  // The factory's Python objects must be released with the GIL held; the std::function that
  // captured it lives in `hooks`, destroyed here, where the GIL is held again.
  return handle;
}

// A JSON leaf as a Python value: numbers, strings, booleans and null as themselves, arrays as
// lists (results.csv writes them as JSON text).
py::object json_to_python(const nlohmann::ordered_json& j) {
  if (j.is_null()) return py::none();
  if (j.is_boolean()) return py::bool_(j.get<bool>());
  if (j.is_number_unsigned()) return py::int_(j.get<uint64_t>());
  if (j.is_number_integer()) return py::int_(j.get<int64_t>());
  if (j.is_number_float()) return py::float_(j.get<double>());
  if (j.is_string()) return py::str(j.get<std::string>());
  return py::module_::import("json").attr("loads")(j.dump());
}

// The results table (results.csv's columns and rows) of an experiment, as
// {"columns": [...], "rows": [[...], ...]}.
py::dict results_table(const ResultSet& results) {
  const std::vector<nlohmann::ordered_json> rows = results_table_rows(results);
  const FlatTable table = flat_table(rows);
  py::list data;
  for (const auto& row : table.cells) {
    py::list values;
    for (const nlohmann::ordered_json* leaf : row) values.append(leaf ? json_to_python(*leaf) : py::none());
    data.append(values);
  }
  py::dict out;
  out["columns"] = table.columns;
  out["rows"] = data;
  return out;
}

py::dict compare_from_python(const std::string& experiment_file, const std::string& experiment_text,
                             const std::vector<std::string>& policies, const py::dict& python_policies,
                             const std::vector<uint64_t>& seeds, const std::vector<std::string>& run_args,
                             const py::object& workload_columns, bool num_requests_given, const std::string& out,
                             int jobs, bool plots, bool progress) {
  CompareOptions options;
  options.out = out;
  options.jobs = jobs;
  options.plots = plots;
  // The base as `batchsim compare EXPERIMENT --FLAG ...` patches it: flags, then the workload.
  const auto adjust = [&](RunConfig& base) {
    apply_run_args(run_args, base);
    if (!base.workload.trace.empty()) base.workload.trace = std::filesystem::absolute(base.workload.trace);
    if (!workload_columns.is_none()) {
      base.workload.trace.clear();
      use_trace_columns(base, workload_columns.cast<py::dict>(), "workload", num_requests_given);
    }
    base.out.clear();
  };
  Experiment experiment;
  if (!experiment_file.empty()) {
    experiment = parse_experiment(experiment_file, adjust);
  } else if (!experiment_text.empty()) {
    experiment = parse_experiment_text(experiment_text, "<dict>", adjust);
  } else {
    RunConfig base = run_config_from_args(run_args);
    if (!workload_columns.is_none())
      use_trace_columns(base, workload_columns.cast<py::dict>(), "workload", num_requests_given);
    if (policies.empty()) throw UserError("--policies: give at least one policy");
    // Python Policy classes among them, by the names their runs carry ("python:Fifo").
    std::map<std::string, std::function<std::unique_ptr<Policy>()>> factories;
    for (const auto& [name, factory] : python_policies) {
      factories[name.cast<std::string>()] =
          python_policy_factory(py::reinterpret_borrow<py::object>(factory), name.cast<std::string>());
    }
    experiment = experiment_from_policies(base, policies, std::move(factories));
    if (!seeds.empty()) experiment.seeds = seeds;
  }
  ResultSet results;
  {
    py::gil_scoped_release release;
    std::ostringstream quiet;
    results = run_experiment(experiment, options,
                             progress ? static_cast<std::ostream&>(std::cerr) : static_cast<std::ostream&>(quiet));
  }
  py::dict table = results_table(results);
  py::list failed;
  for (const auto& [name, why] : failed_runs(results)) failed.append(py::make_tuple(name, why));
  table["failed"] = failed;
  return table;
}

// ---------------------------------------------------------------------------------------------
// What is built in.

py::list model_rows() {
  py::list rows;
  for (const ModelSpec& m : builtin_models()) {
    py::dict r;
    r["name"] = m.name;
    r["layers"] = m.num_layers;
    r["hidden"] = m.hidden_size;
    r["heads"] = m.num_heads;
    r["kv_heads"] = m.num_kv_heads;
    r["ffn"] = m.ffn_size;
    r["gated_mlp"] = m.gated_mlp;
    r["vocab"] = m.vocab_size;
    r["context"] = m.max_context_tokens;
    r["params"] = m.total_params();
    r["active_params"] = m.active_params();
    r["experts"] = m.num_experts;
    r["experts_per_token"] = m.experts_per_token;
    r["shared_expert_ffn"] = m.shared_expert_ffn_size;
    r["dense_layers"] = m.dense_layers;
    r["attention"] = std::string(attention_kind_name(m.attention));
    r["sliding_window_layers"] = m.sliding_window_layers;
    r["chunked_attention_layers"] = m.chunked_attention_layers;
    r["weights"] = m.weight_format_text();
    r["kv_bytes_per_token"] = m.kv_bytes_per_token();
    r["hf_id"] = m.hf_id;
    rows.append(r);
  }
  return rows;
}

py::list gpu_rows() {
  py::list rows;
  for (const HardwareProfile& g : builtin_gpus()) {
    py::dict r;
    r["name"] = g.name;
    r["tflops"] = g.peak_flops / 1e12;
    r["hbm_gb_per_s"] = g.hbm_bytes_per_s / 1e9;
    r["memory_gb"] = static_cast<double>(g.memory_bytes) / 1e9;
    r["source"] = g.source;
    r["validated"] = !g.validation.empty();
    rows.append(r);
  }
  return rows;
}

py::list policy_rows() {
  py::list rows;
  for (const PolicyInfo& p : registered_policies()) {
    py::dict r;
    r["name"] = p.name;
    r["base"] = p.base;
    r["engine"] = p.engine;
    r["description"] = p.description;
    py::dict preset;
    for (const auto& [k, v] : p.preset) preset[py::str(k)] = v;
    r["preset"] = preset;
    rows.append(r);
  }
  return rows;
}

}  // namespace
}  // namespace batchsim

PYBIND11_MODULE(_core, m) {
  using namespace batchsim;
  m.doc() = "batchsim's C++ core; use the batchsim package, not this module";

  // Bad input, with the message the CLI prints after "batchsim: error: ". A ValueError, as
  // Python's own functions raise for arguments of the right type and a wrong value.
  py::register_exception<UserError>(m, "UserError", PyExc_ValueError);

  py::class_<RunHandle, std::shared_ptr<RunHandle>>(m, "RunHandle")
      .def(
          "summary_json", [](const RunHandle& h) { return summary_to_json(h.outcome).dump(); },
          "summary.json's text (the same function writes the file)")
      .def("request_columns", [](const RunHandle& h) { return request_columns(h.outcome); })
      .def("iteration_columns", [](const RunHandle& h) { return iteration_columns(h.outcome); })
      .def_readonly("warnings", &RunHandle::warnings)
      .def_property_readonly("wall_s", [](const RunHandle& h) { return h.outcome.wall_s; })
      .def(
          "write", [](const RunHandle& h, const std::string& dir) { write_run_outputs(h.outcome, dir); },
          "write summary.json, bench.json, requests.csv (and iterations.csv) into dir");

  m.def("run", &run_from_python, py::arg("args"), py::arg("workload"), py::arg("num_requests_given"),
        py::arg("policy_factory"), py::arg("policy_name"), py::arg("record_iterations"));
  m.def("compare", &compare_from_python, py::arg("experiment_file"), py::arg("experiment_text"), py::arg("policies"),
        py::arg("python_policies"), py::arg("seeds"), py::arg("run_args"), py::arg("workload"),
        py::arg("num_requests_given"), py::arg("out"), py::arg("jobs"), py::arg("plots"), py::arg("progress"));
  m.def("models", &model_rows);
  m.def("gpus", &gpu_rows);
  m.def("policies", &policy_rows);

  // --- what a Python policy works with -------------------------------------------------------
  py::class_<Request>(m, "Request", "a request's arrival data (sim/workload/request.h); read-only")
      .def_readonly("id", &Request::id)
      .def_property_readonly("arrival_s", [](const Request& r) { return r.arrival.seconds(); })
      .def_readonly("prompt_tokens", &Request::prompt_tokens)
      .def_readonly("output_tokens", &Request::output_tokens)
      .def_property_readonly("max_tokens", &Request::output_limit)
      .def_readonly("priority", &Request::priority);

  py::class_<RequestProgress>(m, "RequestProgress",
                              "a request's progress (sim/policy.h), advanced only by the replica; read-only")
      .def_property_readonly("state", [](const RequestProgress& p) { return request_state_name(p.state); })
      .def_readonly("computed_tokens", &RequestProgress::computed_tokens)
      .def_readonly("generated_tokens", &RequestProgress::generated_tokens)
      .def_readonly("preemptions", &RequestProgress::preemptions)
      .def_readonly("cached_tokens", &RequestProgress::cached_tokens);

  py::class_<EnvView, std::shared_ptr<EnvView>>(m, "PolicyEnv",
                                                "what a policy may read and do (sim/policy.h, PolicyEnv)")
      .def_property_readonly("num_requests", [](const EnvView& v) { return v.get().requests->size(); })
      .def_property_readonly("kv_capacity_tokens", [](const EnvView& v) { return v.get().kv_capacity_tokens; })
      .def_property_readonly("num_gpu_blocks", [](const EnvView& v) { return v.get().num_gpu_blocks; })
      .def_property_readonly("max_model_len", [](const EnvView& v) { return v.get().max_model_len; })
      .def(
          "request",
          [](const EnvView& v, RequestId id) -> const Request& {
            v.check_id(id);
            return v.get().request(id);
          },
          py::return_value_policy::copy)
      .def(
          "progress",
          [](const EnvView& v, RequestId id) -> const RequestProgress& {
            v.check_id(id);
            return v.get().progress_of(id);
          },
          py::return_value_policy::copy, "a copy of the request's progress now")
      .def("known_tokens",
           [](const EnvView& v, RequestId id) {
             v.check_id(id);
             return v.get().known_tokens(id);
           })
      .def("computed_tokens",
           [](const EnvView& v, RequestId id) {
             v.check_id(id);
             return v.get().progress_of(id).computed_tokens;
           })
      .def("output_limit",
           [](const EnvView& v, RequestId id) {
             v.check_id(id);
             return v.get().output_limit(id);
           })
      .def("all_arrived", [](const EnvView& v) { return v.get().all_arrived(); })
      .def(
          "reject",
          [](const EnvView& v, RequestId id, const std::string& reason) {
            v.check_id(id);
            v.get().reject(id, reason);
          },
          py::arg("id"), py::arg("reason"))
      .def(
          "preempt",
          [](const EnvView& v, RequestId id, bool keeps_kv) {
            v.check_id(id);
            v.get().preempt(id, keeps_kv);
          },
          py::arg("id"), py::arg("keeps_kv") = false)
      .def(
          "reject_over_context",
          [](const EnvView& v, RequestId id) {
            v.check_id(id);
            return reject_over_context(v.get(), id);
          },
          "reject the request, with the continuous policies' reason, when prompt + output exceed max_model_len")
      .def(
          "prefix_caching_kv_cache",
          [](const EnvView& v, int64_t num_blocks, int32_t block_size, double watermark_fraction) {
            if (num_blocks < 1 || block_size < 1 || !(watermark_fraction >= 0 && watermark_fraction < 1)) {
              throw UserError(
                  fmt::format("policy env: prefix_caching_kv_cache needs num_blocks >= 1, block_size >= 1 "
                              "and watermark_fraction in [0, 1), got {}, {}, {}",
                              num_blocks, block_size, watermark_fraction));
            }
            const PolicyEnv& env = v.get();
            auto source = std::make_unique<PrefixSourceCopy>(PrefixSourceCopy{
                *env.requests, env.prefix_blocks != nullptr ? *env.prefix_blocks : PrefixBlockHashes{}});
            auto cache = std::make_unique<PagedKvCache>(static_cast<int64_t>(env.requests->size()), num_blocks,
                                                        block_size, watermark_fraction,
                                                        PrefixCacheSource{&source->requests, &source->hashes});
            py::object cache_object = py::cast(std::move(cache));
            cache_object.attr("_prefix_source") = py::cast(std::move(source));
            return cache_object;
          },
          py::arg("num_blocks"), py::arg("block_size") = kDefaultBlockSize, py::arg("watermark_fraction") = 0.0,
          "a PagedKvCache that shares full blocks of equal prompt prefixes between requests (the workload's "
          "--prefix or a trace's hash_ids; without them nothing is shared)")
      .def_property_readonly(
          "role", [](const EnvView& v) { return std::string(pool_role_name(v.get().role)); },
          "the replica's pool: colocated, prefill or decode")
      .def(
          "start_kv_transfer",
          [](const EnvView& v, RequestId id, int64_t tokens) {
            v.check_id(id);
            const PolicyEnv& env = v.get();
            if (env.role != PoolRole::kDecode || !env.start_kv_transfer) {
              throw UserError("policy env: start_kv_transfer is for a decode pool's replica");
            }
            if (tokens < 0 || tokens > env.request(id).prompt_tokens) {
              throw UserError(
                  fmt::format("policy env: start_kv_transfer({}, {}): tokens must be in [0, {}] (the prompt)", id,
                              tokens, env.request(id).prompt_tokens));
            }
            env.start_kv_transfer(id, tokens);
          },
          py::arg("id"), py::arg("tokens"),
          "decode pool: KV for remote request id is allocated; pull `tokens` of its prompt over the link "
          "(on_kv_received(id, now_s) follows when they land)")
      .def(
          "use_cached_prefix",
          [](const EnvView& v, RequestId id, int64_t tokens) {
            v.check_id(id);
            const PolicyEnv& env = v.get();
            const RequestProgress& p = env.progress_of(id);
            if (p.state != RequestState::kWaiting || p.computed_tokens != 0 || tokens < 1 ||
                tokens >= env.known_tokens(id)) {
              throw UserError(
                  fmt::format("policy env: use_cached_prefix({}, {}): only a waiting request with nothing "
                              "computed, and fewer cached tokens than its {} known ones",
                              id, tokens, env.known_tokens(id)));
            }
            env.use_cached_prefix(id, tokens);
          },
          py::arg("id"), py::arg("tokens"),
          "request id, being admitted now, found its first `tokens` tokens in the prefix cache: they count as "
          "computed, and its prefill starts after them")
      .def(
          "reject_over_cache",
          [](const EnvView& v, const KvCacheManager& kv, RequestId id, int64_t footprint_tokens) {
            v.check_id(id);
            return reject_over_cache(v.get(), kv, id, footprint_tokens);
          },
          py::arg("kv_cache"), py::arg("id"), py::arg("footprint_tokens"),
          "reject the request, with the continuous policies' reason, when even an empty cache cannot hold it");

  py::class_<BatchView, std::shared_ptr<BatchView>>(m, "Batch", "one iteration's work (sim/batch.h)")
      .def(
          "add",
          [](const BatchView& v, RequestId id, int64_t new_tokens) {
            if (new_tokens < 1) throw UserError(fmt::format("batch.add: new_tokens must be >= 1, got {}", new_tokens));
            Batch& batch = v.get();  // first: a batch kept past its call refuses before anything is read
            v.check_id(id);
            return add_batch_step(*v.env, id, new_tokens, batch);
          },
          py::arg("id"), py::arg("new_tokens"),
          "add new_tokens of request id at its computed tokens (a prefill chunk, or 1 for a decode); "
          "returns whether the step samples a token")
      .def_property_readonly(
          "items",
          [](const BatchView& v) {
            py::list items;
            for (const BatchItem& i : v.get().items) items.append(py::make_tuple(i.id, i.new_tokens, i.context_before));
            return items;
          },
          "(id, new_tokens, context_before) of each item")
      // What static batching needs (policies/static/static_policy.cpp): items whose work the policy
      // describes itself, padded or held rows that compute without progressing, the slots they
      // waste, a later wake-up, and time beyond the kernels.
      .def(
          "add_item",
          [](const BatchView& v, RequestId id, int64_t new_tokens) {
            Batch& batch = v.get();
            v.check_id(id);
            const int64_t computed = v.env->progress_of(id).computed_tokens;
            const int64_t left = v.env->known_tokens(id) - computed;
            if (new_tokens < 1 || new_tokens > left) {
              throw UserError(
                  fmt::format("batch.add_item: new_tokens of request {} must be in [1, {}] (its known "
                              "tokens not yet computed), got {}",
                              id, left, new_tokens));
            }
            batch.items.push_back({id, static_cast<int32_t>(new_tokens), computed});
          },
          py::arg("id"), py::arg("new_tokens"),
          "add new_tokens of request id at its computed tokens without timing them: the policy "
          "describes the iteration's work itself with add_prefill_work and add_decode_work")
      .def(
          "add_prefill_work",
          [](const BatchView& v, int64_t tokens, int64_t context_before, bool samples) {
            if (tokens < 1 || context_before < 0) {
              throw UserError(
                  fmt::format("batch.add_prefill_work: tokens must be >= 1 and context_before >= 0, "
                              "got {} and {}",
                              tokens, context_before));
            }
            v.get().shape.add_prefill(tokens, context_before);
            if (samples) ++v.get().shape.num_sampled;
          },
          py::arg("tokens"), py::arg("context_before") = 0, py::arg("samples") = true,
          "time a prefill of tokens after context_before tokens (a padded prompt, a row that progresses nothing)")
      .def(
          "add_decode_work",
          [](const BatchView& v, int64_t context_before, bool samples) {
            if (context_before < 0) {
              throw UserError(
                  fmt::format("batch.add_decode_work: context_before must be >= 0, got {}", context_before));
            }
            v.get().shape.add_decode(context_before);
            if (samples) ++v.get().shape.num_sampled;
          },
          py::arg("context_before"), py::arg("samples") = true,
          "time one decoded token after context_before tokens (a padded or finished row)")
      .def_property(
          "bubble_slots", [](const BatchView& v) { return v.get().bubble_slots; },
          [](const BatchView& v, int64_t slots) {
            if (slots < 0) throw UserError(fmt::format("batch.bubble_slots must be >= 0, got {}", slots));
            v.get().bubble_slots = slots;
          },
          "batch slots that compute nothing useful this iteration (summary.json's bubble_fraction)")
      .def_property(
          "wake_at",
          [](const BatchView& v) -> std::optional<double> {
            if (!v.get().wake_at) return std::nullopt;
            return v.get().wake_at->seconds();
          },
          [](const BatchView& v, std::optional<double> at_s) {
            if (at_s && !(std::isfinite(*at_s) && *at_s >= 0)) {
              throw UserError(fmt::format("batch.wake_at must be a time in seconds >= 0, got {}", *at_s));
            }
            v.get().wake_at = at_s ? std::optional<SimTime>(SimTime::from_seconds(*at_s)) : std::nullopt;
          },
          "with nothing scheduled: when to call schedule() again though nothing arrives (a batch timeout)")
      .def_property(
          "extra_time_s", [](const BatchView& v) { return v.get().extra_time.seconds(); },
          [](const BatchView& v, double s) {
            if (!(std::isfinite(s) && s >= 0))
              throw UserError(fmt::format("batch.extra_time_s must be >= 0, got {}", s));
            v.get().extra_time = SimTime::from_seconds(s);
          },
          "seconds the iteration takes beyond the cost model's time (a transfer the GPU waits for)")
      .def("__len__", [](const BatchView& v) { return v.get().items.size(); });

  py::class_<KvCacheManager>(m, "KvCache", "a KV-cache manager (sim/kv_cache.h)")
      .def_property_readonly("kind", [](const KvCacheManager& k) { return std::string(k.kind()); })
      .def("try_admit", &KvCacheManager::try_admit, py::arg("id"), py::arg("tokens"), py::arg("reserve_tokens"))
      .def("try_grow", &KvCacheManager::try_grow, py::arg("id"), py::arg("tokens"))
      .def("release", &KvCacheManager::release, py::arg("id"))
      .def("fits_when_empty", &KvCacheManager::fits_when_empty, py::arg("reserve_tokens"))
      .def("can_admit", &KvCacheManager::can_admit, py::arg("id"), py::arg("tokens"), py::arg("reserve_tokens"))
      .def("holds", &KvCacheManager::holds, py::arg("id"))
      .def("tokens_of", &KvCacheManager::tokens_of, py::arg("id"))
      .def_property_readonly("capacity_tokens", &KvCacheManager::capacity_tokens)
      .def_property_readonly("allocated_tokens", &KvCacheManager::allocated_tokens)
      .def_property_readonly("used_tokens", &KvCacheManager::used_tokens)
      .def("cached_prefix_tokens", &KvCacheManager::cached_prefix_tokens, py::arg("id"), py::arg("known_tokens"),
           "tokens of the request's first known_tokens whose KV the prefix cache holds, whole blocks, leaving "
           "at least one to compute (0 without prefix caching)");
  py::class_<PagedKvCache, KvCacheManager>(m, "PagedKvCache", "vLLM's PagedAttention blocks (sim/kv_cache.h)",
                                           py::dynamic_attr())
      .def(py::init<int64_t, int64_t, int32_t, double>(), py::arg("num_requests"), py::arg("num_blocks"),
           py::arg("block_size") = kDefaultBlockSize, py::arg("watermark_fraction") = 0.0)
      .def_property_readonly("num_blocks", &PagedKvCache::num_blocks)
      .def_property_readonly("free_blocks", &PagedKvCache::free_blocks)
      .def_property_readonly("block_size", &PagedKvCache::block_size)
      .def("blocks_for", &PagedKvCache::blocks_for, py::arg("tokens"))
      .def_property_readonly("prefix_caching", &PagedKvCache::prefix_caching)
      .def("shared_tokens_of", &PagedKvCache::shared_tokens_of, py::arg("id"),
           "tokens of the request's KV in blocks it found in the prefix cache at admission");
  py::class_<PrefixSourceCopy>(m, "_PrefixSource", "the prompts a prefix-caching KV cache reads (kept by the cache)");
  py::class_<ReservedKvCache, KvCacheManager>(m, "ReservedKvCache",
                                              "a contiguous reservation per request (sim/kv_cache.h)")
      .def(py::init<int64_t, int64_t, int32_t>(), py::arg("num_requests"), py::arg("capacity_tokens"),
           py::arg("block_size") = 1)
      .def("reservation_of", &ReservedKvCache::reservation_of, py::arg("id"));
  m.attr("DEFAULT_BLOCK_SIZE") = kDefaultBlockSize;
}
