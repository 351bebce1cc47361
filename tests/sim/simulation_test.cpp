// Event-loop semantics, tested with a tiny policy defined here (the real schedulers are
// tested in tests/policies): token accounting, TTFT/TBT/TPOT, rejection, wake-ups, stall
// detection and byte-identical reruns.
#include "sim/simulation.h"

#include <cmath>
#include <deque>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "sim/workload/workload.h"

namespace batchsim {
namespace {

// Every waiting request joins at once with its whole prompt; every running one decodes.
// Requests with a prompt above `reject_above` are rejected on arrival.
class GreedyPolicy final : public Policy {
 public:
  int32_t reject_above = 1 << 30;
  bool stall = false;                    // simulate a buggy policy that never schedules
  SimTime hold_until = SimTime::zero();  // schedule nothing before this time

  std::string_view name() const override { return "greedy-test"; }
  void attach(PolicyEnv& env) override {
    env_ = &env;
    kv_ = std::make_unique<ReservedKvCache>(env.requests->size(), int64_t{1} << 40);
  }
  void on_arrival(RequestId id, SimTime) override {
    if (env_->request(id).prompt_tokens > reject_above) {
      env_->reject(id, "prompt too long for the test");
      return;
    }
    waiting_.push_back(id);
  }
  void schedule(SimTime now, Batch& batch) override {
    if (stall) return;
    if (now < hold_until) {
      batch.wake_at = hold_until;
      return;
    }
    for (RequestId id : running_) {
      const auto& p = env_->progress_of(id);
      if (!kv_->try_grow(id, p.computed_tokens + 1)) throw std::logic_error("KV outgrown");
      batch.add(id, 1, p.computed_tokens, /*is_decode=*/true, /*samples=*/true);
    }
    for (RequestId id : waiting_) {
      const int32_t prompt = env_->request(id).prompt_tokens;
      kv_->try_admit(id, prompt, prompt + env_->request(id).output_tokens);
      batch.add(id, prompt, 0, /*is_decode=*/false, /*samples=*/true);
      running_.push_back(id);
    }
    waiting_.clear();
  }
  void on_iteration_end(const Batch&, std::span<const RequestId> finished, SimTime) override {
    for (RequestId id : finished) {
      kv_->release(id);
      std::erase(running_, id);
    }
  }
  bool idle() const override { return waiting_.empty() && running_.empty(); }
  const KvCacheManager& kv_cache() const override { return *kv_; }

 private:
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<ReservedKvCache> kv_;
  std::vector<RequestId> waiting_, running_;
};

CostModel test_cost_model() { return CostModel(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"), 1); }

Workload make(std::initializer_list<std::tuple<double, int, int>> rows) {
  Workload w;
  for (const auto& [arrival_s, prompt, output] : rows) {
    w.push_back({static_cast<RequestId>(w.size()), SimTime::from_seconds(arrival_s), prompt, output});
  }
  return w;
}

SimTime duration_of(const CostModel& cm, const BatchShape& shape) {
  return SimTime::from_seconds(cm.iteration(shape).total_s);
}

// SimTime::from_seconds rounds inline; it must give std::llround's nanoseconds for every value:
// exact halves either side of zero, values just below and above a half, and magnitudes up to
// and past 2^52 ns, where it hands over to the library.
TEST(SimTime, FromSecondsRoundsAsLlround) {
  std::vector<double> seconds = {0.0,
                                 -0.0,
                                 0.5e-9,
                                 -0.5e-9,
                                 1.5e-9,
                                 -1.5e-9,
                                 2.5e-9,
                                 -2.5e-9,
                                 0.49999999999999994e-9,
                                 std::nextafter(0.5e-9, 1.0),
                                 std::nextafter(0.5e-9, 0.0),
                                 1e-3,
                                 0.0123456789,
                                 3600.0,
                                 std::ldexp(1.0, 52) * 1e-9,
                                 std::ldexp(1.0, 52) * 1e-9 * 1.5,
                                 1e7};
  std::mt19937_64 gen(7);
  for (int i = 0; i < 200000; ++i) {
    // Magnitudes from 1e-12 s to 1e8 s, both signs, and exact half-nanoseconds.
    const double magnitude = std::pow(10.0, std::uniform_real_distribution<double>(-12, 8)(gen));
    seconds.push_back((i % 2 ? -1 : 1) * magnitude);
    seconds.push_back(static_cast<double>(static_cast<int64_t>(gen() % 2000000) - 1000000) * 0.5e-9);
  }
  for (const double s : seconds) {
    ASSERT_EQ(SimTime::from_seconds(s).ns(), std::llround(s * 1e9)) << s;
  }
}

TEST(Simulation, OneRequestTimesEveryTokenFromTheCostModel) {
  const CostModel cm = test_cost_model();
  const Workload w = make({{0.5, 100, 3}});
  GreedyPolicy policy;
  SimulationOptions options;
  options.record_iterations = true;
  const SimulationResult r = Simulation(w, policy, cm, options).run();

  BatchShape prefill, decode1, decode2;
  prefill.add_prefill(100, 0);
  prefill.num_sampled = 1;
  decode1.add_decode(100);
  decode1.num_sampled = 1;
  decode2.add_decode(101);
  decode2.num_sampled = 1;
  const SimTime t1 = SimTime::from_seconds(0.5) + duration_of(cm, prefill);
  const SimTime t2 = t1 + duration_of(cm, decode1);
  const SimTime t3 = t2 + duration_of(cm, decode2);

  ASSERT_EQ(r.iterations.size(), 3u);
  // KV is sampled while each iteration runs, before the last one frees the request's.
  EXPECT_EQ(r.iterations[0].kv_used_tokens, 100);
  EXPECT_EQ(r.iterations[1].kv_used_tokens, 101);
  EXPECT_EQ(r.iterations[2].kv_used_tokens, 102);
  EXPECT_EQ(r.iterations[2].kv_allocated_tokens, 103);  // prompt + output, reserved up front
  const RequestRecord& rec = r.requests[0];
  EXPECT_EQ(rec.state, RequestState::kFinished);
  EXPECT_EQ(rec.first_token, t1);
  EXPECT_EQ(rec.finished, t3);
  EXPECT_EQ(rec.max_tbt, std::max(t2 - t1, t3 - t2));
  EXPECT_DOUBLE_EQ(rec.ttft_s(), (t1 - SimTime::from_seconds(0.5)).seconds());
  EXPECT_DOUBLE_EQ(rec.tpot_s(), (t3 - t1).seconds() / 2);
  EXPECT_EQ(r.tbt_s.count(), 2);  // output - 1 gaps
  EXPECT_EQ(r.summary.output_tokens, 3);
  EXPECT_EQ(r.summary.iterations, 3);
  EXPECT_DOUBLE_EQ(r.summary.makespan_s, (t3 - SimTime::from_seconds(0.5)).seconds());
  EXPECT_DOUBLE_EQ(r.summary.output_tokens_per_s, 3 / r.summary.makespan_s);
  EXPECT_DOUBLE_EQ(r.summary.total_tokens_per_s, 103 / r.summary.makespan_s);
  EXPECT_NEAR(r.summary.busy_fraction, 1.0, 1e-9);
}

TEST(Simulation, AllArrivalsAtOneInstantAreSeenBeforeTheFirstBatch) {
  const CostModel cm = test_cost_model();
  const Workload w = make({{0, 10, 2}, {0, 20, 2}, {0, 30, 2}, {0, 40, 2}});
  GreedyPolicy policy;
  size_t first_batch = 0;
  SimulationOptions options;
  options.on_iteration = [&](const Batch& b, const IterationRecord& it, const Policy&) {
    if (it.index == 0) first_batch = b.items.size();
  };
  Simulation(w, policy, cm, options).run();
  EXPECT_EQ(first_batch, 4u);
}

TEST(Simulation, EveryTokenOnceAndEveryRequestSettledOnce) {
  const CostModel cm = test_cost_model();
  WorkloadSpec spec;
  spec.arrival = "poisson:20";
  spec.prompt_len = "uniform:1:300";
  spec.output_len = "uniform:1:50";
  spec.num_requests = 300;
  spec.seed = 7;
  const Workload w = make_workload(spec);
  GreedyPolicy policy;
  policy.reject_above = 280;
  std::vector<int64_t> sampled(w.size(), 0);
  SimTime last_start = SimTime::zero();
  SimulationOptions options;
  options.on_iteration = [&](const Batch& b, const IterationRecord& it, const Policy&) {
    EXPECT_GE(it.start, last_start);
    last_start = it.start;
    for (const BatchItem& item : b.items) ++sampled[item.id];
  };
  const SimulationResult r = Simulation(w, policy, cm, options).run();
  int64_t rejected = 0;
  for (const RequestRecord& rec : r.requests) {
    if (w[rec.id].prompt_tokens > 280) {
      EXPECT_EQ(rec.state, RequestState::kRejected);
      EXPECT_EQ(rec.reject_reason, "prompt too long for the test");
      EXPECT_EQ(sampled[rec.id], 0);
      ++rejected;
    } else {
      EXPECT_EQ(rec.state, RequestState::kFinished);
      // The greedy policy samples on every step: one step per output token.
      EXPECT_EQ(sampled[rec.id], rec.output_tokens) << rec.id;
      EXPECT_GE(rec.first_token, rec.arrival);
      EXPECT_GE(rec.finished, rec.first_token);
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(r.summary.requests_rejected, rejected);
  EXPECT_EQ(r.summary.requests_completed + rejected, static_cast<int64_t>(w.size()));
}

TEST(Simulation, SameInputsGiveIdenticalResults) {
  const CostModel cm = test_cost_model();
  WorkloadSpec spec;
  spec.arrival = "gamma:10:2";
  spec.prompt_len = "lognormal:200:0.8";
  spec.output_len = "capexp:64:256";
  spec.num_requests = 200;
  spec.seed = 42;
  auto run_once = [&] {
    GreedyPolicy policy;
    return Simulation(make_workload(spec), policy, cm).run();
  };
  const SimulationResult a = run_once(), b = run_once();
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].first_token, b.requests[i].first_token);
    EXPECT_EQ(a.requests[i].finished, b.requests[i].finished);
  }
  EXPECT_EQ(a.summary.tbt_s.p99, b.summary.tbt_s.p99);
  EXPECT_EQ(a.summary.e2e_s.mean, b.summary.e2e_s.mean);
}

TEST(Simulation, PolicyWakeUpDelaysTheFirstBatch) {
  const CostModel cm = test_cost_model();
  const Workload w = make({{0, 10, 1}});
  GreedyPolicy policy;
  policy.hold_until = SimTime::from_seconds(2);
  const SimulationResult r = Simulation(w, policy, cm).run();
  EXPECT_EQ(r.requests[0].first_scheduled, SimTime::from_seconds(2));
  EXPECT_DOUBLE_EQ(r.summary.queueing_s.p50, 2.0);
}

TEST(Simulation, AStalledPolicyIsReportedNotLoopedOn) {
  const CostModel cm = test_cost_model();
  const Workload w = make({{0, 10, 5}});
  GreedyPolicy policy;
  policy.stall = true;
  EXPECT_THROW(Simulation(w, policy, cm).run(), std::logic_error);
}

}  // namespace
}  // namespace batchsim
