#include "experiments/runner.h"

#include <chrono>
#include <map>
#include <fmt/format.h>

#include "hwmodel/cost_model.h"
#include "policies/registry.h"

namespace batchsim {

RunOutcome run_simulation(const RunConfig& config, const BuiltWorkload* workload,
                          const RunHooks& hooks) {
  validate(config);
  const ModelSpec model = resolve_run_model(config);
  const HardwareProfile gpu = resolve_gpu(config.gpu);
  const CostModel cost_model(model, gpu, config.tp);

  BuiltWorkload generated;
  if (workload == nullptr) {
    generated = build_workload(config.workload);
    workload = &generated;
  }
  // One policy instance per replica: each has its own queues and KV cache.
  std::vector<std::unique_ptr<Policy>> policies;
  std::vector<Policy*> replicas;
  for (int i = 0; i < config.replicas; ++i) {
    policies.push_back(make_policy(config.policy, PolicyOptions(config.policy_opts)));
    replicas.push_back(policies.back().get());
  }

  SimulationOptions options;
  options.gpu_memory_utilization = config.gpu_memory_utilization;
  options.record_iterations = config.iteration_log || hooks.record_iterations;
  options.on_iteration = hooks.on_iteration;
  options.fast_forward = hooks.fast_forward;
  options.prefix_blocks = &workload->prefix_blocks;
  options.router = parse_router(config.router, "--router");
  options.router_seed = config.workload.seed;

  RunOutcome outcome;
  outcome.config = config;
  const auto start = std::chrono::steady_clock::now();
  Simulation sim(workload->requests, replicas, cost_model, options);
  outcome.result = sim.run();
  outcome.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

std::vector<std::string> rejection_warnings(const SimulationResult& result) {
  std::map<std::string, std::pair<int64_t, RequestId>> by_reason;  // reason -> (count, first id)
  for (const RequestRecord& r : result.requests) {
    if (r.state != RequestState::kRejected) continue;
    auto [it, inserted] = by_reason.try_emplace(r.reject_reason, 0, r.id);
    ++it->second.first;
  }
  std::vector<std::string> lines;
  for (const auto& [reason, count_id] : by_reason) {
    lines.push_back(fmt::format("{} request(s) rejected (first: request {}): {}",
                                count_id.first, count_id.second, reason));
  }
  return lines;
}

}  // namespace batchsim
