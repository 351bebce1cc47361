// The latency breakdown's accounting (sim/latency_breakdown.h), driven as the simulation drives
// it but with iteration costs chosen by hand, so that every part of every request can be worked
// out on paper: queueing, its own prefill, decode steps, stall (left out of an iteration, or the
// stretch of a mixed one beyond the decodes alone), preemption (the wait, the recompute, a
// chunk's recomputed share, swap time), kv_transfer and overhead; a fast-forwarded run equals
// its iterations stepped one by one; the summary's p99 requests are the slowest 1%.
#include "sim/latency_breakdown.h"

#include <vector>

#include <gtest/gtest.h>

#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "sim/metrics.h"

namespace batchsim {
namespace {

int64_t ms(double v) { return SimTime::from_seconds(v / 1e3).ns(); }

IterationCost cost_of(double total_ms, double overhead_ms) {
  IterationCost c;
  c.total_s = total_ms / 1e3;
  c.overhead_s = overhead_ms / 1e3;
  return c;
}

struct Item {
  RequestId id;
  bool decode;
  int64_t context_before;
  int32_t new_tokens;
};

// Calls the accounting in the simulation's order: joins while the batch is checked, the start
// with the batch's stamp, the end, then each prefill chunk, then the finishes.
class Harness {
 public:
  explicit Harness(size_t requests, size_t replicas = 1) : stamps_(requests, -1) {
    accounting.reset(requests, replicas);
  }
  LatencyAccounting accounting;
  const CostModel cm{resolve_model("llama-2-7b"), resolve_gpu("a100-80gb")};

  // One iteration of `items` on `replica` from `start`, costing `cost` (+ `swap_ms` of
  // transfers); `joining` are the items' requests that were not running. Returns its end.
  SimTime iteration(int32_t replica, SimTime start, const std::vector<Item>& items, const IterationCost& cost,
                    const std::vector<RequestId>& joining = {}, double swap_ms = 0, int repeats = 0) {
    ++stamp_;
    Batch batch;
    for (const Item& i : items) {
      stamps_[static_cast<size_t>(i.id)] = stamp_;
      batch.add(i.id, i.new_tokens, i.context_before, i.decode, true);
    }
    batch.extra_time = SimTime::from_ns(ms(swap_ms));
    for (RequestId id : joining) accounting.joined(id, replica, start);
    const SimTime duration = SimTime::from_seconds(cost.total_s) + batch.extra_time;
    accounting.iteration_started(replica, start, batch, cost, duration, cm, stamps_, stamp_);
    SimTime end = start + duration;
    for (int k = 0; k < repeats; ++k) {  // a fast-forwarded run of the same decodes
      accounting.iteration_repeated(replica, cost, SimTime::from_seconds(cost.total_s));
      end += SimTime::from_seconds(cost.total_s);
    }
    accounting.iteration_ended(replica, end);
    for (const Item& i : items) {
      if (!i.decode) accounting.prefill_chunk_done(i.id, i.context_before, i.new_tokens);
    }
    return end;
  }

 private:
  std::vector<int64_t> stamps_;
  int64_t stamp_ = 0;
};

SimTime at_ms(double v) { return SimTime::from_ns(ms(v)); }

TEST(IterationSplit, SwapThenOverheadThenComputeSumToTheDuration) {
  const IterationSplit s = split_iteration(at_ms(30), cost_of(10, 1), at_ms(20), nullptr);
  EXPECT_EQ(s.swap_ns, ms(20));
  EXPECT_EQ(s.overhead_ns, ms(1));
  EXPECT_EQ(s.compute_ns, ms(9));
  EXPECT_EQ(s.decode_ns, s.compute_ns);  // no prefill chunks: a decode step keeps it all
  EXPECT_EQ(s.duration_ns(), ms(30));
  // The 1 ns floor of an empty-cost iteration: the overhead cannot exceed what is there.
  const IterationSplit tiny = split_iteration(SimTime::from_ns(1), cost_of(0, 5), SimTime::zero(), nullptr);
  EXPECT_EQ(tiny.duration_ns(), 1);
  EXPECT_EQ(tiny.overhead_ns, 1);
  // A counterfactual dearer than the iteration (it cannot be, but rounding could say so) is cut.
  const double dear_s = 0.050;
  EXPECT_EQ(split_iteration(at_ms(10), cost_of(10, 1), SimTime::zero(), &dear_s).decode_ns, ms(9));
}

// Two requests on one replica, every iteration 10 ms of which 1 ms is overhead:
//   R0 arrives at 0, R1 at 5 ms.
//   [0, 10)  R0's prefill (100 tokens).
//   [10, 20) R1's prefill alone (an exclusive prefill step): R0 is left out of it.
//   [20, 30) both decode.
//   at 30 R1 (prompt 50, 2 generated) is preempted by recompute.
//   [30, 40) R0 decodes.
//   [40, 50) R1 re-prefills its 52 known tokens alone; R0 is left out again.
//   [50, 60) both decode, and finish.
TEST(LatencyAccounting, EveryPartOfTwoRequestsWorkedOutByHand) {
  Harness h(2);
  LatencyAccounting& a = h.accounting;
  const IterationCost it = cost_of(10, 1);
  a.arrived(0, at_ms(0));
  a.arrived(1, at_ms(5));
  SimTime t = h.iteration(0, at_ms(0), {{0, false, 0, 100}}, it, {0});
  t = h.iteration(0, t, {{1, false, 0, 50}}, it, {1});
  t = h.iteration(0, t, {{0, true, 100, 1}, {1, true, 50, 1}}, it);
  a.preempted(1, t, /*computed_tokens=*/51, /*known_tokens=*/52, /*generated_tokens=*/2, /*keeps_kv=*/false);
  t = h.iteration(0, t, {{0, true, 101, 1}}, it);
  t = h.iteration(0, t, {{1, false, 0, 52}}, it, {1});
  t = h.iteration(0, t, {{0, true, 102, 1}, {1, true, 52, 1}}, it);
  a.finished(0, t);
  a.finished(1, t);
  EXPECT_EQ(t, at_ms(60));

  const LatencyBreakdown& r0 = a.of(0);
  EXPECT_EQ(r0[LatencyPart::kQueueing], 0);
  EXPECT_EQ(r0[LatencyPart::kPrefill], ms(9));
  EXPECT_EQ(r0[LatencyPart::kDecode], ms(27));  // three decode steps of 9 ms of compute
  EXPECT_EQ(r0[LatencyPart::kStall], ms(20));   // all of R1's two prefill steps, overhead too
  EXPECT_EQ(r0[LatencyPart::kPreemption], 0);
  EXPECT_EQ(r0[LatencyPart::kOverhead], ms(4));  // the four iterations it was in
  EXPECT_EQ(r0.total_ns(), ms(60));

  const LatencyBreakdown& r1 = a.of(1);
  EXPECT_EQ(r1[LatencyPart::kQueueing], ms(5));
  EXPECT_EQ(r1[LatencyPart::kPrefill], ms(9));  // its first prefill only
  EXPECT_EQ(r1[LatencyPart::kDecode], ms(18));
  EXPECT_EQ(r1[LatencyPart::kStall], 0);
  EXPECT_EQ(r1[LatencyPart::kPreemption], ms(19));  // 10 ms waiting + 9 ms recomputing
  EXPECT_EQ(r1[LatencyPart::kOverhead], ms(4));
  EXPECT_EQ(r1[LatencyPart::kKvTransfer], 0);
  EXPECT_EQ(r1.total_ns(), ms(55));
}

// A prefill-only step that leaves most running requests out (the accounting then keeps the
// left-out's shares for the replica and corrects the batch's requests instead): the same parts
// as when few are left out. Three decode; R3's prefill alone leaves all three out.
TEST(LatencyAccounting, APrefillOnlyStepLeavingMostOutGivesThemAllOfIt) {
  Harness h(4);
  LatencyAccounting& a = h.accounting;
  for (RequestId id = 0; id < 4; ++id) a.arrived(id, at_ms(0));
  SimTime t =
      h.iteration(0, at_ms(0), {{0, false, 0, 10}, {1, false, 0, 10}, {2, false, 0, 10}}, cost_of(10, 1), {0, 1, 2});
  t = h.iteration(0, t, {{3, false, 0, 100}}, cost_of(30, 2), {3});  // [10, 40)
  t = h.iteration(0, t, {{0, true, 10, 1}, {1, true, 10, 1}, {2, true, 10, 1}, {3, true, 100, 1}}, cost_of(10, 1));
  for (RequestId id = 0; id < 4; ++id) a.finished(id, t);
  for (RequestId id = 0; id < 3; ++id) {
    EXPECT_EQ(a.of(id)[LatencyPart::kStall], ms(30)) << id;
    EXPECT_EQ(a.of(id)[LatencyPart::kPrefill], ms(9)) << id;
    EXPECT_EQ(a.of(id)[LatencyPart::kDecode], ms(9)) << id;
    EXPECT_EQ(a.of(id)[LatencyPart::kOverhead], ms(2)) << id;
  }
  EXPECT_EQ(a.of(3)[LatencyPart::kQueueing], ms(10));
  EXPECT_EQ(a.of(3)[LatencyPart::kPrefill], ms(28));
  EXPECT_EQ(a.of(3)[LatencyPart::kDecode], ms(9));
  EXPECT_EQ(a.of(3)[LatencyPart::kOverhead], ms(3));
  EXPECT_EQ(a.of(3)[LatencyPart::kStall], 0);
}

// Preempted mid-prefill: only the chunks it had computed are recomputation. R0 computes 64 of
// its 96 prompt tokens in [0, 10) (9 ms of compute), is preempted, and prefills all 96 again in
// [20, 32) (11 ms of compute): 64/96 of that is preemption, the rest its own prefill.
TEST(LatencyAccounting, AChunkIsRecomputationOnlyForTheTokensComputedBefore) {
  Harness h(1);
  LatencyAccounting& a = h.accounting;
  a.arrived(0, at_ms(0));
  SimTime t = h.iteration(0, at_ms(0), {{0, false, 0, 64}}, cost_of(10, 1), {0});
  a.preempted(0, t, /*computed_tokens=*/64, /*known_tokens=*/96, /*generated_tokens=*/0, /*keeps_kv=*/false);
  t = h.iteration(0, at_ms(20), {{0, false, 0, 96}}, cost_of(12, 1), {0});
  t = h.iteration(0, t, {{0, true, 96, 1}}, cost_of(10, 1));
  a.finished(0, t);
  const LatencyBreakdown& r = a.of(0);
  const int64_t recompute = ms(11) * 64 / 96;
  EXPECT_EQ(r[LatencyPart::kPreemption], ms(10) + recompute);  // the wait from 10 to 20 ms, then the recompute
  EXPECT_EQ(r[LatencyPart::kPrefill], ms(9) + (ms(11) - recompute));
  EXPECT_EQ(r[LatencyPart::kDecode], ms(9));
  EXPECT_EQ(r[LatencyPart::kOverhead], ms(3));
  EXPECT_EQ(r.total_ns(), ms(42));
}

// Swap: the transfer time an iteration carries is preemption for every request in it, and a
// swapped-out request's wait is preemption; nothing is recomputed.
TEST(LatencyAccounting, SwapTimeIsPreemptionForTheWholeBatch) {
  Harness h(2);
  LatencyAccounting& a = h.accounting;
  a.arrived(0, at_ms(0));
  a.arrived(1, at_ms(0));
  SimTime t = h.iteration(0, at_ms(0), {{0, false, 0, 10}, {1, false, 0, 10}}, cost_of(10, 1), {0, 1});
  a.preempted(1, t, 10, 11, 1, /*keeps_kv=*/true);
  t = h.iteration(0, t, {{0, true, 10, 1}}, cost_of(10, 1), {}, /*swap_ms=*/5);  // [10, 25): swap-out
  t = h.iteration(0, t, {{0, true, 11, 1}, {1, true, 10, 1}}, cost_of(10, 1), {1}, /*swap_ms=*/5);  // [25, 40)
  a.finished(0, t);
  a.finished(1, t);
  EXPECT_EQ(a.of(0)[LatencyPart::kPreemption], ms(10));      // both swaps it waited through
  EXPECT_EQ(a.of(1)[LatencyPart::kPreemption], ms(15 + 5));  // swapped out 10-25 ms, then its swap-in
  EXPECT_EQ(a.of(1)[LatencyPart::kPrefill], ms(9));          // its only prefill (the decode resumes)
  EXPECT_EQ(a.of(0).total_ns(), ms(40));
  EXPECT_EQ(a.of(1).total_ns(), ms(40));
}

// Long prompts mixed into running decodes: the decodes keep what they alone would compute (the
// cost model's iteration without the prefill chunk), the rest is stall; the prompt's request
// has the whole compute as its own prefill. The second mixed iteration, of as many decodes as
// the first, is split alike from what the replica asked the cost model for the first.
TEST(LatencyAccounting, AMixedIterationsStretchBeyondTheDecodesAloneIsStall) {
  Harness h(4);
  LatencyAccounting& a = h.accounting;
  for (RequestId id = 0; id < 4; ++id) a.arrived(id, at_ms(0));
  SimTime t = h.iteration(0, at_ms(0), {{0, false, 0, 100}, {1, false, 0, 200}}, cost_of(20, 1), {0, 1});
  // R0 and R1 decode beside R2's prompt of 3000 tokens, then beside R3's of 1000.
  struct Mixed {
    std::vector<Item> items;
    RequestId joins;
  };
  const Mixed iterations[] = {{{{0, true, 100, 1}, {1, true, 200, 1}, {2, false, 0, 3000}}, 2},
                              {{{0, true, 101, 1}, {1, true, 201, 1}, {3, false, 0, 1000}}, 3}};
  int64_t own_total = 0, stall_total = 0;
  for (const Mixed& m : iterations) {
    BatchShape shape, alone;
    for (const Item& i : m.items) {
      if (i.decode) {
        shape.add_decode(i.context_before);
        alone.add_decode(i.context_before);
      } else {
        shape.add_prefill(i.new_tokens, i.context_before);
      }
    }
    shape.num_sampled = 3;
    alone.num_sampled = 2;
    const IterationCost cost = h.cm.iteration(shape);
    const IterationCost decodes = h.cm.iteration(alone);
    const SimTime start = t;
    t = h.iteration(0, t, m.items, cost, {m.joins});
    a.finished(m.joins, t);  // a one-token output: done at its prefill
    const int64_t compute = (t - start).ns() - SimTime::from_seconds(cost.overhead_s).ns();
    const int64_t own = SimTime::from_seconds(decodes.total_s - decodes.overhead_s).ns();
    ASSERT_GT(compute, 3 * own);  // the prompt outweighs two decode steps
    own_total += own;
    stall_total += compute - own;
    EXPECT_EQ(a.of(m.joins)[LatencyPart::kPrefill], compute);
    EXPECT_EQ(a.of(m.joins)[LatencyPart::kStall], 0);
  }
  a.finished(0, t);
  a.finished(1, t);
  // (Within 1 ns an iteration: the accounting adds the same kernels in another order, and the
  // second asks the cost model nothing new: see decodes_alone_s.)
  EXPECT_NEAR(a.of(0)[LatencyPart::kDecode], own_total, 2);
  EXPECT_NEAR(a.of(0)[LatencyPart::kStall], stall_total, 2);
  EXPECT_EQ(a.of(1)[LatencyPart::kStall], a.of(0)[LatencyPart::kStall]);
  EXPECT_EQ(a.of(2)[LatencyPart::kQueueing], ms(20));
}

// A fast-forwarded run of identical decode iterations, one left-out request beside it, gives
// the same nanoseconds as the iterations one by one.
TEST(LatencyAccounting, AFastForwardedRunEqualsItsIterationsOneByOne) {
  LatencyBreakdown stepped[2], run[2];
  for (bool fast : {false, true}) {
    Harness h(2);
    LatencyAccounting& a = h.accounting;
    a.arrived(0, at_ms(0));
    a.arrived(1, at_ms(0));
    SimTime t = h.iteration(0, at_ms(0), {{0, false, 0, 10}, {1, false, 0, 12}}, cost_of(10, 1), {0, 1});
    // R1 is left out of four decode iterations of R0 (of 7.5 ms, 0.25 of it overhead).
    if (fast) {
      t = h.iteration(0, t, {{0, true, 10, 1}}, cost_of(7.5, 0.25), {}, 0, /*repeats=*/3);
    } else {
      for (int k = 0; k < 4; ++k) t = h.iteration(0, t, {{0, true, 10 + k, 1}}, cost_of(7.5, 0.25));
    }
    t = h.iteration(0, t, {{0, true, 14, 1}, {1, true, 12, 1}}, cost_of(8, 0.5));
    a.finished(0, t);
    a.finished(1, t);
    (fast ? run : stepped)[0] = a.of(0);
    (fast ? run : stepped)[1] = a.of(1);
  }
  EXPECT_EQ(stepped[0], run[0]);
  EXPECT_EQ(stepped[1], run[1]);
  EXPECT_EQ(run[1][LatencyPart::kStall], ms(30));  // left out of all four
  EXPECT_EQ(run[0][LatencyPart::kDecode], ms(4 * 7.25 + 7.5));
}

// Disaggregation's path: prefilled on replica 0 until 10 ms, handed off, its KV lands on replica
// 1 at 14 ms, whose next iteration (from 20 ms) runs it: 10 ms of kv_transfer.
TEST(LatencyAccounting, AHandOffWaitsInKvTransferUntilTheDecodeReplicaRunsIt) {
  Harness h(1, 2);
  LatencyAccounting& a = h.accounting;
  a.arrived(0, at_ms(0));
  SimTime t = h.iteration(0, at_ms(0), {{0, false, 0, 100}}, cost_of(10, 1), {0});
  a.kv_transfer_started(0, t);
  a.kv_landed(0, 1);
  t = h.iteration(1, at_ms(20), {{0, true, 100, 1}}, cost_of(10, 1));
  a.finished(0, t);
  EXPECT_EQ(a.of(0)[LatencyPart::kKvTransfer], ms(10));
  EXPECT_EQ(a.of(0)[LatencyPart::kPrefill], ms(9));
  EXPECT_EQ(a.of(0)[LatencyPart::kDecode], ms(9));
  EXPECT_EQ(a.of(0).total_ns(), ms(30));
}

TEST(LatencyBreakdownSummary, SharesOfAllRequestsAndOfTheSlowestOnePercent) {
  // 200 requests: 197 of 1 s (0.9 decode, 0.1 queueing), three of 10 s (8 queueing, 2 decode):
  // the nearest-rank p99 (the 198th of 200) is 10 s, so the three are the p99 requests.
  std::vector<RequestRecord> records(200);
  for (size_t i = 0; i < records.size(); ++i) {
    RequestRecord& r = records[i];
    r.state = RequestState::kFinished;
    const bool slow = i == 17 || i == 150 || i == 199;
    r.finished = SimTime::from_seconds(slow ? 10 : 1);
    r.breakdown[LatencyPart::kQueueing] = SimTime::from_seconds(slow ? 8 : 0.1).ns();
    r.breakdown[LatencyPart::kDecode] = SimTime::from_seconds(slow ? 2 : 0.9).ns();
  }
  records.push_back(RequestRecord{});  // a rejected one counts nowhere
  records.back().state = RequestState::kRejected;
  WeightedSamples e2e;
  for (const RequestRecord& r : records) {
    if (r.completed()) e2e.add(r.e2e_s());
  }
  const LatencyBreakdownSummary s = summarize_latency_breakdown(records, e2e.percentile(0.99));
  EXPECT_EQ(s.p99_requests, 3);
  EXPECT_DOUBLE_EQ(s[LatencyPart::kQueueing].share_of_p99, 0.8);
  EXPECT_DOUBLE_EQ(s[LatencyPart::kDecode].share_of_p99, 0.2);
  EXPECT_DOUBLE_EQ(s[LatencyPart::kQueueing].share, (197 * 0.1 + 24) / (197 + 30.0));
  EXPECT_DOUBLE_EQ(s[LatencyPart::kQueueing].mean_s, (197 * 0.1 + 24) / 200);
  EXPECT_DOUBLE_EQ(s[LatencyPart::kQueueing].p99_s, 8);
  EXPECT_DOUBLE_EQ(s[LatencyPart::kDecode].p99_s, 2);
  EXPECT_EQ(s[LatencyPart::kStall].share, 0);
}

}  // namespace
}  // namespace batchsim
