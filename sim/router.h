// batchsim — how a cluster's router picks the replica of an arriving request (and, with
// disaggregated pools, the decode replica of a prefilled one).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "hwmodel/base/random.h"
#include "sim/replica.h"
#include "sim/workload/request.h"

namespace batchsim {

// How a cluster's router picks the replica of an arriving request. Vidur's global schedulers
// (round robin, random, least outstanding requests: Agrawal et al., MLSys 2024, and its
// vidur/scheduler/global_scheduler/), a KV-load variant, and prefix affinity as SGLang's
// cache-aware router (sgl-router, "cache_aware" policy) and the vLLM production-stack router
// ("prefixaware" routing logic) do it, so that requests that share a prompt prefix meet the
// KV blocks they could reuse.
enum class Router : uint8_t {
  kRoundRobin,        // i-th arrival to replica i mod N
  kRandom,            // uniform, from SimulationOptions::router_seed (a stream of its own)
  kLeastOutstanding,  // fewest routed-but-unsettled requests; ties: lowest index
  kLeastKv,           // least KV allocated; ties: fewest outstanding, then lowest index
  kPrefix,            // first prefix-block hash mod N; requests without hashes round-robin
  kPrecisePrefix,     // llm-d's precise prefix-cache scorer with load scorers (RequestRouter)
  kCacheAware,        // SGLang's router (sgl-router cache_aware): what it routed where, and load balance
};

struct RouterInfo {
  Router router;
  std::string_view name;
  std::string_view description;
};
const std::vector<RouterInfo>& routers();
std::string_view router_name(Router router);
// Throws UserError naming `option` (e.g. "--router") and the known routers.
Router parse_router(std::string_view name, std::string_view option = "--router");

// One router's state: its kind, its random stream and its round-robin counter. Each pool of a
// disaggregated run has its own, so that neither shifts the other's draws or turns.
class RequestRouter {
 public:
  RequestRouter() = default;
  RequestRouter(Router kind, Rng rng) : kind_(kind), rng_(rng) {}
  // The index in `pool` of the replica that takes request `id`; `prefix_blocks` (null or empty:
  // none) are the prompt-block hashes the prefix router reads.
  int32_t pick(RequestId id, std::span<const Replica> pool, const PrefixBlockHashes* prefix_blocks);

 private:
  // Router::kPrecisePrefix's pick.
  int32_t precise_prefix_pick(RequestId id, std::span<const Replica> pool);
  // Router::kCacheAware's pick.
  int32_t cache_aware_pick(RequestId id, std::span<const Replica> pool, const PrefixBlockHashes* prefix_blocks);

  Router kind_ = Router::kRoundRobin;
  Rng rng_{0};
  int64_t round_robin_ = 0;
  // Router::kCacheAware: per replica of the pool, the prompt blocks (block keys) of the requests
  // routed to it, its approximate tree of what that replica has seen.
  std::vector<std::unordered_set<uint64_t>> routed_blocks_;
  std::vector<uint64_t> prompt_keys_;  // the request being routed's block keys (kept: no allocation per arrival)
};

}  // namespace batchsim
