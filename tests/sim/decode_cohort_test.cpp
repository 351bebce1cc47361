// The decode cohort (sim/decode_cohort.h) against the per-request bookkeeping it replaces: a
// naive model steps every member one by one (its tokens, its gap, its largest gap), and at every
// step the cohort must say the same blocks, contexts, remaining tokens, gaps and finishers, and
// every member that leaves must come out with exactly the naive progress. Members join and leave
// at random, steps come in runs (fast-forward's repeats), for a power-of-two and another block
// size. The whole simulation with and without the cohort is compared in
// tests/policies/fast_forward_test.cpp.
#include "sim/decode_cohort.h"

#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace batchsim {
namespace {

struct Naive {
  bool member = false;
  int64_t seq = 0;  // join order
  int32_t output = 0;
  RequestProgress p;  // stepped one by one
};

void expect_progress(const RequestProgress& got, const RequestProgress& want, RequestId id) {
  EXPECT_EQ(got.computed_tokens, want.computed_tokens) << id;
  EXPECT_EQ(got.generated_tokens, want.generated_tokens) << id;
  EXPECT_EQ(got.last_token, want.last_token) << id;
  EXPECT_EQ(got.max_tbt, want.max_tbt) << id;
}

void run_random_cohort(int32_t block_size, uint32_t seed) {
  constexpr int kIds = 96;
  std::vector<RequestProgress> progress(kIds);
  std::vector<Naive> naive(kIds);
  DecodeCohort cohort;
  cohort.attach(&progress);
  cohort.enable(block_size);
  std::mt19937 rng(seed);
  const auto uniform = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  SimTime now = SimTime::from_ns(1000);
  int64_t next_seq = 0, finished = 0, left = 0;
  for (int iteration = 0; iteration < 4000; ++iteration) {
    // Scheduling: some members leave (a preemption), some plain decodes join.
    for (RequestId id = 0; id < kIds; ++id) {
      Naive& n = naive[static_cast<size_t>(id)];
      if (n.member && uniform(0, 99) == 0) {
        cohort.leave(id);
        expect_progress(progress[static_cast<size_t>(id)], n.p, id);
        n.member = false;
        ++left;
      } else if (!n.member && uniform(0, 9) == 0) {
        // A decode whose last token came at some earlier time (its prefill, say).
        RequestProgress p;
        p.generated_tokens = static_cast<int32_t>(uniform(1, 40));
        p.computed_tokens = uniform(1, 300) + p.generated_tokens - 1;
        p.last_token = now - SimTime::from_ns(uniform(0, 5000));
        p.max_tbt = SimTime::from_ns(uniform(0, 3000));
        p.first_token = SimTime::from_ns(1);
        progress[static_cast<size_t>(id)] = p;
        n = Naive{true, next_seq++, static_cast<int32_t>(p.generated_tokens + uniform(1, 60)), p};
        cohort.join(id, n.output);
      }
    }
    if (cohort.size() == 0) continue;
    // The step's blocks and contexts, as each member would grow.
    int64_t blocks = 0, sum = 0, max = 0, remaining = INT64_MAX, members = 0;
    for (RequestId id = 0; id < kIds; ++id) {
      const Naive& n = naive[static_cast<size_t>(id)];
      if (!n.member) continue;
      ++members;
      const bool needs = n.p.computed_tokens % block_size == 0;
      blocks += needs ? 1 : 0;
      EXPECT_EQ(cohort.needs_block_next_step(id), needs) << id;
      sum += n.p.computed_tokens + 1;
      max = std::max(max, n.p.computed_tokens + 1);
      remaining = std::min<int64_t>(remaining, n.output - n.p.generated_tokens);
    }
    ASSERT_EQ(cohort.size(), members);
    EXPECT_EQ(cohort.blocks_next_step(), blocks);
    EXPECT_EQ(cohort.next_context_sum(), sum);
    EXPECT_EQ(cohort.next_context_max(), max);
    cohort.grow();
    EXPECT_EQ(cohort.min_remaining(), remaining);
    // A run: the first step and repeats while nobody finishes before the last.
    int64_t repeats = 0;
    while (repeats + 1 < remaining && uniform(0, 2) == 0) {
      cohort.grow();
      ++repeats;
    }
    ASSERT_EQ(cohort.steps_in_flight(), 1 + repeats);
    // Every other run's repeats end in one call, as a DP replica's ranks end theirs.
    const bool in_bulk = iteration % 2 == 1;
    std::vector<SimTime> run_gaps;
    std::vector<int64_t> joiner_gaps;
    for (int64_t k = 0; k <= repeats; ++k) {
      // Gaps repeat often (runs of equal iterations) and shrink or grow.
      const SimTime gap_k = SimTime::from_ns(uniform(1, 4) * 100);
      now += gap_k;
      int64_t common_count = 0;
      SimTime common_want = SimTime::max();
      for (RequestId id = 0; id < kIds; ++id) {
        Naive& n = naive[static_cast<size_t>(id)];
        if (!n.member) continue;
        const SimTime gap = now - n.p.last_token;
        if (k == 0 && std::find(cohort.joiners().begin(), cohort.joiners().end(), id) != cohort.joiners().end()) {
          joiner_gaps.push_back(gap.ns());
        } else {
          ++common_count;
          if (common_want != SimTime::max()) {
            EXPECT_EQ(gap, common_want) << "members that stepped before share a gap";
          }
          common_want = gap;
        }
        n.p.max_tbt = std::max(n.p.max_tbt, gap);
        n.p.last_token = now;
        ++n.p.generated_tokens;
        ++n.p.computed_tokens;
      }
      if (k == 0) {
        EXPECT_EQ(cohort.continuing(), common_count);
      }
      if (in_bulk && k > 0) {
        run_gaps.push_back(gap_k);
        continue;
      }
      const SimTime common = cohort.step_ended(now);
      if (common_count > 0) {
        EXPECT_EQ(common, common_want);
      }
      if (k == 0) {
        std::vector<int64_t> got;
        cohort.joiners_ended(now, [&got](RequestId, SimTime g) { got.push_back(g.ns()); });
        EXPECT_EQ(got, joiner_gaps);
        EXPECT_TRUE(cohort.joiners().empty());
      }
    }
    if (in_bulk && repeats > 0) {
      std::vector<std::pair<int64_t, SimTime>> maxima;
      repeat_gap_maxima(run_gaps, maxima);
      cohort.steps_ended(now, repeats, maxima);
    }
    ASSERT_EQ(cohort.steps_in_flight(), 0);
    // The finishers, in join order, with their exact progress.
    std::vector<std::pair<int64_t, RequestId>> want;
    for (RequestId id = 0; id < kIds; ++id) {
      const Naive& n = naive[static_cast<size_t>(id)];
      if (n.member && n.p.generated_tokens == n.output) want.emplace_back(n.seq, id);
    }
    std::sort(want.begin(), want.end());
    std::vector<RequestId> got;
    cohort.pop_finished([&](RequestId id) {
      got.push_back(id);
      expect_progress(progress[static_cast<size_t>(id)], naive[static_cast<size_t>(id)].p, id);
      EXPECT_FALSE(cohort.member(id));
      naive[static_cast<size_t>(id)].member = false;
    });
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i].second);
    finished += static_cast<int64_t>(got.size());
  }
  // Everyone leaves with the naive progress.
  for (RequestId id = 0; id < kIds; ++id) {
    if (!naive[static_cast<size_t>(id)].member) continue;
    cohort.leave(id);
    expect_progress(progress[static_cast<size_t>(id)], naive[static_cast<size_t>(id)].p, id);
  }
  EXPECT_EQ(cohort.size(), 0);
  EXPECT_GT(finished, 500);  // the run exercised finishes ...
  EXPECT_GT(left, 100);      // ... and leaves
}

TEST(DecodeCohort, EqualsSteppingEachMemberWithPowerOfTwoBlocks) { run_random_cohort(16, 1); }
TEST(DecodeCohort, EqualsSteppingEachMemberWithOtherBlocks) { run_random_cohort(5, 2); }

// The suffix maxima of a run's gaps: each entry larger than every later gap, by hand.
TEST(DecodeCohort, RepeatGapMaximaKeepEachGapLargerThanAllLaterOnes) {
  const auto ns = [](std::initializer_list<int64_t> v) {
    std::vector<SimTime> out;
    for (const int64_t x : v) out.push_back(SimTime::from_ns(x));
    return out;
  };
  std::vector<std::pair<int64_t, SimTime>> m;
  repeat_gap_maxima(ns({3, 5, 5, 2, 4, 1}), m);
  const std::vector<std::pair<int64_t, SimTime>> want{
      {2, SimTime::from_ns(5)}, {4, SimTime::from_ns(4)}, {5, SimTime::from_ns(1)}};
  EXPECT_EQ(m, want);
  repeat_gap_maxima(ns({1, 2, 3}), m);  // growing gaps (a run whose contexts grow): the last alone
  EXPECT_EQ(m, (std::vector<std::pair<int64_t, SimTime>>{{2, SimTime::from_ns(3)}}));
  repeat_gap_maxima({}, m);
  EXPECT_TRUE(m.empty());
}

TEST(DecodeCohort, RefusesWhatWouldLoseTrack) {
  std::vector<RequestProgress> progress(4);
  DecodeCohort cohort;
  EXPECT_THROW(cohort.enable(16), std::logic_error);  // the simulation attaches it first
  cohort.attach(&progress);
  EXPECT_THROW(cohort.enable(0), std::logic_error);
  cohort.enable(16);
  progress[1].computed_tokens = 10;
  progress[1].generated_tokens = 1;
  cohort.join(1, 5);
  EXPECT_THROW(cohort.leave(2), std::logic_error);  // no member
  cohort.grow();
  EXPECT_THROW(cohort.leave(1), std::logic_error);  // a step in flight
  cohort.step_ended(SimTime::from_ns(10));
  EXPECT_THROW(cohort.step_ended(SimTime::from_ns(20)), std::logic_error);  // not taken
  // A run's steps: no more than were taken, and maxima that end with the run's last step.
  cohort.grow();
  cohort.grow();
  const std::vector<std::pair<int64_t, SimTime>> two{{1, SimTime::from_ns(5)}};
  EXPECT_THROW(cohort.steps_ended(SimTime::from_ns(30), 3, two), std::logic_error);
  EXPECT_THROW(cohort.steps_ended(SimTime::from_ns(30), 2, {}), std::logic_error);
  EXPECT_THROW(cohort.steps_ended(SimTime::from_ns(30), 1, two), std::logic_error);
  cohort.steps_ended(SimTime::from_ns(30), 2, two);
  EXPECT_EQ(cohort.steps_in_flight(), 0);
}

}  // namespace
}  // namespace batchsim
