// Synthetic multi-turn sessions (sim/workload/workload.h, "session_turns"): each turn's prompt
// is the conversation so far, the sessions' turns are chained with their think times, and the
// conversation's hashes cover prompts and answers, unique to each session.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

WorkloadSpec session_spec(const std::string& turns, const std::string& think = "uniform:1:3") {
  WorkloadSpec spec;
  spec.arrival = "poisson:0.5";
  spec.prompt_len = "uniform:20:300";
  spec.output_len = "uniform:5:200";
  spec.num_requests = 60;  // sessions
  spec.seed = 4;
  spec.session_turns = turns;
  spec.think_time = think;
  return spec;
}

TEST(SessionWorkload, EachTurnsPromptIsTheConversationSoFarPlusItsInput) {
  const BuiltWorkload built = build_workload(session_spec("uniform:1:6"));
  const Workload& w = built.requests;
  const SessionLinks& links = built.sessions;
  ASSERT_EQ(links.predecessor.size(), w.size());
  ASSERT_EQ(links.delay.size(), w.size());
  const PrefixBlockHashes& blocks = built.prefix_blocks;
  ASSERT_EQ(blocks.size(), static_cast<int64_t>(w.size()));
  EXPECT_TRUE(blocks.covers_outputs);
  int64_t sessions = 0, later_turns = 0;
  double think_sum = 0;
  std::set<uint64_t> first_hashes;
  for (size_t i = 0; i < w.size(); ++i) {
    const Request& r = w[i];
    const RequestId before = links.predecessor[i];
    // Hashes of the whole conversation up to this turn's answer, 64 tokens each.
    const auto hashes = blocks.of(r.id);
    EXPECT_EQ(static_cast<int64_t>(hashes.size()) * blocks.block_tokens,
              (int64_t{r.prompt_tokens} + r.output_tokens + blocks.block_tokens - 1) / blocks.block_tokens *
                  blocks.block_tokens);
    if (before < 0) {
      ++sessions;
      EXPECT_EQ(links.delay[i], SimTime::zero());
      EXPECT_LE(r.prompt_tokens, 300);
      EXPECT_TRUE(first_hashes.insert(hashes.front()).second) << "sessions share no conversation";
      continue;
    }
    ++later_turns;
    ASSERT_EQ(before, r.id - 1) << "a session's turns are consecutive";
    const Request& prev = w[static_cast<size_t>(before)];
    EXPECT_EQ(r.arrival, prev.arrival) << "later turns carry the session's start";
    // The earlier conversation (prompt and answer) plus 20-300 new tokens.
    const int64_t history = int64_t{prev.prompt_tokens} + prev.output_tokens;
    EXPECT_GE(r.prompt_tokens, history + 20);
    EXPECT_LE(r.prompt_tokens, history + 300);
    // Its hashes continue the predecessor's: the same conversation.
    const auto prev_hashes = blocks.of(before);
    ASSERT_GE(hashes.size(), prev_hashes.size());
    EXPECT_TRUE(std::equal(prev_hashes.begin(), prev_hashes.end(), hashes.begin()));
    EXPECT_GE(links.delay[i], SimTime::from_seconds(1));
    EXPECT_LE(links.delay[i], SimTime::from_seconds(3));
    think_sum += links.delay[i].seconds();
  }
  EXPECT_EQ(sessions, 60);
  EXPECT_GT(later_turns, 100);  // 2.5 later turns per session on average
  EXPECT_NEAR(think_sum / static_cast<double>(later_turns), 2.0, 0.15);
  EXPECT_TRUE(built.think_times.empty()) << "no closed-loop client thinks";
  EXPECT_NE(built.description.find("60 sessions"), std::string::npos) << built.description;
  // The same seed, the same sessions.
  const BuiltWorkload again = build_workload(session_spec("uniform:1:6"));
  EXPECT_EQ(again.sessions.predecessor, links.predecessor);
  EXPECT_EQ(again.prefix_blocks.hashes, blocks.hashes);
}

TEST(SessionWorkload, FixedTurnsWithoutThinkTimeSendEachTurnAtTheAnswer) {
  const BuiltWorkload built = build_workload(session_spec("fixed:3", ""));
  ASSERT_EQ(built.requests.size(), 180u);
  for (size_t i = 0; i < built.requests.size(); ++i) {
    EXPECT_EQ(built.sessions.predecessor[i], i % 3 == 0 ? -1 : static_cast<RequestId>(i) - 1);
    EXPECT_EQ(built.sessions.delay[i], SimTime::zero());
  }
}

TEST(SessionWorkload, WhatSessionsCannotBeBuiltWithIsRefusedByName) {
  const auto error_for = [](WorkloadSpec spec) { return testing::user_error_of([&] { build_workload(spec); }); };
  EXPECT_EQ(error_for(session_spec("uniform:0:3")), "--session-turns: \"uniform:0:3\": A must be an integer >= 1");
  WorkloadSpec with_prefix = session_spec("fixed:2");
  with_prefix.prefix = "shared:32";
  EXPECT_NE(error_for(with_prefix).find("--session-turns fixed:2 with --prefix: not supported"), std::string::npos);
  WorkloadSpec with_trace = session_spec("fixed:2");
  with_trace.trace = testing::write_text_file(testing::scratch_dir("session_workload"), "t.csv",
                                              "arrival_s,prompt_tokens,output_tokens\n0,100,5\n");
  EXPECT_NE(error_for(with_trace).find("--session-turns fixed:2 with --trace: not supported"), std::string::npos);
  WorkloadSpec none = session_spec("fixed:2");
  none.num_requests = 0;
  EXPECT_NE(error_for(none).find("--num-requests"), std::string::npos);
  EXPECT_NE(testing::user_error_of([] {
              stream_workload(session_spec("fixed:2", ""));
            }).find("--streaming with --session-turns: not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace batchsim
