// Sessions read from a trace (sim/workload/trace_sessions.h, WorkloadSpec::trace_sessions): each
// row is linked to the earlier row whose full prompt blocks begin its hash_ids, and what cannot be
// linked or combined is refused by name.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/workload/trace_sessions.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

std::string row(int64_t ms, int64_t input, int64_t output, const std::string& hashes) {
  return "{\"timestamp\": " + std::to_string(ms) + ", \"input_length\": " + std::to_string(input) +
         ", \"output_length\": " + std::to_string(output) + ", \"hash_ids\": [" + hashes + "]}\n";
}

WorkloadSpec trace_spec(const std::string& name, const std::string& contents) {
  WorkloadSpec spec;
  spec.trace = testing::write_text_file(testing::scratch_dir("traces"), name, contents);
  spec.trace_sessions = true;
  return spec;
}

TEST(TraceSessions, ARowContinuesTheRowWhoseFullBlocksBeginItsHashes) {
  // Line 1: a first turn of 1,100 tokens, 2 full blocks of 512 (0, 1) and a partial one (2).
  // Line 2: another conversation sharing only the system block 0.
  // Line 3: line 1's conversation grown to 1,600 tokens: its block 2 holds the old partial block,
  //         the answer and the new input, so it is a new id.
  // Line 4: line 3 grown again: it continues line 3 (3 full blocks), not line 1 (2).
  // Line 5: line 4 resent (the same prompt): not line 4's next turn; line 3's, which line 4
  //         continues already: a branch, made a first turn.
  // Line 6: only the system block in common with anything: a first turn.
  // Line 7: a second question on line 3's answer: a branch too.
  const WorkloadSpec spec = trace_spec(
      "conversation.jsonl", row(0, 1100, 50, "0, 1, 2") + row(0, 600, 10, "0, 3") + row(1, 1600, 20, "0, 1, 4, 5") +
                                row(900, 2100, 20, "0, 1, 4, 6, 7") + row(950, 2100, 20, "0, 1, 4, 6, 7") +
                                row(991, 3000, 20, "0, 9, 10, 11, 12, 13") + row(995, 1700, 20, "0, 1, 4, 8"));
  const BuiltWorkload w = build_workload(spec);
  ASSERT_EQ(w.requests.size(), 7u);
  const std::vector<RequestId> expected = {-1, -1, 0, 2, -1, -1, -1};
  EXPECT_EQ(w.sessions.predecessor, expected);
  EXPECT_EQ(w.sessions.delay, std::vector<SimTime>(7, SimTime::zero()));
  // The reused history is the trace's: its hash_ids, for prompts only, in blocks of 512.
  EXPECT_EQ(w.prefix_blocks.block_tokens, 512);
  EXPECT_FALSE(w.prefix_blocks.covers_outputs);
  EXPECT_EQ(w.prefix_blocks.of(2).size(), 4u);
  EXPECT_EQ(w.requests[2].arrival, SimTime::from_ns(1'000'000));  // the recorded time
  EXPECT_NE(w.description.find("2 rows continue an earlier row: 5 sessions, 1 of 2 turns or more (at most 3)"),
            std::string::npos)
      << w.description;
  EXPECT_NE(w.description.find("2 branches made first turns"), std::string::npos) << w.description;
}

TEST(TraceSessions, RowsOutOfFileOrderAreLinkedInFileOrderAndATurnBeforeItsPredecessorIsRefused) {
  // Line 2 continues line 1 and comes later: linked, whatever other rows the sort puts between.
  const BuiltWorkload w = build_workload(
      trace_spec("sorted.jsonl", row(5, 1100, 5, "0, 1, 2") + row(9, 1600, 5, "0, 1, 3, 4") + row(0, 700, 5, "0, 5")));
  EXPECT_EQ(w.sessions.predecessor, (std::vector<RequestId>{-1, -1, 1}));
  // Line 2 continues line 1 but is stamped 4 ms before it.
  const WorkloadSpec back = trace_spec("back.jsonl", row(5, 1100, 5, "0, 1, 2") + row(1, 1600, 5, "0, 1, 3, 4"));
  const std::string message = testing::user_error_of([&] { build_workload(back); });
  EXPECT_NE(message.find("back.jsonl:2: --trace-sessions: this row continues the conversation of line 1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("0.004 s earlier"), std::string::npos) << message;
}

TEST(TraceSessions, WhatCannotBeLinkedOrCombinedIsRefusedByName) {
  // A trace without hash_ids.
  WorkloadSpec csv = trace_spec("plain.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,20,5\n");
  const std::string no_hashes = testing::user_error_of([&] { build_workload(csv); });
  EXPECT_NE(no_hashes.find("--trace-sessions"), std::string::npos) << no_hashes;
  EXPECT_NE(no_hashes.find("plain.csv has no hash_ids"), std::string::npos) << no_hashes;
  WorkloadSpec synthetic;
  synthetic.num_requests = 10;
  synthetic.trace_sessions = true;
  EXPECT_NE(testing::user_error_of([&] { build_workload(synthetic); }).find("--trace-sessions: needs --trace"),
            std::string::npos);

  const std::string rows = row(0, 1100, 5, "0, 1, 2") + row(1, 1600, 5, "0, 1, 3, 4");
  const WorkloadSpec spec = trace_spec("ok.jsonl", rows);
  const auto refused = [&](const std::string& option, const std::function<void(WorkloadSpec&)>& set) {
    WorkloadSpec with = spec;
    set(with);
    const std::string message = testing::user_error_of([&] { build_workload(with); });
    EXPECT_NE(message.find("--trace-sessions with " + option), std::string::npos) << message;
  };
  refused("--arrival poisson:1", [](WorkloadSpec& w) { w.arrival = "poisson:1"; });
  refused("--resample", [](WorkloadSpec& w) { w.resample = "block-bootstrap"; });
  refused("--think-time", [](WorkloadSpec& w) { w.think_time = "fixed:1"; });
  refused("--session-turns", [](WorkloadSpec& w) { w.session_turns = "fixed:2"; });
  const std::string streaming = testing::user_error_of([&] { stream_workload(spec); });
  EXPECT_NE(streaming.find("--streaming with --trace-sessions"), std::string::npos) << streaming;
}

// The shipped Mooncake conversation trace: the counts docs/sessions.md gives.
TEST(TraceSessions, TheMooncakeConversationTraceHoldsTwoThousandConversations) {
  WorkloadSpec spec;
  spec.trace = testing::data_file(testing::traces_dir(), "mooncake-fast25/conversation.jsonl.gz");
  spec.trace_sessions = true;
  const BuiltWorkload w = build_workload(spec);
  ASSERT_EQ(w.requests.size(), 12031u);
  int64_t linked = 0, second_turns = 0, longest = 0;
  std::vector<int64_t> turns(w.requests.size(), 1);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestId before = w.sessions.predecessor[i];
    if (before < 0) continue;
    ++linked;
    turns[i] = turns[static_cast<size_t>(before)] + 1;
    second_turns += turns[i] == 2;
    longest = std::max(longest, turns[i]);
    // A next turn holds every full block of its predecessor's prompt, and more.
    const auto mine = w.prefix_blocks.of(static_cast<RequestId>(i));
    const auto theirs = w.prefix_blocks.of(before);
    const size_t full = static_cast<size_t>(w.requests[static_cast<size_t>(before)].prompt_tokens / 512);
    ASSERT_GE(full, 2u);
    EXPECT_TRUE(std::equal(theirs.begin(), theirs.begin() + static_cast<std::ptrdiff_t>(full), mine.begin()));
    EXPECT_GT(w.requests[i].prompt_tokens, w.requests[static_cast<size_t>(before)].prompt_tokens);
    EXPECT_GE(w.requests[i].arrival, w.requests[static_cast<size_t>(before)].arrival);
  }
  EXPECT_EQ(linked, 3835);
  EXPECT_EQ(second_turns, 2008);  // sessions of 2 turns or more
  EXPECT_EQ(longest, 43);
}

}  // namespace
}  // namespace batchsim
