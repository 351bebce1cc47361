#include "experiments/run/latency_diagnosis.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "policies/registry.h"

namespace batchsim {

namespace {

double share(const DiagnosisInputs& in, LatencyPart part) { return in.share_of_p99[static_cast<size_t>(part)]; }

std::string percent(double fraction) { return fmt::format("{:.0f}%", 100 * fraction); }

// What the tail did in a part, and what would have given that time back (the header's rule 1).
std::string lost_time_clause(const DiagnosisInputs& in, LatencyPart part) {
  const std::string spent = percent(share(in, part));
  switch (part) {
    case LatencyPart::kQueueing:
      if (in.policy.static_batching) {
        return fmt::format(
            "{} queued (a static batch waits to fill and holds its slots until its longest "
            "request ends): continuous batching (vllm, sarathi) would help",
            spent);
      }
      if (in.sent_at_once) {
        return fmt::format(
            "{} queued behind the burst (every request was sent at t = 0, so most wait for "
            "earlier ones to finish, whatever the KV size): only more throughput shortens it "
            "(more replicas, more --tp, a faster GPU)",
            spent);
      }
      if (in.client_connections > 0) {
        return fmt::format(
            "{} queued, at the client for one of its {} connections or at the server "
            "(--client-connections: the server never saw more than {} requests): a larger "
            "connection pool would show what the server does with all of them",
            spent, in.client_connections, in.client_connections);
      }
      if (in.kv_allocated_fraction_peak >= kKvFull) {
        return fmt::format(
            "{} queued (KV memory full: peak {} allocated): a larger KV cache (more GPU memory, "
            "--tp, --kv-cache-dtype fp8) or more replicas would help",
            spent, percent(in.kv_allocated_fraction_peak));
      }
      return fmt::format(
          "{} queued (KV memory not full: peak {} allocated, so the batch limits held them): "
          "more replicas, or a larger max_num_seqs / max_num_batched_tokens, would help",
          spent, percent(in.kv_allocated_fraction_peak));
    case LatencyPart::kStall:
      if (in.policy.prefill_batches_pause_decodes) {
        return fmt::format(
            "{} stalled while prefill batches paused their decodes: mixed chunks "
            "(enable_mixed_chunk=true) or a smaller {} would help",
            spent, in.policy.chunk_budget_option);
      }
      if (in.policy.chunked_prefill) {
        return fmt::format(
            "{} stalled behind other requests' prefill chunks: a smaller chunk budget ({}), "
            "at some cost in queueing, or more replicas would help",
            spent, in.policy.chunk_budget_option);
      }
      return fmt::format("{} stalled behind other requests' prefills: chunked prefill (sarathi / vllm) would help",
                         spent);
    case LatencyPart::kPreemption:
      return fmt::format(
          "{} preempted (waiting to run again, recomputing): more KV memory, KV reserved at "
          "admission (trtllm capacity_scheduler=guaranteed_no_evict) or a priority/SJF order "
          "(scheduling_policy) would help",
          spent);
    case LatencyPart::kOverhead:
      return fmt::format(
          "{} in CPU and launch overhead: an engine with CUDA graphs or an overlapped scheduler "
          "(--engine; batchsim list engines), or larger batches to share it, would help",
          spent);
    case LatencyPart::kKvTransfer:
      return fmt::format("{} waiting for KV transfers: a faster link or more decode-pool KV memory would help", spent);
    case LatencyPart::kPrefill:
    case LatencyPart::kDecode:
      break;  // a request's own work: rule 2
  }
  return "";
}

}  // namespace

PolicyTraits policy_traits(const std::string& policy, const std::map<std::string, std::string>& options) {
  PolicyTraits traits;
  for (const PolicyInfo& info : registered_policies()) {
    if (info.name != policy) continue;
    // The user's options over the preset's, as make_policy reads them.
    std::map<std::string, std::string> set(info.preset.begin(), info.preset.end());
    for (const auto& [key, value] : options) set[key] = value;
    const PolicyOptions merged(set);
    const PolicyBaseTraits& base = policy_base_traits(info.base);
    traits.static_batching = base.static_batching;
    // TensorRT-LLM's chunked context chunks prompts on the continuous base; get_bool reads it as
    // the policy does, in each spelling it accepts ("1", "yes").
    traits.chunked_prefill = policy_chunks_prefills(info.name, set) || merged.get_bool("enable_chunked_context", false);
    if (base.prefill_batches_pause_decodes)
      traits.prefill_batches_pause_decodes = base.prefill_batches_pause_decodes(merged);
    traits.chunk_budget_option = base.chunk_budget_option;
  }
  return traits;
}

bool sends_all_at_once(const std::string& arrival, int64_t max_concurrency) {
  return arrival == "offline" && max_concurrency == 0;
}

int64_t limiting_client_connections(int64_t max_concurrency, int64_t client_connections) {
  return client_connections > 0 && client_connections < max_concurrency ? client_connections : 0;
}

DiagnosisInputs diagnosis_inputs(const Summary& s, const PolicyTraits& policy, bool sent_at_once) {
  DiagnosisInputs in;
  in.sent_at_once = sent_at_once;
  for (size_t k = 0; k < kNumLatencyParts; ++k) in.share_of_p99[k] = s.latency_breakdown.parts[k].share_of_p99;
  in.completed = s.requests_completed;
  in.kv_allocated_fraction_peak = s.kv_allocated_fraction_peak;
  in.policy = policy;
  return in;
}

std::string latency_diagnosis(const DiagnosisInputs& in) {
  if (in.completed == 0) return "no request completed: nothing to diagnose";
  std::vector<LatencyPart> lost;
  for (LatencyPart part : {LatencyPart::kQueueing, LatencyPart::kStall, LatencyPart::kPreemption,
                           LatencyPart::kOverhead, LatencyPart::kKvTransfer}) {
    if (share(in, part) >= kNotableShare) lost.push_back(part);
  }
  // Largest first; equal shares keep the order above.
  std::stable_sort(lost.begin(), lost.end(), [&](LatencyPart a, LatencyPart b) { return share(in, a) > share(in, b); });
  if (lost.size() > static_cast<size_t>(kMostNamedParts)) lost.resize(kMostNamedParts);
  if (lost.empty()) {
    const double prefill = share(in, LatencyPart::kPrefill), decode = share(in, LatencyPart::kDecode);
    return fmt::format(
        "p99 requests spent {} on their own work (prefill {}, decode {}), no lost-time part "
        "reaching {}: they are long, and faster iterations (a faster GPU, more --tp) would help "
        "more than a scheduling change",
        percent(prefill + decode), percent(prefill), percent(decode), percent(kNotableShare));
  }
  std::string line = "p99 requests spent ";
  for (size_t i = 0; i < lost.size(); ++i) line += (i > 0 ? "; " : "") + lost_time_clause(in, lost[i]);
  return line;
}

}  // namespace batchsim
