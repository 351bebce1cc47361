// batchsim — the scheduler (batching policy) interface.
//
// A Policy decides, at each iteration boundary, which requests run and how many tokens each
// computes. It owns its waiting/running queues and its KV-cache manager; it reads (never
// writes) the requests' progress, which the replica advances when an iteration ends. Two
// levels, as in vLLM and TensorRT-LLM: *capacity* (who may hold KV: admit, preempt) and
// *packing* (token budget, chunk sizes).
//
// Call order for one replica:
//   attach(env) once; then, in simulated-time order,
//   on_arrival(id) for each arriving request,
//   schedule(now, batch) whenever the replica is free (the batch is cleared by the caller),
//   on_iteration_end(batch, finished, now) after the replica applied a batch.
// A request the policy can never serve is handed to env.reject(id, reason) exactly once and
// must then leave every queue. A reason reads "KIND: DETAIL": the kind is the rule and its limit,
// the same for every request it rejects ("prompt + output exceed max_model_len 4096"), the
// detail this request's figures ("4069 + 46 tokens"); warnings group requests by kind. A policy must never return an
// empty batch while it holds schedulable work, unless it sets batch.wake_at (e.g. a static batch timeout): the
// simulation treats "work left, nothing scheduled, nothing to wait for" as a bug, not a hang.
//
// Disaggregated pools (sim/simulation.h, "Disaggregated pools"): a policy serves one of three
// roles, PolicyEnv::role. Colocated is all of the above. A prefill replica sees each request
// with an output of one token (env.requests is a view whose output_tokens and max_tokens are 1,
// as vLLM's disaggregated proxy sends the prefill instance max_tokens=1), so it finishes at its
// first token; its KV stays held, counted in kv_cache(), after on_iteration_end lists it
// finished, until release_held_kv(id) once the transfer has landed (vLLM v1's request_finished
// returning delay_free_blocks, vllm/v1/core/sched/scheduler.py _free_request at
// local-inference-lab/vllm@28be48f). A decode replica gets on_arrival(id) for a request whose
// prompt was computed elsewhere (computed_tokens == prompt, one token generated); it admits it
// when KV for its known tokens fits, calls env.start_kv_transfer(id, tokens) for the tokens that
// must come over the link, and schedules it only after on_kv_received(id) (vLLM's
// WAITING_FOR_REMOTE_KVS). A policy that cannot serve a role says why in
// unsupported_role_reason, and the simulation refuses the run with that reason.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/cost_model.h"
#include "sim/batch.h"
#include "sim/kv_cache.h"
#include "sim/workload/request.h"
#include "sim/workload/trace_reader.h"

namespace batchsim {

class DecodeCohort;

enum class RequestState : uint8_t { kPending, kWaiting, kRunning, kFinished, kRejected };

// What a replica does in its cluster (see the header comment).
enum class PoolRole : uint8_t { kColocated, kPrefill, kDecode };
std::string_view pool_role_name(PoolRole role);

// Progress of one request through the replica, advanced only by the replica.
struct RequestProgress {
  RequestState state = RequestState::kPending;
  int32_t replica = 0;           // the replica the router sent it to (in the padding after state)
  int64_t computed_tokens = 0;   // tokens whose KV has been computed (reset by recompute)
  int32_t generated_tokens = 0;  // output tokens produced so far
  int32_t preemptions = 0;
  // Prompt tokens served from the prefix cache, summed over the request's admissions (a
  // request readmitted after a recompute preemption may hit again, as in vLLM v1).
  int64_t cached_tokens = 0;
  SimTime first_scheduled = SimTime::max();
  SimTime first_token = SimTime::max();
  SimTime last_token = SimTime::max();
  SimTime finished = SimTime::max();
  SimTime max_tbt = SimTime::zero();
};

// Everything a policy may look at. Owned by the simulation; valid for the whole run.
struct PolicyEnv {
  const Workload* requests = nullptr;
  const std::vector<RequestProgress>* progress = nullptr;
  const CostModel* cost_model = nullptr;
  // KV memory in tokens: from GPU memory, utilisation and weights, or num_gpu_blocks x
  // kDefaultBlockSize when that is set.
  int64_t kv_capacity_tokens = 0;
  // How kv_capacity_tokens was sized, in words, for a policy's messages about it (the engine's
  // rule, Policy::kv_sizing, or --num-gpu-blocks).
  std::string kv_sizing_rule;
  // SimulationOptions::num_gpu_blocks: a paged manager has exactly this many blocks (0: as
  // many as kv_capacity_tokens holds).
  int64_t num_gpu_blocks = 0;
  // SimulationOptions::kv_offload_cpu_tokens: a host tier under a paged prefix cache (0: none),
  // and kv_offload_disk_tokens: a disk tier beside it (0: none).
  int64_t kv_offload_cpu_tokens = 0;
  int64_t kv_offload_disk_tokens = 0;
  int32_t max_model_len = 0;  // the model's context limit
  std::function<void(RequestId, std::string)> reject;
  // Preempts running request `id`: it goes back to waiting and its preemption count grows.
  // With recompute (`keeps_kv` false) its computed tokens are dropped and must be prefilled
  // again; with swap its KV is kept (on the host) and nothing is recomputed. The replica's
  // progress is read-only to policies, so this is the one way to move a request backwards.
  std::function<void(RequestId, bool keeps_kv)> preempt;
  // Each request's prompt-block hashes, for prefix caching; null or empty when the workload
  // has none (then no prefix can be shared).
  const PrefixBlockHashes* prefix_blocks = nullptr;
  // Tells the replica that waiting request `id`, being admitted now with nothing computed,
  // found its first `tokens` tokens in the prefix cache: its computed tokens jump there, and
  // its prefill starts after them (0 < tokens < known tokens; anything else is a bug).
  std::function<void(RequestId, int64_t tokens)> use_cached_prefix;
  // Requests that have arrived so far in the whole run, whichever replica the router gave them
  // to: a policy can tell that none is left to come (a static batcher then runs a short batch
  // instead of waiting for one that can never fill). Counting its own arrivals would not do in
  // a cluster, where a replica sees only its share.
  const int64_t* arrived = nullptr;
  // How many requests the run has in all, once known: a streaming run (sim/simulation.h) learns
  // it when its source runs dry, and until then it reads as INT64_MAX. Null: requests->size().
  const int64_t* total_requests = nullptr;
  // With closed-loop clients (SimulationOptions::max_concurrency > 0): how many of them are
  // taken (a request sent, or about to be sent once they have thought), and how many of those
  // are thinking; once every client has a request at the server, none can arrive before one
  // settles.
  const int64_t* clients_in_flight = nullptr;
  const int64_t* clients_thinking = nullptr;
  int64_t max_concurrency = 0;
  // With multi-turn sessions (SimulationOptions::sessions): the turns at the client waiting for
  // their predecessor's answer; once every request not arrived is one of them, none can arrive
  // before one settles.
  const int64_t* turns_waiting = nullptr;
  // With a client connection pool (SimulationOptions::client_connections > 0): how many of its
  // connections are taken; while all are, no request can reach the server before one settles.
  const int64_t* client_connections_taken = nullptr;
  int64_t client_connections = 0;
  PoolRole role = PoolRole::kColocated;
  // Decode role: the policy has allocated KV for remote request `id`; `tokens` of it (its
  // prompt, less what it found in its own prefix cache) must come over the link. The
  // simulation calls on_kv_received(id) when they have.
  std::function<void(RequestId, int64_t tokens)> start_kv_transfer;
  // The replica's decode cohort (sim/decode_cohort.h), which a policy may keep its lockstep
  // decodes in (attach it to its block size with DecodeCohort::enable); null where the
  // simulation wants every request of every batch listed (fast-forward off, an on_iteration
  // hook, recorded iteration items, disaggregated pools).
  DecodeCohort* cohort = nullptr;
  // Where `cohort` is offered and the policy has several attention ranks (attention_ranks()),
  // one cohort per rank, `cohort` the first: each rank's scheduler may keep its own, and the
  // merged batch lists them with Batch::add_rank_cohort.
  std::span<DecodeCohort> rank_cohorts;

  const Request& request(RequestId id) const { return (*requests)[id]; }
  const RequestProgress& progress_of(RequestId id) const { return (*progress)[id]; }
  // No request can arrive before one settles: all have (but turns waiting on an answer), the
  // closed-loop clients are all waiting on theirs, or every connection of their pool is taken (a
  // batcher waiting for more would wait forever).
  bool all_arrived() const {
    const int64_t total = total_requests != nullptr ? *total_requests : static_cast<int64_t>(requests->size());
    return *arrived + (turns_waiting != nullptr ? *turns_waiting : 0) == total ||
           (max_concurrency > 0 &&
            *clients_in_flight - (clients_thinking != nullptr ? *clients_thinking : 0) >= max_concurrency) ||
           (client_connections > 0 && *client_connections_taken >= client_connections);
  }
  // Tokens whose KV must exist before the next token can be sampled: prompt + generated.
  int64_t known_tokens(RequestId id) const { return request(id).prompt_tokens + progress_of(id).generated_tokens; }
  // The most output tokens request `id` may generate, which a server that reserves KV ahead
  // must reserve for: the client's max_tokens (Request::output_limit), cut to what the model's
  // context leaves after the prompt, as TensorRT-LLM lowers a request's maxNewTokens
  // (cpp/include/tensorrt_llm/batch_manager/llmRequest.h, validate()). Policies reject a
  // request whose prompt + output exceed the context before reserving, so for every request
  // they reserve for this is at least its output length.
  int64_t output_limit(RequestId id) const {
    const Request& r = request(id);
    if (max_model_len <= 0) return r.output_limit();
    return std::min<int64_t>(r.output_limit(), static_cast<int64_t>(max_model_len) - r.prompt_tokens);
  }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual void attach(PolicyEnv& env) = 0;
  virtual void on_arrival(RequestId id, SimTime now) = 0;
  virtual void schedule(SimTime now, Batch& batch) = 0;
  virtual void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) = 0;
  // True when the policy holds no waiting or running request.
  virtual bool idle() const = 0;
  virtual const KvCacheManager& kv_cache() const = 0;
  // Whether request `id` holds KV in this policy's cache (a policy of several caches asks the
  // one that holds it).
  virtual bool holds_kv(RequestId id) const { return kv_cache().holds(id); }

  // Decode fast-forward (DESIGN.md, "Performance principles"). After schedule() returned a
  // batch of decodes only, the simulation may ask, once per further iteration: "with no
  // arrival and no request finishing in between, would your next schedule() return exactly
  // this batch again — the same requests, one token each, nothing else, no preemption?" A
  // policy that can prove it takes its own state through that schedule() (KV growth by one
  // token per request, counters) and returns true; otherwise it changes nothing and returns
  // false, and the simulation calls schedule() as usual. The simulation then applies the
  // repeated iterations in one step. The default never repeats. Results must be identical
  // either way: tests run every policy with fast-forward on and off and compare the outputs.
  virtual bool repeat_decode_step(const Batch& /*batch*/) { return false; }

  // The KV cache of a replica on `cost_model` as this policy's engine sizes it: the capacity in
  // tokens, and the rule in words for the messages when the weights leave no room. Engines
  // profile their own largest step before they size it (vLLM: --gpu-memory-utilization's share
  // of the GPU, `gpu_memory_utilization`, less what a profile run of its token budget took),
  // or apply a rule of their own (SGLang's mem_fraction_static, TensorRT-LLM's
  // free_gpu_memory_fraction). nullopt (the default): --gpu-memory-utilization's share after a
  // default profile run (CostModel::kv_capacity_tokens). --num-gpu-blocks overrides any.
  struct KvSizing {
    int64_t tokens = 0;
    std::string rule;
  };
  virtual std::optional<KvSizing> kv_sizing(const CostModel& /*cost_model*/, double /*gpu_memory_utilization*/) const {
    return std::nullopt;
  }
  // vLLM's rule, which the default and most engines follow: `gpu_memory_utilization`'s share of
  // the GPU less the weights and the peak of a profile run of `tokens` tokens in `sequences`
  // sampled sequences (CostModel::kv_capacity_tokens), with the rule in those words; `window`
  // is how the pool holds sliding-window layers (CostModel::WindowKv).
  static KvSizing after_profile_run(const CostModel& cost_model, double gpu_memory_utilization, int64_t tokens,
                                    int64_t sequences, CostModel::WindowKv window = CostModel::WindowKv::as_full);

  // Attention ranks that each hold a KV cache of the sizing above (DP attention: one per
  // rank); the replica's KV memory is theirs together.
  virtual int attention_ranks() const { return 1; }

  // The largest decode batch the engine runs as a CUDA graph when the server sets it by a rule
  // of its own (SGLang's cuda_graph_max_bs, by GPU memory and TP), replacing the engine
  // profile's cuda_graphs.max_tokens (where the engine runs graphs at all). nullopt (the
  // default): the engine profile's.
  virtual std::optional<int64_t> cuda_graph_max_batch(const HardwareProfile& /*gpu*/, int /*tp*/) const {
    return std::nullopt;
  }

  // Disaggregated pools (see the header comment): why this policy cannot serve `role`, or ""
  // when it can. Every policy serves kColocated.
  virtual std::string unsupported_role_reason(PoolRole role) const;
  // Prefill role: the transfer of finished request `id` has landed; free its KV.
  virtual void release_held_kv(RequestId /*id*/) {}
  // Decode role: the KV of remote request `id` has arrived; it may be scheduled from now on.
  virtual void on_kv_received(RequestId /*id*/, SimTime /*now*/) {}
};

// Policy options as KEY=VALUE strings (from --policy-opt or an experiment file). Typed getters
// parse and range-check, throwing UserError that names the option; `check_all_used` rejects
// options the policy does not know, so a typo never passes silently.
class PolicyOptions {
 public:
  PolicyOptions() = default;
  explicit PolicyOptions(std::map<std::string, std::string> values) : values_(std::move(values)) {}
  void set(const std::string& key, const std::string& value) { values_[key] = value; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  const std::map<std::string, std::string>& values() const { return values_; }

  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  double get_double(const std::string& key, double fallback, double min, double max) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_choice(const std::string& key, const std::string& fallback,
                         std::initializer_list<std::string_view> choices) const;
  void check_all_used(std::string_view policy_name) const;

 private:
  std::map<std::string, std::string> values_;
  mutable std::map<std::string, bool> used_;
  const std::string* lookup(const std::string& key) const;
};

}  // namespace batchsim
