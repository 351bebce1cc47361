// --chrome-trace: the file parses as JSON, its events come in time order, every iteration is one
// slice on its replica's track, each traced request's phases tile its life from arrival to
// finish and agree with its record, only the first N requests get slices, the counters follow
// the iterations, and fast-forward changes not a byte.
#include "experiments/run/chrome_trace.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/cli/cli.h"
#include "experiments/run/run_config.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::run_cli;

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

// Microseconds as the trace writes them (exact nanoseconds / 1000).
double us(SimTime t) { return static_cast<double>(t.ns()) / 1e3; }
constexpr double kUsTolerance = 1e-6;  // doubles of whole nanoseconds over 1000

// Two replicas, a Poisson stream slow enough to leave them idle at times, and a KV cache of
// 300 blocks (4800 tokens), too small for the running requests' growth: queueing, chunked
// prefills, preemptions and idle gaps in one run.
RunConfig busy_run() {
  RunConfig c = default_run_config();
  c.policy = "vllm";
  c.replicas = 2;
  c.router = "least-outstanding";
  c.workload.arrival = "poisson:6";
  c.workload.num_requests = 120;
  c.workload.prompt_len = "uniform:100:1500";
  c.workload.output_len = "capexp:200:800";
  c.workload.seed = 3;
  c.num_gpu_blocks = 300;
  c.chrome_trace = "unused.json";  // only its presence matters to run_simulation
  c.chrome_trace_requests = 50;
  return c;
}

json trace_of(const RunOutcome& run) {
  std::ostringstream out;
  write_chrome_trace(run, out);
  return json::parse(out.str());
}

std::string trace_text(const RunConfig& config, bool fast_forward) {
  RunHooks hooks;
  hooks.fast_forward = fast_forward;
  std::ostringstream out;
  write_chrome_trace(run_simulation(config, nullptr, hooks), out);
  return out.str();
}

TEST(ChromeTrace, IterationsAreOneSliceEachOnTheirReplicasTrackInTimeOrder) {
  const RunOutcome run = run_simulation(busy_run());
  const json trace = trace_of(run);
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["otherData"]["config"]["policy"], "vllm");

  std::map<int, std::vector<json>> slices;  // per pid
  std::map<int, std::string> process_names;
  double last_ts = -1;
  for (const json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
      continue;
    }
    // Viewers sort events by time; written in order, ties keep the nesting they were made in.
    EXPECT_GE(e["ts"].get<double>(), last_ts);
    last_ts = e["ts"];
    if (ph == "X") slices[e["pid"]].push_back(e);
  }
  const Summary& s = run.result.summary;
  ASSERT_EQ(s.replicas.size(), 2u);
  ASSERT_EQ(process_names.size(), 2u);
  EXPECT_THAT(process_names[1], HasSubstr("replica 0"));
  int64_t total = 0;
  for (int replica = 0; replica < 2; ++replica) {
    const auto& track = slices[replica + 1];
    EXPECT_EQ(static_cast<int64_t>(track.size()), s.replicas[replica].iterations) << replica;
    total += static_cast<int64_t>(track.size());
    for (size_t i = 0; i < track.size(); ++i) {
      const json& args = track[i]["args"];
      EXPECT_EQ(args["iteration"], static_cast<int64_t>(i));  // each iteration once, in order
      if (i > 0) {
        EXPECT_LE(track[i - 1]["ts"].get<double>() + track[i - 1]["dur"].get<double>(),
                  track[i]["ts"].get<double>() + kUsTolerance);
      }
      // The slice's name and its prefill lists say what it computed.
      const std::string name = track[i]["name"];
      EXPECT_EQ(name.find("prefill") != std::string::npos, args["num_prefills"].get<int>() > 0) << name;
      EXPECT_EQ(name.find("decode") != std::string::npos, args["num_decodes"].get<int>() > 0) << name;
      EXPECT_EQ(args["prefill_request_ids"].size(), args["num_prefills"].get<size_t>()) << name;
      int64_t chunk_tokens = 0;
      for (const json& t : args["prefill_chunk_tokens"]) chunk_tokens += t.get<int64_t>();
      EXPECT_EQ(chunk_tokens, args["prefill_tokens"].get<int64_t>()) << name;
    }
  }
  EXPECT_EQ(total, s.iterations);
  // The log matches what the simulation recorded, slice by slice.
  std::map<int, size_t> next;
  for (const IterationRecord& it : run.result.iterations) {
    const json& e = slices[it.replica + 1].at(next[it.replica]++);
    EXPECT_NEAR(e["ts"].get<double>(), us(it.start), kUsTolerance);
    EXPECT_NEAR(e["dur"].get<double>(), us(it.duration), kUsTolerance);
    EXPECT_NEAR(e["args"]["cost_ms"]["total"].get<double>(), it.cost.total_s * 1e3, 1e-6);  // to the ns
  }
}

// Per traced request: "request N" spans its arrival to its finish, and its phases tile that
// span in order without overlap or gap; the first prefill begins at its first scheduling, the
// first decode at its first token (unless the request, the newest, was preempted right then:
// its decode follows the recompute), and it is preempted as often as its record says.
TEST(ChromeTrace, RequestPhasesTileEachRequestsLifeAndAgreeWithItsRecord) {
  const RunOutcome run = run_simulation(busy_run());
  const json trace = trace_of(run);
  std::map<int64_t, std::vector<json>> events;  // per request id, in file order
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "request") events[e["id"].get<int64_t>()].push_back(e);
  }
  ASSERT_EQ(events.size(), 50u);  // the first 50 of 120, no others
  EXPECT_EQ(events.begin()->first, 0);
  EXPECT_EQ(events.rbegin()->first, 49);
  EXPECT_EQ(trace["otherData"]["traced_requests"], 50);

  const std::set<std::string> phases = {"queued", "prefilling", "decoding", "preempted"};
  int64_t preempted_requests = 0, rejected = 0;
  for (const auto& [id, list] : events) {
    SCOPED_TRACE("request " + std::to_string(id));
    const RequestRecord& r = run.result.requests.at(static_cast<size_t>(id));
    ASSERT_GE(list.size(), 4u);  // the request's begin and end, at least one phase
    const std::string name = "request " + std::to_string(id);
    EXPECT_EQ(list.front()["ph"], "b");
    EXPECT_EQ(list.front()["name"], name);
    EXPECT_EQ(list.back()["ph"], "e");
    EXPECT_EQ(list.back()["name"], name);
    EXPECT_EQ(list.front()["pid"], r.replica + 1);
    EXPECT_NEAR(list.front()["ts"].get<double>(), us(r.arrival), kUsTolerance);
    const SimTime end = r.completed() ? r.finished : SimTime::max();
    if (r.completed()) {
      EXPECT_NEAR(list.back()["ts"].get<double>(), us(end), kUsTolerance);
    }
    rejected += r.state == RequestState::kRejected;

    double covered_to = list.front()["ts"];
    int preempted = 0;
    bool seen_prefill = false, seen_decode = false;
    bool preempted_at_first_token = false;  // then its decoding begins after the recompute
    for (size_t k = 1; k + 1 < list.size(); k += 2) {
      const json &b = list[k], &e = list[k + 1];
      ASSERT_EQ(b["ph"], "b");
      ASSERT_EQ(e["ph"], "e");
      ASSERT_EQ(b["name"], e["name"]);
      const std::string phase = b["name"];
      EXPECT_TRUE(phases.count(phase)) << phase;
      EXPECT_NEAR(b["ts"].get<double>(), covered_to, kUsTolerance) << phase;  // no gap, no overlap
      EXPECT_GT(e["ts"].get<double>(), b["ts"].get<double>()) << phase;
      covered_to = e["ts"];
      if (phase == "prefilling" && !seen_prefill) {
        seen_prefill = true;
        EXPECT_NEAR(b["ts"].get<double>(), us(r.first_scheduled), kUsTolerance);
      }
      if (phase == "preempted" && !seen_decode && std::abs(b["ts"].get<double>() - us(r.first_token)) <= kUsTolerance) {
        preempted_at_first_token = true;
      }
      if (phase == "decoding" && !seen_decode) {
        seen_decode = true;
        if (!preempted_at_first_token) {
          EXPECT_NEAR(b["ts"].get<double>(), us(r.first_token), kUsTolerance);
        }
      }
      preempted += phase == "preempted";
    }
    EXPECT_NEAR(covered_to, list.back()["ts"].get<double>(), kUsTolerance);
    EXPECT_EQ(preempted, r.preemptions);
    preempted_requests += preempted > 0;
    if (r.completed()) {
      EXPECT_TRUE(seen_prefill);
      EXPECT_EQ(seen_decode, r.output_tokens > 1);
      EXPECT_NEAR(list.front()["args"]["e2e_ms"].get<double>(), r.e2e_s() * 1e3, 1e-6);
    }
  }
  // The workload is meant to exercise preemption among the traced requests.
  EXPECT_GT(preempted_requests, 0);
  EXPECT_EQ(rejected, 0);
}

// Counters: per replica the KV cache and the running / waiting requests, as the iteration that
// starts there reads them, and running 0 while the replica waits for work.
TEST(ChromeTrace, CountersFollowTheIterationsAndDropWhenAReplicaIdles) {
  const RunOutcome run = run_simulation(busy_run());
  const json trace = trace_of(run);
  std::map<int, std::vector<std::pair<double, json>>> kv, requests;  // per pid: (ts, args)
  std::vector<json> slices;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "KV cache") kv[e["pid"]].emplace_back(e["ts"], e["args"]);
    if (e["ph"] == "C" && e["name"] == "requests") requests[e["pid"]].emplace_back(e["ts"], e["args"]);
    if (e["ph"] == "X") slices.push_back(e);
  }
  // The counter sample in force at `ts` (the last at or before it).
  const auto at = [](const std::vector<std::pair<double, json>>& samples, double ts) {
    const json* last = nullptr;
    for (const auto& [t, args] : samples) {
      if (t > ts + kUsTolerance) break;
      last = &args;
    }
    return last;
  };
  for (int pid : {1, 2}) {
    ASSERT_FALSE(kv[pid].empty()) << pid;
    ASSERT_FALSE(requests[pid].empty()) << pid;
    bool idled = false;
    for (const auto& [t, args] : requests[pid]) idled |= args["running"] == 0;
    EXPECT_TRUE(idled) << "replica " << pid - 1 << " never shown idle";
  }
  for (const json& e : slices) {
    const int pid = e["pid"];
    const double ts = e["ts"];
    const json* kv_args = at(kv[pid], ts);
    const json* req_args = at(requests[pid], ts);
    ASSERT_NE(kv_args, nullptr);
    ASSERT_NE(req_args, nullptr);
    EXPECT_EQ((*kv_args)["used_tokens"], e["args"]["kv_used_tokens"]);
    EXPECT_EQ((*kv_args)["allocated_tokens"], e["args"]["kv_allocated_tokens"]);
    EXPECT_EQ((*req_args)["running"], e["args"]["num_requests"]);
    EXPECT_EQ((*req_args)["waiting"], e["args"]["waiting"]);
  }
}

TEST(ChromeTrace, TracedRequestsAreTheFirstNAndZeroLeavesIterationsAndCounters) {
  RunConfig c = busy_run();
  c.chrome_trace_requests = 0;
  json trace = trace_of(run_simulation(c));
  int64_t slices = 0, counters = 0, request_events = 0;
  for (const json& e : trace["traceEvents"]) {
    slices += e["ph"] == "X";
    counters += e["ph"] == "C";
    request_events += e.value("cat", "") == "request";
  }
  EXPECT_GT(slices, 0);
  EXPECT_GT(counters, 0);
  EXPECT_EQ(request_events, 0);
  // More than there are: every request.
  c.chrome_trace_requests = 1000;
  trace = trace_of(run_simulation(c));
  EXPECT_EQ(trace["otherData"]["traced_requests"], 120);
  // Unset: the default, which this small run does not reach.
  c.chrome_trace_requests.reset();
  EXPECT_EQ(chrome_trace_requests(c), kDefaultChromeTraceRequests);
}

// Decode fast-forward advances runs of decode iterations in one step; the trace is the same to
// the byte, on one replica and on two (whose iterations interleave differently then).
TEST(ChromeTrace, FastForwardChangesNotAByte) {
  for (int replicas : {1, 2}) {
    RunConfig c = busy_run();
    c.replicas = replicas;
    c.chrome_trace_requests = 1000;
    const std::string slow = trace_text(c, false), fast = trace_text(c, true);
    EXPECT_GT(slow.size(), 10000u);
    EXPECT_TRUE(slow == fast) << replicas << " replicas";
  }
}

TEST(ChromeTrace, RunWritesTheFileAndRefusesBadOptionsByName) {
  const fs::path dir = testing::scratch_dir("chrome-trace-cli");
  const fs::path file = dir / "sub" / "trace.json";
  std::string text;
  ASSERT_EQ(run_cli({"run", "--num-requests", "30", "--arrival", "poisson:10", "--chrome-trace", file.string(),
                     "--chrome-trace-requests", "7"},
                    &text),
            0);
  EXPECT_THAT(text, HasSubstr("ui.perfetto.dev"));
  const json trace = json::parse(testing::read_text_file(file));
  EXPECT_EQ(trace["otherData"]["traced_requests"], 7);

  // The same through a --config file.
  testing::write_text_file(
      dir, "run.yaml",
      "chrome-trace: " + (dir / "yaml.json").string() + "\nchrome-trace-requests: 3\nnum-requests: 10\n");
  ASSERT_EQ(run_cli({"run", "--config", (dir / "run.yaml").string()}), 0);
  EXPECT_EQ(json::parse(testing::read_text_file(dir / "yaml.json"))["otherData"]["traced_requests"], 3);

  const auto error_of = [](std::vector<std::string> args) { return testing::user_error_of([&] { run_cli(args); }); };
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--chrome-trace", "t.json", "--chrome-trace-requests", "-1"}),
              HasSubstr("--chrome-trace-requests -1"));
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--chrome-trace-requests", "10"}),
              HasSubstr("give --chrome-trace FILE"));
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--chrome-trace-requests", "many"}),
              HasSubstr("chrome-trace-requests"));
  // A folder that cannot be made: under a plain file.
  testing::write_text_file(dir, "plain", "x");
  EXPECT_THAT(error_of({"run", "--num-requests", "5", "--chrome-trace", (dir / "plain" / "t.json").string()}),
              HasSubstr("--chrome-trace: cannot write"));
  testing::write_text_file(dir, "bad.yaml", "chrome-trace: t.json\nchrome-trace-requests: lots\n");
  EXPECT_THAT(error_of({"run", "--config", (dir / "bad.yaml").string()}), HasSubstr("chrome-trace-requests"));
  EXPECT_THAT(error_of({"plan", "--gpu", "a100-80gb", "--slo", "ttft_p99=2s", "--chrome-trace", "t.json"}),
              HasSubstr("--chrome-trace"));
}

// A disaggregated run: every request handed to the decode pool has a kv_transfer slice from its
// hand-off (its first token) to its first iteration on the decode replica, as long as its
// latency breakdown's kv_transfer part, and decodes from there; one that finished on the prefill
// side has none.
TEST(ChromeTrace, AHandedOffRequestsKvTransferRunsFromItsHandOffToItsFirstDecodeIteration) {
  RunConfig c = busy_run();
  c.replicas = 1;
  c.router = "round-robin";
  c.prefill_replicas = 1;
  c.decode_replicas = 1;
  c.workload.output_len = "uniform:1:400";  // some of one token: finished where they prefilled
  const RunOutcome run = run_simulation(c);
  ASSERT_FALSE(run.result.handoffs.empty());
  const json trace = trace_of(run);
  std::map<int64_t, std::vector<json>> events;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "request") events[e["id"].get<int64_t>()].push_back(e);
  }
  ASSERT_EQ(events.size(), 50u);
  int transferred = 0, unmoved = 0, preempted_first = 0;
  for (const auto& [id, list] : events) {
    SCOPED_TRACE("request " + std::to_string(id));
    const RequestRecord& r = run.result.requests.at(static_cast<size_t>(id));
    const HandoffRecord& h = run.result.handoffs.at(static_cast<size_t>(id));
    std::vector<size_t> begins;
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k]["name"] == "kv_transfer" && list[k]["ph"] == "b") begins.push_back(k);
    }
    if (!h.transferred() || !r.completed()) {
      EXPECT_TRUE(begins.empty());
      unmoved += r.completed() && r.output_tokens == 1;
      continue;
    }
    ASSERT_EQ(begins.size(), 1u);
    ++transferred;
    const json& b = list[begins[0]];
    const json& e = list[begins[0] + 1];
    ASSERT_EQ(e["name"], "kv_transfer");
    ASSERT_EQ(e["ph"], "e");
    EXPECT_NEAR(b["ts"].get<double>(), us(h.handoff), kUsTolerance);
    EXPECT_GE(e["ts"].get<double>(), us(h.transfer_end) - kUsTolerance);
    // Decoding on the decode replica from its end; or preempted there before its first step
    // (the decode replica short of KV), which the breakdown counts as preemption.
    const json& next = list[begins[0] + 2];
    EXPECT_EQ(next["ph"], "b");
    EXPECT_NEAR(next["ts"].get<double>(), e["ts"].get<double>(), kUsTolerance);
    if (next["name"] == "preempted") {
      ++preempted_first;
      continue;
    }
    EXPECT_EQ(next["name"], "decoding");
    EXPECT_NEAR(e["ts"].get<double>() - b["ts"].get<double>(),
                static_cast<double>(r.breakdown[LatencyPart::kKvTransfer]) / 1e3, 1e-3);
  }
  EXPECT_GT(transferred - preempted_first, 20);
  EXPECT_GT(unmoved, 0);
}

}  // namespace
}  // namespace batchsim
