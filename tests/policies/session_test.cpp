// Multi-turn sessions in the simulation (SimulationOptions::sessions): a turn is sent its think
// time after its predecessor settles, finds the earlier turns' KV (prompts and answers) in the
// prefix cache, goes on after a rejected turn, and fast-forward and decode cohorts stay exact.
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "policies/registry.h"
#include "policy_test_rig.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::expect_same_iterations;
using testing::expect_same_requests;
using testing::expect_same_summary;
using testing::expect_same_timeline;

BuiltWorkload sessions(const std::string& turns, const std::string& think, int64_t count, uint64_t seed,
                       const std::string& arrival = "poisson:2", const std::string& prompt = "uniform:20:400",
                       const std::string& output = "uniform:5:300") {
  WorkloadSpec spec = testing::synthetic_spec(arrival, prompt, output, count, seed);
  spec.session_turns = turns;
  spec.think_time = think;
  return build_workload(spec);
}

SimulationResult run_sessions(const BuiltWorkload& w, std::span<Policy* const> policies, const CostModel& cm,
                              bool fast_forward = true, bool items = false, Router router = Router::kRoundRobin,
                              SimulationOptions options = {}) {
  options.prefix_blocks = &w.prefix_blocks;
  options.sessions = &w.sessions;
  options.fast_forward = fast_forward;
  options.record_iterations = true;
  options.record_iteration_items = items;
  options.record_phases_of_first_requests = static_cast<int64_t>(w.requests.size());
  options.router = router;
  return Simulation(w.requests, policies, cm, options).run();
}

SimulationResult run_sessions(const BuiltWorkload& w, Policy& policy, const CostModel& cm,
                              SimulationOptions options = {}) {
  Policy* const one[] = {&policy};
  return run_sessions(w, one, cm, true, false, Router::kRoundRobin, std::move(options));
}

TEST(Sessions, EachTurnIsSentItsThinkTimeAfterTheAnswerAndFindsTheConversationCached) {
  const BuiltWorkload w = sessions("fixed:3", "fixed:2", 1, 0, "offline", "fixed:100", "fixed:100");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});  // prefix caching on, blocks of 16
  const SimulationResult result = run_sessions(w, *policy, cm);
  ASSERT_EQ(result.requests.size(), 3u);
  for (const RequestRecord& r : result.requests) ASSERT_TRUE(r.completed());
  const auto& turns = result.requests;
  EXPECT_EQ(turns[0].arrival, SimTime::zero());
  EXPECT_EQ(turns[1].arrival, turns[0].finished + SimTime::from_seconds(2));
  EXPECT_EQ(turns[2].arrival, turns[1].finished + SimTime::from_seconds(2));
  EXPECT_EQ(turns[1].prompt_tokens, 300);
  EXPECT_EQ(turns[2].prompt_tokens, 500);
  // The first turn held 100 + 99 tokens of KV (its last token is sampled, never computed): 12
  // full blocks of 16, its answer's among them; the second 300 + 99: 24 blocks.
  EXPECT_EQ(turns[0].cached_tokens, 0);
  EXPECT_EQ(turns[1].cached_tokens, 192);
  EXPECT_EQ(turns[2].cached_tokens, 384);
  // TTFT is the client's: from the send, not from the session's start.
  EXPECT_LT(turns[2].ttft(), SimTime::from_seconds(0.1));
}

TEST(Sessions, OnPrefillAndDecodePoolsTheNextTurnFindsThePrefillReplicasBlocks) {
  // One prefill and one decode replica. Each turn is sent its think time after its answer ends
  // on the decode replica; the prefill replica computed only the prompts (and sampled the first
  // token), so its prefix cache holds the earlier prompts' full blocks and not the answers'.
  const BuiltWorkload w = sessions("fixed:3", "fixed:2", 1, 0, "offline", "fixed:100", "fixed:100");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto prefill = make_policy("vllm", {});
  auto decode = make_policy("vllm", {});
  Policy* const pools[] = {prefill.get(), decode.get()};
  SimulationOptions options;
  options.disaggregation.prefill_replicas = 1;
  const SimulationResult result = run_sessions(w, pools, cm, true, false, Router::kRoundRobin, options);
  ASSERT_EQ(result.requests.size(), 3u);
  const auto& turns = result.requests;
  for (const RequestRecord& r : turns) {
    ASSERT_TRUE(r.completed());
    EXPECT_EQ(r.replica, 1);  // each finished on the decode replica
  }
  EXPECT_EQ(turns[1].arrival, turns[0].finished + SimTime::from_seconds(2));
  EXPECT_EQ(turns[2].arrival, turns[1].finished + SimTime::from_seconds(2));
  // Turn 0's prompt: 6 full blocks of 16. Turn 1's prompt (300 tokens: turn 0's prompt and
  // answer, then its own input) shares those 6, and the prefill replica then holds its 18.
  EXPECT_EQ(turns[0].cached_tokens, 0);
  EXPECT_EQ(turns[1].cached_tokens, 96);
  EXPECT_EQ(turns[2].cached_tokens, 288);
  ASSERT_EQ(result.handoffs.size(), 3u);
  for (const HandoffRecord& h : result.handoffs) EXPECT_TRUE(h.transferred());
}

TEST(Sessions, WithoutOutputHashesOnlyThePromptsAreShared) {
  BuiltWorkload w = sessions("fixed:2", "fixed:1", 1, 0, "offline", "fixed:100", "fixed:100");
  w.prefix_blocks.covers_outputs = false;  // as a workload whose hashes describe prompts only
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});
  const SimulationResult result = run_sessions(w, *policy, cm);
  EXPECT_EQ(result.requests[1].cached_tokens, 96);  // the first prompt's 6 full blocks
}

TEST(Sessions, ARejectedTurnStillSendsTheNextOne) {
  // Turns grow by 300 tokens: the third (prompt 700 + 100) passes a 600-token context.
  const BuiltWorkload w = sessions("fixed:4", "fixed:0.5", 1, 0, "offline", "fixed:200", "fixed:100");
  testing::RigOptions rig;
  rig.max_context_tokens = 600;
  const CostModel cm = testing::rig_cost_model(rig);
  auto policy = make_policy("vllm", {});
  const SimulationResult result = run_sessions(w, *policy, cm, testing::rig_simulation_options());
  const auto& turns = result.requests;
  ASSERT_EQ(turns.size(), 4u);
  EXPECT_TRUE(turns[0].completed());
  EXPECT_TRUE(turns[1].completed());
  EXPECT_EQ(turns[2].state, RequestState::kRejected);
  EXPECT_EQ(turns[3].state, RequestState::kRejected);
  EXPECT_EQ(turns[2].arrival, turns[1].finished + SimTime::from_seconds(0.5));
  // A rejected turn settles at its send: the next one is sent half a second later.
  EXPECT_EQ(turns[3].arrival, turns[2].arrival + SimTime::from_seconds(0.5));
}

TEST(Sessions, AStaticBatcherWaitingForAFullBatchDoesNotWaitForTurnsThatWaitOnIt) {
  // Batches of 8 without a timeout: once every session's first turn has arrived, the rest wait
  // on answers, so the batcher must run what it holds.
  const BuiltWorkload w = sessions("fixed:3", "fixed:1", 5, 2, "offline");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("static", {});  // batches of 8, no timeout
  const SimulationResult result = run_sessions(w, *policy, cm);
  ASSERT_EQ(result.requests.size(), 15u);
  for (const RequestRecord& r : result.requests) EXPECT_TRUE(r.completed()) << r.id;
}

TEST(Sessions, ThePrecisePrefixRouterSendsEachTurnWhereItsConversationIsCached) {
  // 12 sessions of 3 turns on 4 replicas: each later turn finds 2/3 of its prompt on the replica
  // of the turn before (score >= 2 x 0.64 + load), where load alone is worth at most 2.
  const BuiltWorkload w = sessions("fixed:3", "fixed:1", 12, 3, "poisson:4", "fixed:100", "fixed:100");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  const auto run = [&](Router router) {
    std::vector<std::unique_ptr<Policy>> owned;
    std::vector<Policy*> policies;
    for (int i = 0; i < 4; ++i) {
      owned.push_back(make_policy("vllm", {}));
      policies.push_back(owned.back().get());
    }
    return run_sessions(w, policies, cm, true, false, router);
  };
  const SimulationResult precise = run(Router::kPrecisePrefix);
  const SimulationResult spread = run(Router::kRoundRobin);
  int64_t moved = 0;
  std::vector<int> used(4, 0);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestRecord& r = precise.requests[i];
    ASSERT_TRUE(r.completed());
    ++used[static_cast<size_t>(r.replica)];
    const RequestId before = w.sessions.predecessor[i];
    if (before < 0) continue;
    EXPECT_EQ(r.replica, precise.requests[static_cast<size_t>(before)].replica) << "turn " << i;
    EXPECT_EQ(r.cached_tokens, w.requests[i].prompt_tokens == 300 ? 192 : 384) << "turn " << i;
    moved += spread.requests[i].replica != spread.requests[static_cast<size_t>(before)].replica;
  }
  EXPECT_GT(moved, 0) << "round-robin scatters the turns";
  for (const int n : used) EXPECT_GT(n, 0) << "the first turns spread by load";
  EXPECT_GT(precise.summary.prefill_cached_tokens, spread.summary.prefill_cached_tokens);
}

// The same results with fast-forward on and off, and with decode cohorts (items not recorded),
// for each kind of scheduler, one replica and two behind the prefix routers, open loop and 6
// sessions at a time.
TEST(Sessions, FastForwardAndCohortsStayExact) {
  const BuiltWorkload w = sessions("uniform:1:6", "exponential:1", 40, 7);
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("a100-40gb"), 1);
  int64_t repeated = 0, cohort_iterations = 0, cached = 0;
  for (const std::string name : {"vllm", "vllm-v0", "sglang", "trtllm", "tgi", "static"}) {
    for (const auto& layout : {std::tuple{1, Router::kPrefix, 0}, std::tuple{2, Router::kPrefix, 0},
                               std::tuple{3, Router::kPrecisePrefix, 0}, std::tuple{1, Router::kPrefix, 6},
                               std::tuple{3, Router::kPrecisePrefix, 6}}) {
      const int replicas = std::get<0>(layout);  // (clang 14 cannot capture structured bindings)
      const Router router = std::get<1>(layout);
      SimulationOptions options;
      options.max_concurrency = std::get<2>(layout);
      SCOPED_TRACE(name + " on " + std::to_string(replicas) + " replicas behind " + std::string(router_name(router)) +
                   ", " + std::to_string(options.max_concurrency) + " sessions at a time");
      const auto run = [&](bool fast_forward, bool items) {
        std::vector<std::unique_ptr<Policy>> owned;
        std::vector<Policy*> policies;
        for (int i = 0; i < replicas; ++i) {
          owned.push_back(make_policy(name, {}));
          policies.push_back(owned.back().get());
        }
        return run_sessions(w, policies, cm, fast_forward, items, router, options);
      };
      const SimulationResult slow = run(false, true);
      const SimulationResult fast = run(true, true);
      const SimulationResult cohorts = run(true, false);
      for (const SimulationResult* other : {&fast, &cohorts}) {
        expect_same_requests(slow, *other);
        expect_same_iterations(slow, *other);
        expect_same_timeline(slow, *other);
        expect_same_summary(slow.summary, other->summary);
      }
      for (const RequestRecord& r : slow.requests) EXPECT_TRUE(r.completed()) << r.id;
      repeated += fast.fast_forwarded_iterations;
      cohort_iterations += cohorts.cohort_iterations;
      cached += slow.summary.prefill_cached_tokens;
    }
  }
  EXPECT_GT(repeated, 1000);
  EXPECT_GT(cohort_iterations, 1000);
  EXPECT_GT(cached, 0);
}

// Sessions read from a trace (--trace-sessions): a turn is sent at its recorded time, or when its
// predecessor's answer ends if that is later, and finds the predecessor's prompt blocks (the
// trace's hash_ids) cached.
BuiltWorkload trace_sessions(const std::string& name, const std::string& rows) {
  WorkloadSpec spec;
  spec.trace = testing::write_text_file(testing::scratch_dir("traces"), name, rows);
  spec.trace_sessions = true;
  return build_workload(spec);
}

std::string trace_row(int64_t ms, int64_t input, int64_t output, const std::string& hashes) {
  return "{\"timestamp\": " + std::to_string(ms) + ", \"input_length\": " + std::to_string(input) +
         ", \"output_length\": " + std::to_string(output) + ", \"hash_ids\": [" + hashes + "]}\n";
}

TEST(Sessions, ATraceTurnIsSentAtTheLaterOfItsTimeAndItsPredecessorsAnswerAndFindsItsBlocksCached) {
  // Row 1: 1,100 tokens, 2 full blocks of 512 and a partial one. Row 2: another conversation
  // (only the system block in common). Row 3: row 1's conversation grown to 1,600 tokens,
  // recorded 1 ms after it (`soon`) or a minute after it (`late`).
  for (const int64_t row3_ms : {int64_t{1}, int64_t{60'000}}) {
    SCOPED_TRACE("row 3 at " + std::to_string(row3_ms) + " ms");
    const BuiltWorkload w =
        trace_sessions("three.jsonl", trace_row(0, 1100, 50, "0, 1, 2") + trace_row(0, 600, 10, "0, 3") +
                                          trace_row(row3_ms, 1600, 20, "0, 1, 4, 5"));
    ASSERT_EQ(w.sessions.predecessor, (std::vector<RequestId>{-1, -1, 0}));
    const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
    auto policy = make_policy("vllm", {});  // prefix caching on, blocks of 16
    const SimulationResult result = run_sessions(w, *policy, cm);
    const auto& r = result.requests;
    for (const RequestRecord& record : r) ASSERT_TRUE(record.completed());
    const SimTime recorded = SimTime::from_ns(row3_ms * 1'000'000);
    EXPECT_EQ(r[2].arrival, std::max(recorded, r[0].finished));
    if (row3_ms == 1) {
      EXPECT_EQ(r[2].arrival, r[0].finished) << "50 output tokens take longer than 1 ms";
    } else {
      EXPECT_EQ(r[2].arrival, recorded);
    }
    // Row 1's two full 512-token blocks (64 of vLLM's 16-token blocks); not its partial third,
    // whose id the grown conversation does not share.
    EXPECT_EQ(r[2].cached_tokens, 1024);
    // Without the link, the same rows replay at their recorded times.
    BuiltWorkload unlinked = w;
    unlinked.sessions = {};
    auto plain_policy = make_policy("vllm", {});
    EXPECT_EQ(run_sessions(unlinked, *plain_policy, cm).requests[2].arrival, recorded);
  }
}

TEST(Sessions, ATraceTurnWhosePredecessorWasRejectedStillGoes) {
  // Row 1 (5,000 tokens) passes a 4,096-token context and is rejected at once; row 3 continues
  // it with 5,200 tokens and is rejected too; row 2 (another conversation) runs.
  const BuiltWorkload w = trace_sessions(
      "rejected.jsonl", trace_row(0, 5000, 10, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9") + trace_row(0, 600, 10, "0, 20") +
                            trace_row(5, 5200, 10, "0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11"));
  ASSERT_EQ(w.sessions.predecessor, (std::vector<RequestId>{-1, -1, 0}));
  const CostModel cm = testing::rig_cost_model();
  auto policy = make_policy("vllm", {});
  const SimulationResult result = run_sessions(w, *policy, cm, testing::rig_simulation_options());
  const auto& r = result.requests;
  EXPECT_EQ(r[0].state, RequestState::kRejected);
  EXPECT_TRUE(r[1].completed());
  EXPECT_EQ(r[2].state, RequestState::kRejected);
  EXPECT_EQ(r[2].arrival, SimTime::from_ns(5'000'000));  // its own time: the rejection came at 0
}

// Closed-loop sessions (SimulationOptions::max_concurrency with sessions): at most N sessions at
// a time, a new one starting when one's last turn settles.
struct SessionSpan {
  SimTime start, end;  // its first turn's send, its last turn's end
};

std::vector<SessionSpan> session_spans(const BuiltWorkload& w, const SimulationResult& result) {
  std::vector<SessionSpan> spans;
  std::vector<size_t> span_of(w.requests.size(), 0);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestId before = w.sessions.predecessor[i];
    const RequestRecord& r = result.requests[i];
    const SimTime end = r.completed() ? r.finished : r.arrival;  // a rejected turn settles at its send
    if (before < 0) {
      span_of[i] = spans.size();
      spans.push_back({r.arrival, end});
    } else {
      span_of[i] = span_of[static_cast<size_t>(before)];
      spans[span_of[i]].end = end;
    }
  }
  return spans;
}

// The most sessions open at once: a session ending at t is gone before one starting at t.
int64_t most_at_once(const std::vector<SessionSpan>& spans) {
  std::vector<std::pair<SimTime, int>> edges;
  for (const SessionSpan& s : spans) {
    edges.emplace_back(s.start, +1);
    edges.emplace_back(s.end, -1);
  }
  std::sort(edges.begin(), edges.end());  // at equal times -1 first
  int64_t open = 0, most = 0;
  for (const auto& edge : edges) most = std::max(most, open += edge.second);
  return most;
}

TEST(Sessions, ClosedLoopSessionsRunNAtATimeEachStartingWhenOneEnds) {
  const BuiltWorkload w = sessions("uniform:1:5", "fixed:0.5", 14, 5, "offline", "fixed:100", "uniform:20:80");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});
  SimulationOptions options;
  options.max_concurrency = 3;
  const SimulationResult result = run_sessions(w, *policy, cm, options);
  for (const RequestRecord& r : result.requests) ASSERT_TRUE(r.completed()) << r.id;
  const std::vector<SessionSpan> spans = session_spans(w, result);
  ASSERT_EQ(spans.size(), 14u);
  EXPECT_EQ(most_at_once(spans), 3);
  // The first three start at once; each later one when an earlier one ends, at that instant.
  std::vector<SimTime> ends;
  for (size_t s = 0; s < spans.size(); ++s) {
    if (s < 3) {
      EXPECT_EQ(spans[s].start, SimTime::zero()) << "session " << s;
    } else {
      EXPECT_NE(std::find(ends.begin(), ends.end(), spans[s].start), ends.end()) << "session " << s;
    }
    ends.push_back(spans[s].end);
  }
  // Within a session the think time still paces the turns.
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestId before = w.sessions.predecessor[i];
    if (before >= 0) {
      EXPECT_EQ(result.requests[i].arrival,
                result.requests[static_cast<size_t>(before)].finished + SimTime::from_seconds(0.5));
    }
  }
  // Open loop, the same sessions all start at 0.
  auto open_policy = make_policy("vllm", {});
  EXPECT_EQ(most_at_once(session_spans(w, run_sessions(w, *open_policy, cm))), 14);
}

TEST(Sessions, ClosedLoopTraceSessionsKeepEachTurnsRecordedOffsetFromItsSessionsStart) {
  // Two conversations of two turns, the second turns recorded 30 s after their first; one session
  // at a time: the second conversation starts when the first one's second turn ends, and its own
  // second turn 30 s (its recorded offset) after that, its first answer being shorter.
  const BuiltWorkload w = trace_sessions(
      "two.jsonl", trace_row(0, 1100, 20, "0, 1, 2") + trace_row(10, 1100, 20, "0, 5, 6") +
                       trace_row(30'000, 1600, 20, "0, 1, 3, 4") + trace_row(30'010, 1600, 20, "0, 5, 7, 8"));
  ASSERT_EQ(w.sessions.predecessor, (std::vector<RequestId>{-1, -1, 0, 1}));
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});
  SimulationOptions options;
  options.max_concurrency = 1;
  const SimulationResult result = run_sessions(w, *policy, cm, options);
  const auto& r = result.requests;
  for (const RequestRecord& record : r) ASSERT_TRUE(record.completed());
  EXPECT_EQ(r[0].arrival, SimTime::zero());
  EXPECT_EQ(r[2].arrival, SimTime::from_seconds(30));
  EXPECT_EQ(r[1].arrival, r[2].finished);  // held until the first session ended
  EXPECT_EQ(r[3].arrival, r[1].arrival + SimTime::from_seconds(30));
  EXPECT_EQ(r[3].cached_tokens, 1024);
}

TEST(Sessions, TheLinksMustBeChains) {
  BuiltWorkload w = sessions("fixed:2", "", 2, 0, "offline");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});
  w.sessions.predecessor[3] = 0;  // request 0 followed twice
  EXPECT_THROW(run_sessions(w, *policy, cm), std::logic_error);
  w.sessions.predecessor[3] = 3;  // itself
  EXPECT_THROW(run_sessions(w, *policy, cm), std::logic_error);
}

TEST(Sessions, AThinkTimePastTheEndOfSimulatedTimeIsRefusedNamingTheOption) {
  BuiltWorkload w = sessions("fixed:2", "fixed:1", 1, 0, "offline", "fixed:50", "fixed:5");
  w.sessions.delay[1] = SimTime::max();
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});
  EXPECT_EQ(testing::user_error_of([&] { run_sessions(w, *policy, cm); }),
            "--think-time: session turn 1 would be sent beyond the simulated time range");
  // A closed-loop client's think time, likewise.
  const BuiltWorkload plain = build_workload(testing::synthetic_spec("offline", "fixed:50", "fixed:5", 2, 0));
  const std::vector<SimTime> think = {SimTime::zero(), SimTime::max()};
  SimulationOptions options;
  options.max_concurrency = 1;
  options.think_times = &think;
  auto other = make_policy("vllm", {});
  EXPECT_EQ(testing::user_error_of([&] { Simulation(plain.requests, *other, cm, options).run(); }),
            "--think-time: request 1 would be sent beyond the simulated time range");
}

TEST(Sessions, AClientConnectionPoolIsRefused) {
  const BuiltWorkload w = sessions("fixed:2", "", 2, 0, "offline");
  const CostModel cm(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), 1);
  auto policy = make_policy("vllm", {});
  SimulationOptions options;
  options.max_concurrency = 2;
  options.client_connections = 1;
  EXPECT_THROW(run_sessions(w, *policy, cm, options), std::logic_error);
}

}  // namespace
}  // namespace batchsim
