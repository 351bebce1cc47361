#include "sim/router.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "sim/kv_cache.h"

namespace batchsim {

namespace {
const std::vector<RouterInfo> kRouters = {
    {Router::kRoundRobin, "round-robin", "i-th arrival to replica i mod N (Vidur's round_robin)"},
    {Router::kRandom, "random", "uniform over replicas, from the run's seed (Vidur's random)"},
    {Router::kLeastOutstanding, "least-outstanding",
     "fewest routed, unfinished requests; ties to the lowest index (Vidur's lor)"},
    {Router::kLeastKv, "least-kv", "least KV memory allocated; ties to fewest outstanding, then the lowest index"},
    {Router::kPrefix, "prefix",
     "prefix affinity: first prompt-block hash mod N (a stateless stand-in for cache-aware routing, as "
     "vLLM production-stack prefixaware); round-robin without hashes"},
    {Router::kPrecisePrefix, "precise-prefix",
     "llm-d's precise prefix-cache scorer: the longest run of the prompt's blocks a replica holds "
     "(GPU 1.0, host tier 0.8) x 2 + (1 - KV usage) + queue score; the best, ties at random"},
    {Router::kCacheAware, "cache-aware",
     "SGLang's router (sgl-router cache_aware, its defaults): the replica whose routed prompts share the "
     "longest prefix when that is over 30% of the prompt, else the least loaded; the least loaded while "
     "loads differ by over 64 and 1.5x"},
};
// The replica of `pool` with the fewest by `key`, ties to the lowest index.
template <typename Key>
int32_t least_by(std::span<const Replica> pool, Key key) {
  size_t best = 0;
  for (size_t i = 1; i < pool.size(); ++i) {
    if (key(pool[i]) < key(pool[best])) best = i;
  }
  return static_cast<int32_t>(best);
}

int64_t outstanding(const Replica& r) { return r.outstanding; }

}  // namespace

const std::vector<RouterInfo>& routers() { return kRouters; }

std::string_view router_name(Router router) {
  for (const RouterInfo& info : kRouters) {
    if (info.router == router) return info.name;
  }
  return "?";
}

Router parse_router(std::string_view name, std::string_view option) {
  std::string known;
  for (const RouterInfo& info : kRouters) {
    if (info.name == name) return info.router;
    known += (known.empty() ? "" : ", ") + std::string(info.name);
  }
  throw UserError(fmt::format("{} '{}': unknown router (expected one of {})", option, name, known));
}

int32_t RequestRouter::pick(RequestId id, std::span<const Replica> pool, const PrefixBlockHashes* prefix_blocks) {
  const auto n = static_cast<int64_t>(pool.size());
  if (n == 1) return 0;
  const auto least = [pool](auto key) { return least_by(pool, key); };
  switch (kind_) {
    case Router::kRoundRobin:
      break;
    case Router::kRandom:
      return static_cast<int32_t>(sample_below(rng_, static_cast<uint64_t>(n)));
    case Router::kLeastOutstanding:
      return least(outstanding);
    case Router::kLeastKv:
      // Allocated KV (all replicas have the same capacity), then outstanding requests: a
      // burst arrives before any replica allocates, and must still spread.
      return least([](const Replica& r) { return std::pair(r.policy->kv_cache().allocated_tokens(), r.outstanding); });
    case Router::kPrefix:
      // Requests that share their first prompt block share a replica, whose prefix cache then
      // holds that block for all of them (a stateless stand-in for SGLang's radix-tree match).
      if (prefix_blocks != nullptr && !prefix_blocks->empty()) {
        const auto hashes = prefix_blocks->of(id);
        if (!hashes.empty()) return static_cast<int32_t>(hashes.front() % static_cast<uint64_t>(n));
      }
      break;
    case Router::kPrecisePrefix:
      return precise_prefix_pick(id, pool);
    case Router::kCacheAware:
      return cache_aware_pick(id, pool, prefix_blocks);
  }
  return static_cast<int32_t>(round_robin_++ % n);
}

int32_t RequestRouter::precise_prefix_pick(RequestId id, std::span<const Replica> pool) {
  // llm-d's sample profile (deploy/config/epp-precise-prefix-cache-config.yaml, llm-d-inference-
  // scheduler@520af47, and llm-d-kv-cache's pkg/kvcache): precise-prefix-cache-
  // scorer x 2 + kv-cache-utilization-scorer + queue-scorer, then max-score-picker.
  //  - prefix: the longest consecutive run of the prompt's blocks the replica holds, a GPU
  //    block 1.0 and a host-tier one 0.8, over the prompt's blocks, capped at 1
  //    (scorer/preciseprefixcache/utils.go). Read from the caches themselves: llm-d's index
  //    follows them through vLLM's KV events a few ms late, here it is exact.
  //  - KV: 1 - KV usage (gateway-api-inference-extension scorer/kvcache_utilization.go).
  //  - queue: (most waiting - its waiting) / (most - fewest) over the replicas, 1 when all are
  //    equal (scorer/queue.go); waiting = routed, unsettled and not in its running batch.
  //  - ties: max-score-picker shuffles before a stable sort by score (picker/max_score_picker.go),
  //    so the best-scored replicas are equally likely.
  int64_t fewest = std::numeric_limits<int64_t>::max(), most = std::numeric_limits<int64_t>::min();
  for (const Replica& r : pool) {
    fewest = std::min(fewest, r.waiting());
    most = std::max(most, r.waiting());
  }
  double best = -1;
  int32_t ties = 0, pick = 0;
  for (size_t i = 0; i < pool.size(); ++i) {
    const Replica& r = pool[i];
    const KvCacheManager& kv = r.policy->kv_cache();
    const KvCacheManager::PrefixHeld held = kv.prefix_held(id);
    const double prefix =
        held.prompt_blocks > 0
            ? std::min(1.0, (static_cast<double>(held.gpu_blocks) + 0.8 * static_cast<double>(held.host_blocks)) /
                                static_cast<double>(held.prompt_blocks))
            : 0.0;
    const double usage =
        static_cast<double>(kv.allocated_tokens()) / static_cast<double>(std::max<int64_t>(1, kv.capacity_tokens()));
    const double queue =
        most == fewest ? 1.0 : static_cast<double>(most - r.waiting()) / static_cast<double>(most - fewest);
    const double score = 2 * prefix + (1 - usage) + queue;
    const auto index = static_cast<int32_t>(i);
    if (score > best) {
      best = score;
      pick = index;
      ties = 1;
    } else if (score == best && sample_below(rng_, static_cast<uint64_t>(++ties)) == 0) {
      pick = index;  // each of the tied replicas is kept with probability 1 / ties
    }
  }
  return pick;
}

int32_t RequestRouter::cache_aware_pick(RequestId id, std::span<const Replica> pool,
                                        const PrefixBlockHashes* prefix_blocks) {
  // SGLang's router, policy cache_aware (sgl-router src/policies/cache_aware.rs, and its defaults
  // in the router's CLI: cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold
  // 1.5; the log line of sglang-router 0.5.8 prints the same). Its load is a worker's requests
  // routed and not yet done (here Replica::outstanding). Its tree is an approximate radix tree
  // per worker of the text it routed there, matched by characters; here it is each replica's set
  // of the prompt blocks routed to it, matched block by block from the first (the blocks are
  // keyed by their position, as the prefix cache keys them, so a run from block 0 is a prefix).
  //  - imbalanced (max - min load > 64 and max > 1.5 x min): the least loaded;
  //  - else the replica that holds the longest run of the prompt's blocks, when that run is over
  //    30% of them (ties: the lowest index; the tree takes a matched node's first tenant), else
  //    the least loaded (ties: the lowest index, as Rust's min_by_key);
  //  - either way the prompt joins the chosen replica's tree.
  // Not modelled: the tree's eviction (every 120 s, beyond 64 M characters a worker, about 16 M
  // tokens), and matching inside a block. Without prompt hashes nothing matches: least loaded.
  constexpr double kCacheThreshold = 0.3, kBalanceRelThreshold = 1.5;
  constexpr int64_t kBalanceAbsThreshold = 64;
  if (routed_blocks_.size() != pool.size()) routed_blocks_.assign(pool.size(), {});
  const int32_t least_loaded = least_by(pool, outstanding);
  const int64_t fewest = pool[static_cast<size_t>(least_loaded)].outstanding;
  int64_t most = 0;
  for (const Replica& r : pool) most = std::max(most, r.outstanding);
  // The prompt's block keys, once: every replica's tree is matched against them, and the chosen
  // one takes them.
  const std::span<const uint64_t> hashes =
      prefix_blocks != nullptr && !prefix_blocks->empty() ? prefix_blocks->of(id) : std::span<const uint64_t>{};
  prompt_keys_.resize(hashes.size());
  for (size_t k = 0; k < hashes.size(); ++k) prompt_keys_[k] = prefix_block_key(hashes[k], static_cast<int64_t>(k));
  int32_t pick = least_loaded;
  const bool imbalanced = most - fewest > kBalanceAbsThreshold &&
                          static_cast<double>(most) > kBalanceRelThreshold * static_cast<double>(fewest);
  if (!imbalanced && !prompt_keys_.empty()) {
    size_t longest = 0;
    int32_t holder = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
      const std::unordered_set<uint64_t>& held = routed_blocks_[i];
      size_t run = 0;
      while (run < prompt_keys_.size() && held.contains(prompt_keys_[run])) ++run;
      if (run > longest) {
        longest = run;
        holder = static_cast<int32_t>(i);
      }
    }
    if (static_cast<double>(longest) > kCacheThreshold * static_cast<double>(prompt_keys_.size())) pick = holder;
  }
  routed_blocks_[static_cast<size_t>(pick)].insert(prompt_keys_.begin(), prompt_keys_.end());
  return pick;
}

}  // namespace batchsim
