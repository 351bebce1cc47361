#include "experiments/run/runner.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hwmodel/speculative.h"
#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "policies/dp_attention/dp_attention_policy.h"
#include "policies/registry.h"

namespace batchsim {

int64_t memory_needed_bytes(double bytes_per_request, int64_t requests) {
  return static_cast<int64_t>(1.1 * bytes_per_request * static_cast<double>(requests)) + (int64_t{64} << 20);
}

void check_memory(int64_t needed, int64_t available, int64_t requests, const std::string& policy) {
  if (available <= 0 || needed <= available) return;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  throw UserError(
      fmt::format("--num-requests: {} requests under {} need about {:.1f} GiB, more than the {:.1f} GiB this "
                  "machine has available; simulate fewer requests (or shard the sweep)",
                  requests, policy, static_cast<double>(needed) / kGiB, static_cast<double>(available) / kGiB));
}

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

namespace {

// The pool's policy, refused by its option when it cannot serve `role`.
std::unique_ptr<Policy> make_pool_policy(const RunConfig& pool, PoolRole role) {
  auto policy = make_policy(pool.policy, PolicyOptions(pool.policy_opts));
  if (const std::string why = policy->unsupported_role_reason(role); !why.empty()) {
    throw UserError(fmt::format("--{}-policy {}: {}", pool_role_name(role), pool.policy, why));
  }
  return policy;
}

// The engine as the pool's server runs it: a server that sizes its CUDA graphs by a rule of its
// own (Policy::cuda_graph_max_batch: SGLang's cuda_graph_max_bs) replaces the profile's cap,
// where the engine runs graphs at all.
EngineProfile engine_for_pool(EngineProfile engine, const Policy& policy, const HardwareProfile& gpu, int tp) {
  if (engine.cuda_graph_max_tokens <= 0) return engine;
  if (const std::optional<int64_t> cap = policy.cuda_graph_max_batch(gpu, tp)) engine.cuda_graph_max_tokens = *cap;
  return engine;
}

// One policy instance per replica: each has its own queues and KV cache. A disaggregated
// run's prefill pool comes first, then its decode pool, each with its pool's policy.
struct ReplicaPolicies {
  std::vector<std::unique_ptr<Policy>> owned;
  std::vector<Policy*> replicas;

  void add(const RunConfig& c, int count, PoolRole role, const RunHooks& hooks) {
    const auto one_policy = [&]() -> std::unique_ptr<Policy> {
      return hooks.make_policy              ? hooks.make_policy()
             : role == PoolRole::kColocated ? make_policy(c.policy, PolicyOptions(c.policy_opts))
                                            : make_pool_policy(c, role);
    };
    for (int i = 0; i < count; ++i) {
      if (c.dp > 1) {
        // Attention data parallelism: dp schedulers of the policy's kind stepping together.
        std::vector<std::unique_ptr<Policy>> ranks;
        for (int r = 0; r < c.dp; ++r) ranks.push_back(one_policy());
        owned.push_back(std::make_unique<DpAttentionPolicy>(std::move(ranks)));
      } else {
        owned.push_back(one_policy());
      }
      replicas.push_back(owned.back().get());
    }
  }
};

// A disaggregated run's two pools: their policies, the decode pool's cost model (which must
// outlive the run), and the options of the hand-off between them.
void set_up_pools(const RunConfig& config, const RunHooks& hooks, ReplicaPolicies& policies, SimulationOptions& options,
                  std::optional<CostModel>& decode_cost_model) {
  const RunConfig prefill = pool_run_config(config, "prefill");
  const RunConfig decode = pool_run_config(config, "decode");
  policies.add(prefill, config.prefill_replicas, PoolRole::kPrefill, hooks);
  policies.add(decode, config.decode_replicas, PoolRole::kDecode, hooks);
  // The last replica is a decode one: its policy may set the decode engine's CUDA graphs.
  const HardwareProfile decode_gpu = resolve_gpu(decode.gpu);
  // The decode pool's own layout (its experts' parallelism included) and the run's routing.
  decode_cost_model.emplace(
      resolve_run_model(decode), decode_gpu, decode.layout(),
      engine_for_pool(resolve_engine(run_engine_name(decode)), *policies.replicas.back(), decode_gpu, decode.tp));
  decode_cost_model->set_moe_routing(run_moe_routing(decode, decode_cost_model->model()));
  DisaggregationOptions& d = options.disaggregation;
  d.prefill_replicas = config.prefill_replicas;
  d.decode_cost_model = &*decode_cost_model;
  d.decode_num_gpu_blocks = decode.num_gpu_blocks;
  d.decode_router =
      parse_router(config.decode_router.empty() ? config.router : config.decode_router, "--decode-router");
  d.link = resolve_kv_link(config.kv_link, config.kv_link_gbps, config.kv_link_latency_us);
  d.mode = parse_kv_transfer_mode(config.kv_transfer);
}

// --spec-decode on the run's cost model (its first pool's: `gpu`, `tp`, `engine`).
void set_up_speculation(const std::string& spec_decode, const HardwareProfile& gpu, int tp, const EngineProfile& engine,
                        CostModel& cost_model) {
  SpeculativeDecoding spec = parse_speculative_decoding(spec_decode, "--spec-decode");
  std::shared_ptr<const CostModel> draft;
  if (spec.method == DraftMethod::draft_model) {
    // The draft model runs on the target's GPUs with the target's tensor parallelism (vLLM's
    // draft_tensor_parallel_size defaults to it).
    draft = std::make_shared<const CostModel>(resolve_model(spec.draft_model), gpu, tp, engine);
  }
  cost_model.set_speculative(std::move(spec), std::move(draft));
}

// The run's requests: `given`, or built into `generated` from the config; while streaming
// (hooks.source) none are held, and `generated` stays empty. Checks that they fit in memory.
const BuiltWorkload* run_workload(const RunConfig& config, const BuiltWorkload* given, const RunHooks& hooks,
                                  BuiltWorkload& generated) {
  if (hooks.source != nullptr) {
    // Streaming: no workload in memory, and memory bounded by the slots, not the requests.
    if (const std::string why = streaming_unsupported_reason(config); !why.empty()) {
      throw UserError(fmt::format("--streaming with {}: not supported yet", why));
    }
    if (hooks.make_policy) throw UserError("--streaming with a policy written in Python: not supported yet");
    return &generated;
  }
  const BuiltWorkload* workload = given;
  if (workload == nullptr) {
    generated = build_workload(config.workload);
    workload = &generated;
  }
  // A policy from outside the registry is sized as a base that declares nothing: the
  // continuous policies' figure, the smaller estimate.
  const double per_request = hooks.make_policy ? PolicyBaseTraits{}.host_bytes_per_request
                                               : policy_base_traits(policy_base(config.policy)).host_bytes_per_request;
  const auto requests = static_cast<int64_t>(workload->requests.size());
  check_memory(memory_needed_bytes(per_request, requests), available_memory_bytes(), requests, config.policy);
  return workload;
}

// The simulation's options from the run's config, its workload and the caller's hooks.
void set_run_options(const RunConfig& config, const BuiltWorkload& workload, const RunHooks& hooks,
                     SimulationOptions& options) {
  options.gpu_memory_utilization = config.gpu_memory_utilization;
  options.max_concurrency = config.max_concurrency;
  options.client_connections = config.client_connections;
  options.think_times = &workload.think_times;
  options.sessions = &workload.sessions;
  options.num_gpu_blocks = config.num_gpu_blocks;
  // A Chrome trace draws every iteration, the prefills in each, and the first requests' phases.
  const bool chrome_trace = !config.chrome_trace.empty();
  options.record_iterations = config.iteration_log || chrome_trace || hooks.record_iterations;
  options.record_iteration_items = config.iteration_log_ids || chrome_trace;
  options.record_phases_of_first_requests = chrome_trace ? chrome_trace_requests(config) : 0;
  options.on_iteration = hooks.on_iteration;
  options.fast_forward = hooks.fast_forward;
  options.prefix_blocks = &workload.prefix_blocks;
  options.router = parse_router(config.router, "--router");
  options.router_seed = config.workload.seed;
}

}  // namespace

void check_run_pools(const RunConfig& config) {
  if (!is_disaggregated(config)) return;
  for (const PoolRole role : {PoolRole::kPrefill, PoolRole::kDecode}) {
    const RunConfig pool = pool_run_config(config, std::string(pool_role_name(role)));
    resolve_gpu(pool.gpu);
    make_pool_policy(pool, role);
  }
}

RunOutcome run_simulation(const RunConfig& config, const BuiltWorkload* workload, const RunHooks& hooks) {
  validate(config);
  // The prefill pool's settings are the run's cost model (the only pool of a colocated run).
  const RunConfig first_pool = is_disaggregated(config) ? pool_run_config(config, "prefill") : config;
  const ModelSpec model = resolve_run_model(first_pool);
  const HardwareProfile gpu = resolve_gpu(first_pool.gpu);
  const EngineProfile engine = hooks.engine != nullptr ? *hooks.engine : resolve_engine(run_engine_name(first_pool));

  ReplicaPolicies policies;
  SimulationOptions options;
  std::optional<CostModel> decode_cost_model;
  if (is_disaggregated(config)) {
    set_up_pools(config, hooks, policies, options, decode_cost_model);
  } else {
    policies.add(config, config.replicas, PoolRole::kColocated, hooks);
  }
  const std::vector<Policy*>& replicas = policies.replicas;
  // The first replica is the first pool's (the prefill pool comes first).
  CostModel routed_cost_model(model, gpu, first_pool.layout(),
                              engine_for_pool(engine, *replicas.front(), gpu, first_pool.tp));
  routed_cost_model.set_moe_routing(run_moe_routing(first_pool, model));
  if (!config.spec_decode.empty())
    set_up_speculation(config.spec_decode, gpu, first_pool.tp, engine, routed_cost_model);
  const CostModel& cost_model = routed_cost_model;
  if (const KvOffloadBytes bytes = parse_kv_offload(config.kv_offload); bytes.cpu > 0) {
    // The tiers' GiB are over the replica's GPUs (vLLM --kv-offloading-size is the total over TP).
    const double per_token = cost_model.kv_bytes_per_token_per_gpu_with_drafter() * cost_model.tensor_parallel();
    options.kv_offload_cpu_tokens = static_cast<int64_t>(bytes.cpu / per_token);
    if (bytes.disk > 0) {
      if (!(gpu.disk_bytes_per_s > 0)) {
        throw UserError(fmt::format(
            "--kv-offload '{}': GPU profile '{}' does not say how fast its node's local disk reads "
            "(disk_bytes_per_s); use a datasheet profile that does (a100-80gb, h100-sxm, h200, b200) or add "
            "disk_bytes_per_s to the profile's YAML",
            config.kv_offload, gpu.name));
      }
      options.kv_offload_disk_tokens = static_cast<int64_t>(bytes.disk / per_token);
    }
  }

  BuiltWorkload generated;
  workload = run_workload(config, workload, hooks, generated);
  set_run_options(config, *workload, hooks, options);
  RunOutcome outcome;
  outcome.config = config;
  outcome.gpu = gpu;
  if (hooks.source != nullptr) {
    options.prefix_blocks = nullptr;
    options.streaming.slots = config.streaming_slots;
    // No records to count afterwards: each request is counted as it settles.
    outcome.streamed_rejections.emplace();
    if (!config.goodput.empty()) outcome.streamed_goodput.emplace();
    options.streaming.on_settled = [&outcome, &config, settled = hooks.on_settled](const RequestRecord& r) {
      outcome.streamed_rejections->add(r);
      if (outcome.streamed_goodput) outcome.streamed_goodput->add(r, config.goodput);
      if (settled) settled(r);
    };
  }

  const auto start = std::chrono::steady_clock::now();
  std::optional<Simulation> sim;
  if (hooks.source != nullptr) {
    sim.emplace(*hooks.source, replicas, cost_model, options);
  } else {
    sim.emplace(workload->requests, replicas, cost_model, options);
  }
  outcome.result = sim->run();
  if (outcome.streamed_goodput) outcome.streamed_goodput->finish(outcome.result.summary.makespan_s);
  outcome.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

std::string streaming_unsupported_reason(const RunConfig& config) {
  const WorkloadSpec& w = config.workload;
  if (w.trace_columns != nullptr) return fmt::format("the in-memory workload {}", w.trace.string());
  if (config.max_concurrency > 0) return "--max-concurrency";
  if (w.trace_sessions) return "--trace-sessions";
  if (!w.resample.empty()) return "--resample";
  if (is_disaggregated(config)) return "--prefill-replicas/--decode-replicas";
  if (config.iteration_log) return "--iteration-log";
  if (!config.chrome_trace.empty()) return "--chrome-trace";
  return "";
}

void RejectionTally::add(const RequestRecord& r) {
  if (r.state != RequestState::kRejected) return;
  ++rejected_;
  const std::string& reason = r.reject_reason;
  auto [it, inserted] = kinds_.try_emplace(reason.substr(0, reason.find(": ")), Kind{0, r.id});
  ++it->second.count;
  it->second.first = std::min(it->second.first, r.id);
}

std::string RejectionTally::line(int64_t total) const {
  if (rejected_ == 0) return "";
  std::vector<std::pair<RequestId, const std::string*>> order;
  for (const auto& [kind, k] : kinds_) order.emplace_back(k.first, &kind);
  std::sort(order.begin(), order.end());
  std::vector<std::string> parts;
  for (const auto& [first, kind] : order) {
    parts.push_back(fmt::format("{} {} (first: request {})", kinds_.at(*kind).count, *kind, first));
  }
  return fmt::format(
      "{} of {} requests rejected, never to be served: {}; each request's reason "
      "is in requests.csv",
      rejected_, total, fmt::join(parts, ", "));
}

std::string rejection_warning(const SimulationResult& result) {
  RejectionTally tally;
  for (const RequestRecord& r : result.requests) tally.add(r);
  return tally.line(static_cast<int64_t>(result.requests.size()));
}

std::string rejection_warning(const RunOutcome& outcome) {
  if (outcome.streamed_rejections) return outcome.streamed_rejections->line(outcome.result.summary.requests_total);
  return rejection_warning(outcome.result);
}

}  // namespace batchsim
