// batchsim — multi-turn sessions read from a trace whose rows carry prompt-block hashes.
//
// The Mooncake conversation trace (kvcache-ai/Mooncake FAST'25, conversation_trace.jsonl) names no
// sessions, but its hash_ids say them: one id per 512-token prompt block, equal ids for equal
// prefixes, and a later turn's prompt holds the conversation so far. So a row continues the
// earlier row whose *full* prompt blocks begin its own hash_ids. Not its whole hash_ids list: an
// earlier prompt's last, partial block is a full block of different content in the next turn
// (its answer and the new input follow), so its id differs. On the shipped trace 3,827 of the
// 3,835 links below share exactly the predecessor's full blocks and only 8 its whole list.
//
// The rule, row by row in file order (a conversation is written in the order it happened):
//   * a candidate predecessor is an earlier row with at least kMinSessionBlocks full blocks, all
//     of which begin this row's hash_ids, and a shorter prompt (the conversation grew; a row of
//     the same prompt is a resend, not a next turn);
//   * the candidate with the most such blocks is the predecessor, the latest row among equals;
//   * a row continues at most one turn and is continued by at most one (a session is a chain):
//     a row whose predecessor is already continued by an earlier row starts a session of its
//     own (a branch: two questions asked of one answer);
//   * a row that continues a row stamped later than itself is refused, naming the file and both
//     lines: a session's turns go forward in time.
// Only the hashes link rows; the reused history is what they say (the prefix cache keys on the
// same hashes), not re-derived.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "sim/workload/request.h"

namespace batchsim {

// Block 0 of the Mooncake conversation trace is a system prompt that 12,030 of its 12,031 rows
// share: one shared block says nothing about a conversation. Two do (the system prompt and a
// block of the conversation itself).
inline constexpr int64_t kMinSessionBlocks = 2;

struct TraceSessionStats {
  int64_t linked = 0;      // rows that continue an earlier row
  int64_t sessions = 0;    // sessions, single rows included (rows - linked)
  int64_t multi_turn = 0;  // sessions of two turns or more
  int64_t longest = 0;     // turns of the longest session
  int64_t branches = 0;    // rows that continue an already continued row, made first turns
};

// Links the rows of a trace into sessions by the rule above: links.predecessor[i] is the turn
// request i continues (-1: a first turn), links.delay all 0 (a turn is sent at its recorded time,
// or when its predecessor's answer ends if that is later; sim/simulation.h). `requests` and
// `blocks` in arrival order (ids), `lines[id]` the file line of request id, `file` names the file
// in errors. Throws UserError for a turn that goes back in time.
TraceSessionStats link_trace_sessions(const Workload& requests, const PrefixBlockHashes& blocks,
                                      std::span<const int64_t> lines, std::string_view file, SessionLinks& links);

}  // namespace batchsim
