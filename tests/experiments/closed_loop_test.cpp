// Closed-loop clients (--max-concurrency C, vllm bench serve's semantics): exactly C requests in
// flight while any wait at the client, each waiting request sent the moment one settles (or,
// with --think-time, its think time later) and timed from then, fast-forward exact, and batchers
// that wait for a full batch do not wait forever on clients that cannot send more.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_run.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/error.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;

RunConfig closed_loop_config(const std::string& policy, int64_t concurrency, const std::string& arrival = "offline") {
  RunConfig c = default_run_config();
  c.policy = policy;
  c.max_concurrency = concurrency;
  c.workload.arrival = arrival;
  c.workload.num_requests = 60;
  c.workload.prompt_len = "uniform:64:900";
  c.workload.output_len = "uniform:2:120";
  c.workload.seed = 3;
  return c;
}

// The most requests at once between `from` (a time of each request's) and their settle.
int64_t peak_between(const SimulationResult& r, SimTime (*from)(const RequestRecord&)) {
  std::vector<std::pair<SimTime, int>> edges;
  for (const RequestRecord& q : r.requests) {
    edges.emplace_back(from(q), +1);
    edges.emplace_back(q.finished, -1);
  }
  std::sort(edges.begin(), edges.end());  // at equal times a settle (-1) comes before a send
  int64_t now = 0, peak = 0;
  for (const auto& [t, d] : edges) peak = std::max(peak, now += d);
  return peak;
}

// The most requests in flight at once: sent (arrival) and not yet settled.
int64_t max_in_flight(const SimulationResult& r) {
  return peak_between(r, [](const RequestRecord& q) { return q.arrival; });
}

// The most requests at the server at once: from the first time it was scheduled (an engine
// with room admits a request at its first step) to its settle.
int64_t max_at_server(const SimulationResult& r) {
  return peak_between(r, [](const RequestRecord& q) { return q.first_scheduled; });
}

// Two runs of the same requests that must agree request for request: sent, first scheduled,
// first token and finished at the same nanosecond.
void expect_same_requests(const RunOutcome& a, const RunOutcome& b) {
  ASSERT_EQ(a.result.requests.size(), b.result.requests.size());
  for (size_t i = 0; i < a.result.requests.size(); ++i) {
    EXPECT_EQ(a.result.requests[i].arrival, b.result.requests[i].arrival) << i;
    EXPECT_EQ(a.result.requests[i].first_scheduled, b.result.requests[i].first_scheduled) << i;
    EXPECT_EQ(a.result.requests[i].first_token, b.result.requests[i].first_token) << i;
    EXPECT_EQ(a.result.requests[i].finished, b.result.requests[i].finished) << i;
  }
}

TEST(ClosedLoop, ExactlyCInFlightAndEachSentWhenOneSettles) {
  for (const char* policy : {"vllm", "vllm-v0", "orca", "sarathi"}) {
    SCOPED_TRACE(policy);
    const RunOutcome run = run_simulation(closed_loop_config(policy, 4));
    const auto& reqs = run.result.requests;
    ASSERT_EQ(run.result.summary.requests_completed, 60);
    EXPECT_EQ(max_in_flight(run.result), 4);
    std::multiset<SimTime> finishes;
    for (const auto& q : reqs) finishes.insert(q.finished);
    int64_t at_zero = 0;
    for (const auto& q : reqs) {
      if (q.arrival == SimTime::zero()) {
        ++at_zero;
        continue;
      }
      // Sent at a settle: the finish of a request sent before it.
      EXPECT_TRUE(finishes.count(q.arrival) > 0) << "request " << q.id;
    }
    EXPECT_EQ(at_zero, 4);
    // While requests wait at the client, four are in flight: the number sent by each finish
    // equals the number that finished then (requests are sent in order).
    std::map<SimTime, int> sent_at, finished_at;
    for (const auto& q : reqs) {
      if (q.arrival > SimTime::zero()) ++sent_at[q.arrival];
      ++finished_at[q.finished];
    }
    int64_t sent_total = 4;
    for (const auto& [t, n] : finished_at) {
      const int sent = sent_at.count(t) ? sent_at[t] : 0;
      EXPECT_EQ(sent, std::min<int64_t>(n, 60 - sent_total)) << t.seconds();
      sent_total += sent;
    }
    for (size_t i = 1; i < reqs.size(); ++i) EXPECT_LE(reqs[i - 1].arrival, reqs[i].arrival);
  }
}

TEST(ClosedLoop, CapsARateDrivenStreamAndTimesRequestsFromTheirSend) {
  RunConfig open = closed_loop_config("vllm", 0, "poisson:50");
  RunConfig capped = closed_loop_config("vllm", 3, "poisson:50");
  const RunOutcome a = run_simulation(open), b = run_simulation(capped);
  EXPECT_GT(max_in_flight(a.result), 3);
  EXPECT_EQ(max_in_flight(b.result), 3);
  for (size_t i = 0; i < a.result.requests.size(); ++i) {
    EXPECT_GE(b.result.requests[i].arrival, a.result.requests[i].arrival);  // never before it is due
    EXPECT_GE(b.result.requests[i].ttft_s(), 0.0);
  }
  // Fewer in flight: shorter batches, so each request's own latency is lower.
  EXPECT_LT(b.result.summary.e2e_s.p50, a.result.summary.e2e_s.p50);
}

TEST(ClosedLoop, FastForwardStaysExactWithClientsAndReplicas) {
  // With several replicas a settle on one sends a request that the router may give to another
  // in the middle of its fast-forwarded run.
  for (const auto& [replicas, router] :
       {std::pair<int, const char*>{1, "round-robin"}, {3, "round-robin"}, {3, "least-outstanding"}, {3, "random"}}) {
    for (const char* policy : {"vllm", "continuous", "tgi"}) {
      for (const char* think : {"", "exponential:0.05"}) {  // with think time, sends fall mid-run
        for (const int connections : {0, 3}) {              // with a pool, a settle also lets a waiting request in
          SCOPED_TRACE(fmt::format("{} x{} {} think {} connections {}", policy, replicas, router, think, connections));
          RunConfig c = closed_loop_config(policy, 5);
          c.client_connections = connections;
          c.replicas = replicas;
          c.router = router;
          c.workload.output_len = "uniform:50:400";
          c.workload.think_time = think;
          RunHooks off;
          off.fast_forward = false;
          const RunOutcome fast = run_simulation(c), slow = run_simulation(c, nullptr, off);
          expect_same_requests(fast, slow);
          EXPECT_GT(fast.result.fast_forwarded_iterations, 0);
        }
      }
    }
  }
}

// A static batcher waiting for 16 requests would wait forever on 4 clients: once every client
// has a request in flight, nothing can arrive before one settles, so it runs what it has; and
// so it does once a client connection pool (--client-connections) lets no more through.
TEST(ClosedLoop, StaticBatchersRunWhatTheClientsCanSend) {
  RunConfig c = closed_loop_config("hf-static", 4);
  c.policy_opts["batch_size"] = "16";
  const RunOutcome run = run_simulation(c);
  EXPECT_EQ(run.result.summary.requests_completed, 60);
  EXPECT_EQ(max_in_flight(run.result), 4);
  c.max_concurrency = 6;
  c.client_connections = 2;
  const RunOutcome pooled = run_simulation(c);
  EXPECT_EQ(pooled.result.summary.requests_completed, 60);
  EXPECT_EQ(max_at_server(pooled.result), 2);
}

TEST(ClosedLoop, TheOptionIsCheckedAndEchoed) {
  EXPECT_THAT(testing::cli_error_of({"run", "--max-concurrency", "-1", "--num-requests", "5"}),
              HasSubstr("--max-concurrency -1: must be in [0, 10000000]"));
  const auto dir = testing::scratch_dir("closed-loop-cli");
  ASSERT_EQ(testing::run_cli({"run", "--max-concurrency", "8", "--num-requests", "30", "--out", (dir / "r").string()}),
            0);
  std::ifstream in(dir / "r" / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["config"]["max_concurrency"], 8);
}

// The clients taken at once: a request takes its client from the settle that freed it (its
// send less its think time; t = 0 for the first ones) until it settles.
int64_t max_clients_taken(const SimulationResult& r, const std::vector<SimTime>& think_times) {
  std::vector<std::pair<SimTime, int>> edges;
  for (const RequestRecord& q : r.requests) {
    edges.emplace_back(q.arrival - think_times[q.id], +1);
    edges.emplace_back(q.finished, -1);
  }
  std::sort(edges.begin(), edges.end());
  int64_t now = 0, peak = 0;
  for (const auto& [t, d] : edges) peak = std::max(peak, now += d);
  return peak;
}

TEST(ClosedLoopThinkTime, EachRequestIsSentItsThinkTimeAfterItsClientIsFree) {
  RunConfig c = closed_loop_config("vllm", 4);
  c.workload.think_time = "uniform:0.5:2";
  const std::vector<SimTime> think = build_workload(c.workload).think_times;
  const RunOutcome run = run_simulation(c);
  const auto& reqs = run.result.requests;
  ASSERT_EQ(run.result.summary.requests_completed, 60);
  std::multiset<SimTime> finishes;
  for (const auto& q : reqs) finishes.insert(q.finished);
  int64_t from_zero = 0;
  SimTime previous_settle = SimTime::zero();
  for (const auto& q : reqs) {
    EXPECT_GT(q.arrival, SimTime::zero()) << "request " << q.id;  // every client thinks first
    const SimTime settle = q.arrival - think[q.id];
    if (settle == SimTime::zero()) {  // one of the first four: its client thought from t = 0
      ++from_zero;
      continue;
    }
    EXPECT_TRUE(finishes.count(settle) > 0) << "request " << q.id;  // its think time after a finish
    EXPECT_GE(settle, previous_settle) << "request " << q.id;       // held requests go in order
    previous_settle = settle;
  }
  EXPECT_EQ(from_zero, 4);
  // A thinking client is taken: four clients, never more, though fewer are at the server.
  EXPECT_EQ(max_clients_taken(run.result, think), 4);
  EXPECT_LE(max_in_flight(run.result), 4);
  // Zero think time is the plain closed loop, request for request.
  RunConfig zero = closed_loop_config("vllm", 4);
  zero.workload.think_time = "fixed:0";
  expect_same_requests(run_simulation(closed_loop_config("vllm", 4)), run_simulation(zero));
}

// N users who each think Z between a response and their next request, each request taking R on
// average, complete X = N / (R + Z) requests per second: the interactive response time law
// (Denning and Buzen, "The Operational Analysis of Queueing Network Models", Computing Surveys
// 10(3), 1978). It holds for any scheduler; the run's start and end make it approximate.
TEST(ClosedLoopThinkTime, ThroughputFollowsTheInteractiveResponseTimeLaw) {
  for (const char* think : {"fixed:1", "exponential:0.5"}) {
    SCOPED_TRACE(think);
    RunConfig c = closed_loop_config("vllm", 8);
    c.workload.num_requests = 800;
    c.workload.think_time = think;
    const RunOutcome run = run_simulation(c);
    const Summary& s = run.result.summary;
    double e2e = 0;
    for (const auto& q : run.result.requests) e2e += (q.finished - q.arrival).seconds();
    const double response_s = e2e / 800;
    const double think_s = std::string(think) == "fixed:1" ? 1.0 : 0.5;
    const double throughput = 800 / s.makespan_s;
    EXPECT_NEAR(throughput, 8 / (response_s + think_s), 0.03 * throughput)
        << "R " << response_s << " s, makespan " << s.makespan_s << " s";
  }
}

// A static batcher waiting for a full batch does not run while a client is thinking: once it
// sends, the batch is the four clients' requests again, never a short one.
TEST(ClosedLoopThinkTime, StaticBatchersWaitForThinkingClients) {
  RunConfig c = closed_loop_config("hf-static", 4);
  c.policy_opts["batch_size"] = "16";
  c.workload.think_time = "uniform:0.1:1";
  const RunOutcome run = run_simulation(c);
  ASSERT_EQ(run.result.summary.requests_completed, 60);
  std::map<SimTime, int> batch_sizes;  // requests by the time their batch was first scheduled
  for (const auto& q : run.result.requests) ++batch_sizes[q.first_scheduled];
  EXPECT_EQ(batch_sizes.size(), 15u);
  for (const auto& [t, n] : batch_sizes) EXPECT_EQ(n, 4) << t.seconds();
}

TEST(ClosedLoopThinkTime, TheOptionIsCheckedAndEchoed) {
  EXPECT_THAT(testing::cli_error_of({"run", "--think-time", "fixed:1", "--num-requests", "5"}),
              HasSubstr("--think-time fixed:1: is how long a closed-loop client waits"));
  const auto dir = testing::scratch_dir("think-time-cli");
  std::string text;
  ASSERT_EQ(testing::run_cli({"run", "--max-concurrency", "3", "--think-time", "exponential:0.2", "--num-requests",
                              "30", "--out", (dir / "r").string()},
                             &text),
            0);
  EXPECT_THAT(text, HasSubstr("30 requests, arrival offline, 3 clients (think time exponential:0.2 s), KV capacity"));
  std::ifstream in(dir / "r" / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["config"]["think_time"], "exponential:0.2");
  // The summary's config reruns the same run.
  ASSERT_EQ(
      testing::run_cli({"run", "--config", (dir / "r" / "summary.json").string(), "--out", (dir / "again").string()}),
      0);
  std::ifstream again(dir / "again" / "summary.json");
  EXPECT_EQ(nlohmann::json::parse(again)["makespan_s"], summary["makespan_s"]);
}

// The client's connection pool (--client-connections N): N of the C clients' requests at the
// server at once, the others waiting at the client in order of sending, their clock running.

TEST(ClientConnections, AtMostNAtTheServerAndTheWaitCountsInTtft) {
  RunConfig pooled = closed_loop_config("vllm", 8);
  pooled.client_connections = 3;
  const RunOutcome run = run_simulation(pooled), open = run_simulation(closed_loop_config("vllm", 8));
  ASSERT_EQ(run.result.summary.requests_completed, 60);
  EXPECT_EQ(max_in_flight(run.result), 8);  // eight clients, each with a request out
  EXPECT_EQ(max_at_server(run.result), 3);  // three of them at the server
  EXPECT_GT(max_at_server(open.result), 3);
  // The first eight are sent at t = 0; five of them wait for a connection, and their TTFT counts
  // the wait: each is scheduled only once an earlier request has settled.
  std::multiset<SimTime> finishes;
  for (const auto& q : run.result.requests) finishes.insert(q.finished);
  int64_t waited = 0;
  for (const auto& q : run.result.requests) {
    EXPECT_GE(q.first_token, q.first_scheduled);
    if (q.first_scheduled == q.arrival) continue;
    ++waited;
    EXPECT_GE(q.ttft(), q.first_scheduled - q.arrival) << q.id;
    // Its breakdown's queueing holds the wait: its parts still sum to its e2e.
    EXPECT_GE(q.breakdown.time(LatencyPart::kQueueing), q.first_scheduled - q.arrival - SimTime::from_ns(1)) << q.id;
    EXPECT_EQ(q.breakdown.total_ns(), q.e2e().ns()) << q.id;
  }
  EXPECT_GE(waited, 5);
  // Fewer at the server: shorter steps, longer waits.
  EXPECT_LT(run.result.summary.tpot_s.mean, open.result.summary.tpot_s.mean);
  EXPECT_GT(run.result.summary.ttft_s.mean, open.result.summary.ttft_s.mean);
}

// One connection serves the requests one at a time, in the order sent: each is scheduled when
// the one before it finishes, though two clients keep two requests out.
TEST(ClientConnections, OneConnectionServesOneRequestAtATimeInOrder) {
  RunConfig c = closed_loop_config("vllm", 2);
  c.client_connections = 1;
  c.workload.num_requests = 12;
  const RunOutcome run = run_simulation(c);
  const auto& reqs = run.result.requests;
  ASSERT_EQ(run.result.summary.requests_completed, 12);
  EXPECT_EQ(max_at_server(run.result), 1);
  for (size_t i = 1; i < reqs.size(); ++i) {
    EXPECT_GE(reqs[i].first_scheduled, reqs[i - 1].finished) << i;  // it reached the server at that settle
    EXPECT_LT(reqs[i].arrival, reqs[i].first_scheduled) << i;       // after waiting at the client
    if (i >= 2) {
      EXPECT_EQ(reqs[i].arrival, reqs[i - 2].finished) << i;  // sent when its client's last one ended
    }
  }
}

TEST(ClientConnections, APoolAsLargeAsTheClientsChangesNothing) {
  RunConfig plain = closed_loop_config("sarathi", 5), pooled = plain;
  pooled.client_connections = 5;
  expect_same_requests(run_simulation(plain), run_simulation(pooled));
}

TEST(ClientConnections, TheOptionIsCheckedEchoedAndDiagnosed) {
  EXPECT_THAT(
      testing::cli_error_of({"run", "--client-connections", "4", "--num-requests", "5"}),
      HasSubstr("--client-connections 4: is the connection pool of closed-loop clients; give --max-concurrency"));
  EXPECT_THAT(testing::cli_error_of({"run", "--max-concurrency", "8", "--client-connections", "-2"}),
              HasSubstr("--client-connections -2: must be in [0, 10000000]"));
  const auto dir = testing::scratch_dir("client-connections-cli");
  std::string text;
  ASSERT_EQ(testing::run_cli({"run", "--max-concurrency", "40", "--client-connections", "4", "--num-requests", "200",
                              "--out", (dir / "r").string()},
                             &text),
            0);
  EXPECT_THAT(text, HasSubstr("200 requests, arrival offline, 40 clients over 4 connections, KV capacity"));
  std::ifstream in(dir / "r" / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["config"]["client_connections"], 4);
  EXPECT_THAT(summary["latency_breakdown"]["diagnosis"].get<std::string>(),
              HasSubstr("at the client for one of its 4 connections"));
  // The summary's config reruns the same run.
  ASSERT_EQ(
      testing::run_cli({"run", "--config", (dir / "r" / "summary.json").string(), "--out", (dir / "again").string()}),
      0);
  std::ifstream again(dir / "again" / "summary.json");
  EXPECT_EQ(nlohmann::json::parse(again)["makespan_s"], summary["makespan_s"]);
}

}  // namespace
}  // namespace batchsim
