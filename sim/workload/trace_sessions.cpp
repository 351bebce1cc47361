#include "sim/workload/trace_sessions.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

// Rows by their full prompt blocks: the number of them and the last one's hash (which, the
// hashes being chained, names them all; a candidate's blocks are compared in full all the same).
struct BlocksKey {
  int64_t count;
  uint64_t last;
  bool operator==(const BlocksKey&) const = default;
};

struct BlocksKeyHash {
  size_t operator()(const BlocksKey& k) const {
    return std::hash<uint64_t>()(k.last ^ (static_cast<uint64_t>(k.count) * 0x9E3779B97F4A7C15ULL));
  }
};

}  // namespace

TraceSessionStats link_trace_sessions(const Workload& requests, const PrefixBlockHashes& blocks,
                                      std::span<const int64_t> lines, std::string_view file, SessionLinks& links) {
  const size_t n = requests.size();
  if (blocks.size() != static_cast<int64_t>(n) || lines.size() != n || blocks.block_tokens <= 0) {
    throw std::logic_error("link_trace_sessions: hashes and lines must describe every request");
  }
  links.predecessor.assign(n, -1);
  links.delay.assign(n, SimTime::zero());
  // File order: ids sorted by line (the reader sorted the rows by time, stably).
  std::vector<RequestId> by_line(n);
  std::iota(by_line.begin(), by_line.end(), 0);
  std::sort(by_line.begin(), by_line.end(),
            [&](RequestId a, RequestId b) { return lines[static_cast<size_t>(a)] < lines[static_cast<size_t>(b)]; });

  const auto full_blocks = [&](RequestId id) {
    return std::min<int64_t>(requests[static_cast<size_t>(id)].prompt_tokens / blocks.block_tokens,
                             static_cast<int64_t>(blocks.of(id).size()));
  };
  std::unordered_map<BlocksKey, std::vector<RequestId>, BlocksKeyHash> rows_by_blocks;
  std::vector<uint8_t> continued(n, 0);
  TraceSessionStats stats;
  for (const RequestId id : by_line) {
    const std::span<const uint64_t> own = blocks.of(id);
    const int32_t prompt = requests[static_cast<size_t>(id)].prompt_tokens;
    RequestId before = -1;
    for (auto k = static_cast<int64_t>(own.size()); k >= kMinSessionBlocks && before < 0; --k) {
      const auto found = rows_by_blocks.find(BlocksKey{k, own[static_cast<size_t>(k - 1)]});
      if (found == rows_by_blocks.end()) continue;
      for (auto it = found->second.rbegin(); it != found->second.rend(); ++it) {  // the latest first
        const std::span<const uint64_t> theirs = blocks.of(*it);
        if (requests[static_cast<size_t>(*it)].prompt_tokens < prompt &&
            std::equal(theirs.begin(), theirs.begin() + k, own.begin())) {
          before = *it;
          break;
        }
      }
    }
    if (before >= 0) {
      const Request& earlier = requests[static_cast<size_t>(before)];
      const Request& later = requests[static_cast<size_t>(id)];
      if (later.arrival < earlier.arrival) {
        throw UserError(
            fmt::format("{}:{}: --trace-sessions: this row continues the conversation of line {} (its hash_ids begin "
                        "with that row's {} full blocks) but is stamped {:.3f} s earlier: a session's turns go "
                        "forward in time",
                        file, lines[static_cast<size_t>(id)], lines[static_cast<size_t>(before)], full_blocks(before),
                        (earlier.arrival - later.arrival).seconds()));
      }
      if (continued[static_cast<size_t>(before)] != 0) {
        ++stats.branches;
      } else {
        continued[static_cast<size_t>(before)] = 1;
        links.predecessor[static_cast<size_t>(id)] = before;
        ++stats.linked;
      }
    }
    if (const int64_t full = full_blocks(id); full >= kMinSessionBlocks) {
      rows_by_blocks[BlocksKey{full, own[static_cast<size_t>(full - 1)]}].push_back(id);
    }
  }
  // A predecessor comes before its turn in time and, at equal times, in the file (the reader's
  // sort is stable): its id is the smaller, as SimulationOptions::sessions needs.
  std::vector<int64_t> turns(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const RequestId before = links.predecessor[i];
    if (before < 0) continue;
    if (static_cast<size_t>(before) >= i) throw std::logic_error("link_trace_sessions: a turn before its predecessor");
    turns[i] = turns[static_cast<size_t>(before)] + 1;
  }
  stats.sessions = static_cast<int64_t>(n) - stats.linked;
  for (size_t i = 0; i < n; ++i) {
    stats.longest = std::max(stats.longest, turns[i]);
    if (turns[i] == 2) ++stats.multi_turn;  // each session of 2+ turns has one second turn
  }
  return stats;
}

}  // namespace batchsim
