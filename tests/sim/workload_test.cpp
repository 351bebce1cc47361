// Tests of the random generator, the samplers, spec parsing and synthetic workloads.
// Moment checks use 100k samples from fixed seeds; each tolerance is about 3-4 standard errors
// of the estimate (stated beside it), so a wrong formula fails while the seed is incidental.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hwmodel/base/error.h"
#include "hwmodel/base/random.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::user_error_of;

constexpr int kSamples = 100'000;

struct Moments {
  double mean = 0;
  double sd = 0;
  double cv() const { return sd / mean; }
};

Moments moments(const std::vector<double>& xs) {
  double sum = 0;
  for (double x : xs) sum += x;
  const double mean = sum / xs.size();
  double ss = 0;
  for (double x : xs) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / (xs.size() - 1))};
}

template <typename F>
std::vector<double> draw(F&& f, int n = kSamples) {
  std::vector<double> xs(n);
  for (double& x : xs) x = f();
  return xs;
}

// ---- generator ---------------------------------------------------------------------------------

TEST(Rng, SplitMix64MatchesReferenceOutputs) {
  // Published outputs of Vigna's splitmix64.c.
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xe220a8397b1dcdafULL);
  state = 1234567;
  EXPECT_EQ(splitmix64(state), 6457827717110365317ULL);
  EXPECT_EQ(splitmix64(state), 3203168211198807973ULL);
}

TEST(Rng, Xoshiro256StarStarMatchesReferenceOutputs) {
  // xoshiro256starstar.c from state {1, 2, 3, 4}.
  Rng rng = Rng::from_state({1, 2, 3, 4});
  EXPECT_EQ(rng.next_u64(), 11520ULL);
  EXPECT_EQ(rng.next_u64(), 0ULL);
  EXPECT_EQ(rng.next_u64(), 1509978240ULL);
  EXPECT_EQ(rng.next_u64(), 1215971899390074240ULL);
}

TEST(Rng, SeedingIsFourSplitMixOutputs) {
  uint64_t sm = 42;
  std::array<uint64_t, 4> state{};
  for (uint64_t& w : state) w = splitmix64(sm);
  Rng seeded(42);
  Rng reference = Rng::from_state(state);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seeded.next_u64(), reference.next_u64());
}

TEST(Rng, Uniform01IsTop53BitsAndInUnitInterval) {
  Rng a(7);
  Rng b(7);
  for (int i = 0; i < 1000; ++i) {
    const double u = a.uniform01();
    EXPECT_EQ(u, static_cast<double>(b.next_u64() >> 11) / 9007199254740992.0);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  Rng c(8);
  const Moments m = moments(draw([&] { return c.uniform01(); }));
  EXPECT_NEAR(m.mean, 0.5, 0.003);  // se 0.0009
  EXPECT_NEAR(m.sd, std::sqrt(1.0 / 12), 0.002);
}

TEST(Rng, StreamsAreJumpsAndDiffer) {
  Rng jumped(5);
  jumped.jump();
  Rng stream1 = Rng::for_stream(5, 1);
  Rng stream0 = Rng::for_stream(5, 0);
  Rng plain(5);
  Rng stream2 = Rng::for_stream(5, 2);
  int equal_01 = 0, equal_12 = 0;
  for (int i = 0; i < 10; ++i) {
    const uint64_t s0 = stream0.next_u64();
    const uint64_t s1 = stream1.next_u64();
    EXPECT_EQ(s1, jumped.next_u64());
    EXPECT_EQ(s0, plain.next_u64());
    equal_01 += s0 == s1;
    equal_12 += s1 == stream2.next_u64();
  }
  EXPECT_EQ(equal_01, 0);
  EXPECT_EQ(equal_12, 0);
}

// ---- samplers ------------------------------------------------------------------------------

TEST(Samplers, SampleBelowIsUniformAndInRange) {
  Rng rng(11);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70'000; ++i) {
    const uint64_t k = sample_below(rng, 7);
    ASSERT_LT(k, 7u);
    ++counts[k];
  }
  for (int c : counts) EXPECT_NEAR(c, 10'000, 400);  // sd ~93
  EXPECT_EQ(sample_below(rng, 1), 0u);
}

TEST(Samplers, ExponentialMeanAndCv) {
  Rng rng(12);
  const Moments m = moments(draw([&] { return sample_exponential(rng, 2.5); }));
  EXPECT_NEAR(m.mean, 2.5, 0.03);  // se 0.008
  EXPECT_NEAR(m.cv(), 1.0, 0.02);  // se ~0.0045
}

TEST(Samplers, StandardNormalMoments) {
  Rng rng(13);
  const std::vector<double> xs = draw([&] { return sample_standard_normal(rng); });
  const Moments m = moments(xs);
  EXPECT_NEAR(m.mean, 0.0, 0.012);  // se 0.0032
  EXPECT_NEAR(m.sd, 1.0, 0.01);     // se 0.0022
  double within_1sd = 0;
  for (double x : xs) within_1sd += std::abs(x) < 1.0;
  EXPECT_NEAR(within_1sd / xs.size(), 0.6827, 0.006);  // se 0.0015
}

TEST(Samplers, GammaMeanAndVarianceForSmallAndLargeShapes) {
  // shape < 1 takes the U^(1/k) boost branch; shape >= 1 the Marsaglia–Tsang loop.
  for (const double shape : {0.25, 1.0, 4.0, 30.0}) {
    Rng rng(14);
    const double scale = 3.0;
    const Moments m = moments(draw([&] { return sample_gamma(rng, shape, scale); }));
    const double mean = shape * scale;
    const double sd = std::sqrt(shape) * scale;
    EXPECT_NEAR(m.mean, mean, 4 * sd / std::sqrt(kSamples)) << "shape " << shape;
    EXPECT_NEAR(m.sd / sd, 1.0, 0.03) << "shape " << shape;
  }
}

TEST(Samplers, TruncatedExponentialNeverExceedsCapAndHasTruncatedMean) {
  Rng rng(15);
  const double mean = 100, cap = 150;
  const std::vector<double> xs = draw([&] { return sample_truncated_exponential(rng, mean, cap); });
  EXPECT_LE(*std::max_element(xs.begin(), xs.end()), cap);
  // E[X | X <= c] = mu - c e^{-c/mu} / (1 - e^{-c/mu}) = 56.92; clamping instead of redrawing
  // would give mu (1 - e^{-c/mu}) = 77.69.
  const double expected = mean - cap * std::exp(-cap / mean) / (1 - std::exp(-cap / mean));
  EXPECT_NEAR(moments(xs).mean, expected, 0.5);  // sd ~41, se 0.13
}

// ---- length distributions ----------------------------------------------------------------

std::vector<double> sample_lengths(std::string_view spec, uint64_t seed = 21) {
  const auto dist = parse_length_distribution(spec, "--output-len");
  Rng rng(seed);
  return draw([&] { return static_cast<double>(dist->sample(rng)); });
}

TEST(LengthDistribution, Fixed) {
  for (double x : sample_lengths("fixed:37")) ASSERT_EQ(x, 37);
}

TEST(LengthDistribution, UniformIsInclusiveAndFlat) {
  std::map<int, int> counts;
  for (double x : sample_lengths("uniform:5:10")) ++counts[static_cast<int>(x)];
  ASSERT_EQ(counts.size(), 6u);
  EXPECT_EQ(counts.begin()->first, 5);
  EXPECT_EQ(counts.rbegin()->first, 10);
  for (const auto& [value, count] : counts) {
    EXPECT_NEAR(count / double(kSamples), 1.0 / 6, 0.005) << value;  // se 0.0012
  }
  for (double x : sample_lengths("uniform:3:3")) ASSERT_EQ(x, 3);
}

TEST(LengthDistribution, CappedExponentialRedrawsAboveCap) {
  const std::vector<double> xs = sample_lengths("capexp:100:150");
  EXPECT_EQ(*std::max_element(xs.begin(), xs.end()), 150);
  EXPECT_GE(*std::min_element(xs.begin(), xs.end()), 1);
  // Truncated mean 56.92 (see the sampler test); rounding to the nearest integer adds < 0.05.
  EXPECT_NEAR(moments(xs).mean, 56.92, 0.5);

  // The Anyscale benchmark's setting: the cap far above the mean barely moves it.
  const Moments anyscale = moments(sample_lengths("capexp:128:1536"));
  EXPECT_NEAR(anyscale.mean, 128.0, 1.6);  // se 0.4
  EXPECT_NEAR(anyscale.cv(), 1.0, 0.02);
}

TEST(LengthDistribution, LognormalMedianAndSigma) {
  std::vector<double> xs = sample_lengths("lognormal:1000:0.8");
  std::vector<double> logs;
  for (double x : xs) logs.push_back(std::log(x));
  const Moments log_moments = moments(logs);
  EXPECT_NEAR(log_moments.sd, 0.8, 0.01);  // se 0.0018
  std::nth_element(xs.begin(), xs.begin() + xs.size() / 2, xs.end());
  // se of the median: 1000 * 0.8 * sqrt(2 pi) / (2 sqrt n) = 3.2 tokens.
  EXPECT_NEAR(xs[xs.size() / 2], 1000.0, 13.0);
}

TEST(LengthDistribution, LognormalSmallMedianNeverBelowOne) {
  const std::vector<double> xs = sample_lengths("lognormal:2:2");
  EXPECT_EQ(*std::min_element(xs.begin(), xs.end()), 1);
}

TEST(LengthDistribution, DescribeRoundTrips) {
  for (const char* spec : {"fixed:512", "uniform:1:2048", "capexp:128:1536", "lognormal:1020:0.75"}) {
    EXPECT_EQ(parse_length_distribution(spec, "--prompt-len")->describe(), spec);
  }
}

// ---- arrival processes ---------------------------------------------------------------------

std::vector<double> sample_gaps_s(std::string_view spec, uint64_t seed = 31) {
  const auto process = parse_arrival_process(spec, "--arrival");
  Rng rng(seed);
  return draw([&] { return process->next_gap(rng).seconds(); });
}

TEST(ArrivalProcess, OfflineGapsAreZero) {
  for (double gap : sample_gaps_s("offline")) ASSERT_EQ(gap, 0.0);
}

TEST(ArrivalProcess, PoissonRateAndCv) {
  const Moments m = moments(sample_gaps_s("poisson:8"));
  EXPECT_NEAR(1.0 / m.mean, 8.0, 0.1);  // se of the rate 0.025
  EXPECT_NEAR(m.cv(), 1.0, 0.02);       // se 0.0045
}

TEST(ArrivalProcess, GammaRateAndCv) {
  // se of the sample CV: ~0.0045 at CV 1, ~0.016 at CV 3 (heavier tails).
  const struct {
    const char* spec;
    double rate;
    double cv;
    double cv_tolerance;
  } cases[] = {{"gamma:5:0.5", 5, 0.5, 0.01}, {"gamma:5:1", 5, 1.0, 0.02}, {"gamma:5:3", 5, 3.0, 0.08}};
  for (const auto& c : cases) {
    const Moments m = moments(sample_gaps_s(c.spec));
    EXPECT_NEAR(m.mean * c.rate, 1.0, 4 * c.cv / std::sqrt(kSamples)) << c.spec;
    EXPECT_NEAR(m.cv(), c.cv, c.cv_tolerance) << c.spec;
  }
}

TEST(ArrivalProcess, GapsAreWholeNanoseconds) {
  const auto process = parse_arrival_process("poisson:1000", "--arrival");
  Rng a(3);
  Rng b(3);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(process->next_gap(a).ns(), std::llround(sample_exponential(b, 1e-3) * 1e9));
  }
}

TEST(ArrivalProcess, TinyRateIsAUserErrorNotAnOverflow) {
  const auto process = parse_arrival_process("poisson:1e-12", "--arrival");
  Rng rng(1);
  EXPECT_THROW(process->next_gap(rng), UserError);
}

TEST(ArrivalProcess, DescribeRoundTrips) {
  for (const char* spec : {"offline", "poisson:2.5", "gamma:4:2"}) {
    EXPECT_EQ(parse_arrival_process(spec, "--arrival")->describe(), spec);
  }
}

// ---- parse errors ----------------------------------------------------------------------------

TEST(SpecParsing, EveryMalformedLengthSpecNamesOptionSpecAndProblem) {
  const struct {
    const char* spec;
    const char* problem;
  } cases[] = {
      {"", "unknown length distribution \"\""},
      {"poisson:5",
       "unknown length distribution \"poisson\"; expected fixed:N, uniform:A:B, "
       "capexp:MEAN:CAP or lognormal:MEDIAN:SIGMA"},
      {"fixed", "expected fixed:N (1 parameter after \"fixed:\")"},
      {"fixed:1:2", "expected fixed:N"},
      {"fixed:", "N must be an integer >= 1"},
      {"fixed:0", "N must be an integer >= 1"},
      {"fixed:-3", "N must be an integer >= 1"},
      {"fixed:12.5", "N must be an integer >= 1"},
      {"fixed:abc", "N must be an integer >= 1"},
      {"fixed: 5", "N must be an integer >= 1"},
      {"fixed:99999999999", "N must be at most 2147483647"},
      {"uniform:5", "expected uniform:A:B (2 parameters after \"uniform:\")"},
      {"uniform:0:5", "A must be an integer >= 1"},
      {"uniform:9:3", "B must be an integer >= A"},
      {"uniform:1:x", "B must be an integer >= A"},
      {"capexp:128", "expected capexp:MEAN:CAP"},
      {"capexp:0:100", "MEAN must be a positive number"},
      {"capexp:-5:100", "MEAN must be a positive number"},
      {"capexp:nan:100", "MEAN must be a positive number"},
      {"capexp:128:0", "CAP must be an integer >= 1"},
      {"capexp:128:1536.5", "CAP must be an integer >= 1"},
      {"lognormal:1000", "expected lognormal:MEDIAN:SIGMA"},
      {"lognormal:0:1", "MEDIAN must be a positive number"},
      {"lognormal:1000:-1", "SIGMA must be a number >= 0"},
      {"lognormal:1000:inf", "SIGMA must be a number >= 0"},
  };
  for (const auto& c : cases) {
    const std::string message = user_error_of([&] { parse_length_distribution(c.spec, "--prompt-len"); });
    EXPECT_EQ(message.rfind(std::string("--prompt-len: \"") + c.spec + "\": ", 0), 0u) << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << c.spec << " -> " << message;
  }
}

TEST(SpecParsing, EveryMalformedArrivalSpecNamesOptionSpecAndProblem) {
  const struct {
    const char* spec;
    const char* problem;
  } cases[] = {
      {"poisson:abc", "RATE must be a positive number"},
      {"poisson:0", "RATE must be a positive number"},
      {"poisson:-2", "RATE must be a positive number"},
      {"poisson:", "RATE must be a positive number"},
      {"poisson", "expected poisson:RATE (1 parameter after \"poisson:\")"},
      {"poisson:1:2", "expected poisson:RATE"},
      {"gamma:5", "expected gamma:RATE:CV"},
      {"gamma:5:0", "CV must be a positive number"},
      {"gamma:x:1", "RATE must be a positive number"},
      {"offline:3", "expected offline (0 parameters after \"offline:\")"},
      {"Poisson:5",
       "unknown arrival process \"Poisson\"; expected offline, poisson:RATE, "
       "gamma:RATE:CV or trace"},
      {"trace", "\"trace\" replays a trace's own timestamps; give a trace file (--trace FILE)"},
  };
  for (const auto& c : cases) {
    const std::string message = user_error_of([&] { parse_arrival_process(c.spec, "--arrival"); });
    EXPECT_EQ(message.rfind(std::string("--arrival: \"") + c.spec + "\": ", 0), 0u) << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << c.spec << " -> " << message;
  }
  EXPECT_EQ(user_error_of([] { parse_arrival_process("poisson:abc", "--arrival"); }),
            "--arrival: \"poisson:abc\": RATE must be a positive number");
}

TEST(SpecParsing, SyntaxListsCoverEveryKind) {
  std::vector<std::string> arrivals, lengths;
  for (const SpecSyntax& s : arrival_process_syntaxes()) arrivals.emplace_back(s.syntax);
  for (const SpecSyntax& s : length_distribution_syntaxes()) lengths.emplace_back(s.syntax);
  EXPECT_EQ(arrivals, (std::vector<std::string>{"offline", "poisson:RATE", "gamma:RATE:CV", "trace"}));
  EXPECT_EQ(lengths, (std::vector<std::string>{"fixed:N", "uniform:A:B", "capexp:MEAN:CAP", "lognormal:MEDIAN:SIGMA"}));
  std::vector<std::string> prefixes;
  for (const SpecSyntax& s : prefix_syntaxes()) prefixes.emplace_back(s.syntax);
  EXPECT_EQ(prefixes, (std::vector<std::string>{"shared:TOKENS", "groups:TOKENS:N"}));
  // The unknown-kind message lists them.
  EXPECT_NE(
      user_error_of([] { parse_prefix_spec("sys:1", "--prefix"); }).find("expected shared:TOKENS or groups:TOKENS:N"),
      std::string::npos);
}

// ---- synthetic workloads ---------------------------------------------------------------------

WorkloadSpec poisson_spec(uint64_t seed) {
  WorkloadSpec spec;
  spec.arrival = "poisson:4";
  spec.prompt_len = "lognormal:1000:0.7";
  spec.output_len = "capexp:128:1536";
  spec.num_requests = 2000;
  spec.seed = seed;
  return spec;
}

bool same_requests(const Workload& a, const Workload& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].arrival != b[i].arrival || a[i].prompt_tokens != b[i].prompt_tokens ||
        a[i].output_tokens != b[i].output_tokens) {
      return false;
    }
  }
  return true;
}

TEST(MakeWorkload, SameSeedSameWorkloadDifferentSeedDifferent) {
  const Workload a = make_workload(poisson_spec(1));
  const Workload b = make_workload(poisson_spec(1));
  const Workload c = make_workload(poisson_spec(2));
  ASSERT_EQ(a.size(), 2000u);
  EXPECT_TRUE(same_requests(a, b));
  EXPECT_FALSE(same_requests(a, c));
  int same_arrivals = 0, same_prompts = 0;
  for (size_t i = 1; i < a.size(); ++i) {
    same_arrivals += a[i].arrival == c[i].arrival;
    same_prompts += a[i].prompt_tokens == c[i].prompt_tokens;
  }
  EXPECT_EQ(same_arrivals, 0);
  EXPECT_LT(same_prompts, 50);  // lognormal:1000:0.7 rarely repeats a value at the same index
}

TEST(MakeWorkload, IdsDenseArrivalsSortedFirstAtZeroRateAsAsked) {
  WorkloadSpec spec = poisson_spec(9);
  spec.num_requests = 20'000;
  const Workload w = make_workload(spec);
  EXPECT_EQ(w.front().arrival, SimTime::zero());
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(w[i].id, static_cast<RequestId>(i));
    if (i > 0) {
      ASSERT_GE(w[i].arrival, w[i - 1].arrival);
    }
    ASSERT_GE(w[i].prompt_tokens, 1);
    ASSERT_GE(w[i].output_tokens, 1);
  }
  // 19,999 gaps at 4/s: 4999.75 s expected, sd 35 s.
  EXPECT_NEAR(w.back().arrival.seconds(), 19'999 / 4.0, 140.0);
}

TEST(MakeWorkload, StreamsAreIndependentPerQuantity) {
  const Workload base = make_workload(poisson_spec(5));
  WorkloadSpec other = poisson_spec(5);
  other.output_len = "uniform:1:10";  // a different output distribution...
  const Workload changed_output = make_workload(other);
  other = poisson_spec(5);
  other.arrival = "gamma:4:3";  // ...or a different arrival process
  const Workload changed_arrival = make_workload(other);
  for (size_t i = 0; i < base.size(); ++i) {
    // ...leaves the other quantities' samples exactly as they were.
    ASSERT_EQ(base[i].arrival, changed_output[i].arrival);
    ASSERT_EQ(base[i].prompt_tokens, changed_output[i].prompt_tokens);
    ASSERT_LE(changed_output[i].output_tokens, 10);
    ASSERT_EQ(base[i].prompt_tokens, changed_arrival[i].prompt_tokens);
    ASSERT_EQ(base[i].output_tokens, changed_arrival[i].output_tokens);
  }
}

TEST(MakeWorkload, OfflineIsTheDefaultAndPutsEveryoneAtZero) {
  WorkloadSpec spec;
  spec.num_requests = 10;
  const BuiltWorkload built = build_workload(spec);
  ASSERT_EQ(built.requests.size(), 10u);
  for (const Request& r : built.requests) {
    EXPECT_EQ(r.arrival, SimTime::zero());
    EXPECT_EQ(r.prompt_tokens, 512);
    EXPECT_EQ(r.output_tokens, 128);
  }
  EXPECT_TRUE(built.warnings.empty());
  EXPECT_TRUE(built.prefix_blocks.empty());
  EXPECT_EQ(built.description, "10 requests: offline arrivals, prompt fixed:512, output fixed:128, seed 0");
}

TEST(MakeWorkload, SpecErrorsNameTheOption) {
  const auto error_for = [](auto&& edit) {
    WorkloadSpec spec;
    spec.num_requests = 10;
    edit(spec);
    return user_error_of([&] { make_workload(spec); });
  };
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.num_requests = 0; }),
            "--num-requests: a synthetic workload needs --num-requests > 0 (or --trace FILE)");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.num_requests = -1; }), "--num-requests: must be >= 0, got -1");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.arrival = "trace"; }),
            "--arrival: \"trace\": \"trace\" replays a trace's own timestamps; give a trace file "
            "(--trace FILE)");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.trace_speedup = 0; }), "--trace-speedup: must be a number > 0, got 0");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.trace_speedup = 2; }),
            "--trace-speedup: 2 scales trace timestamps, but arrivals come from --arrival offline");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.output_len = "fixed:0"; }),
            "--output-len: \"fixed:0\": N must be an integer >= 1");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.prompt_len = "uniform:2:1"; }),
            "--prompt-len: \"uniform:2:1\": B must be an integer >= A");
  EXPECT_EQ(error_for([](WorkloadSpec& s) { s.arrival = "gamma:1"; }),
            "--arrival: \"gamma:1\": expected gamma:RATE:CV (2 parameters after \"gamma:\")");
}

WorkloadSpec prefix_spec(const std::string& prefix) {
  WorkloadSpec spec;
  spec.arrival = "poisson:4";
  spec.prompt_len = "uniform:10:300";
  spec.output_len = "uniform:1:50";
  spec.num_requests = 200;
  spec.seed = 9;
  spec.prefix = prefix;
  return spec;
}

TEST(WorkloadPrefix, SharedAddsTheSystemPromptToEverySampledPromptAndChangesNothingElse) {
  const BuiltWorkload plain = build_workload(prefix_spec(""));
  const BuiltWorkload shared = build_workload(prefix_spec("shared:1000"));
  EXPECT_TRUE(plain.prefix_blocks.empty());
  ASSERT_EQ(shared.requests.size(), plain.requests.size());
  ASSERT_FALSE(shared.prefix_blocks.empty());
  EXPECT_EQ(shared.prefix_blocks.block_tokens, 1000);
  for (size_t i = 0; i < plain.requests.size(); ++i) {
    const auto id = static_cast<RequestId>(i);
    EXPECT_EQ(shared.requests[i].prompt_tokens, plain.requests[i].prompt_tokens + 1000);
    EXPECT_EQ(shared.requests[i].output_tokens, plain.requests[i].output_tokens);
    EXPECT_EQ(shared.requests[i].arrival, plain.requests[i].arrival);
    ASSERT_EQ(shared.prefix_blocks.of(id).size(), 1u);
    EXPECT_EQ(shared.prefix_blocks.of(id)[0], shared.prefix_blocks.of(0)[0]);  // one prefix
  }
  EXPECT_NE(shared.description.find("prefix shared:1000"), std::string::npos) << shared.description;
}

TEST(WorkloadPrefix, GroupsDrawEachRequestsPrefixFromItsOwnStream) {
  const BuiltWorkload plain = build_workload(prefix_spec(""));
  const BuiltWorkload groups = build_workload(prefix_spec("groups:64:5"));
  std::set<uint64_t> seen;
  for (size_t i = 0; i < groups.requests.size(); ++i) {
    EXPECT_EQ(groups.requests[i].prompt_tokens, plain.requests[i].prompt_tokens + 64);
    EXPECT_EQ(groups.requests[i].arrival, plain.requests[i].arrival);
    seen.insert(groups.prefix_blocks.of(static_cast<RequestId>(i))[0]);
  }
  EXPECT_EQ(seen.size(), 5u);  // 200 uniform draws among 5 reach all 5
  EXPECT_LT(*seen.rbegin(), 5u);
  // Same spec and seed, same draws.
  EXPECT_EQ(build_workload(prefix_spec("groups:64:5")).prefix_blocks.hashes, groups.prefix_blocks.hashes);
}

TEST(WorkloadPrefix, MalformedSpecsNameTheOption) {
  const auto error_for = [](const std::string& prefix) {
    return user_error_of([&] { build_workload(prefix_spec(prefix)); });
  };
  EXPECT_EQ(error_for("shared"), "--prefix: \"shared\": expected shared:TOKENS (1 parameter after \"shared:\")");
  EXPECT_EQ(error_for("shared:0"), "--prefix: \"shared:0\": TOKENS must be an integer >= 1");
  EXPECT_EQ(error_for("groups:100"),
            "--prefix: \"groups:100\": expected groups:TOKENS:N (2 parameters after \"groups:\")");
  EXPECT_EQ(error_for("groups:100:0"), "--prefix: \"groups:100:0\": N must be an integer >= 1");
  EXPECT_NE(error_for("system:100").find("--prefix: \"system:100\": unknown prefix"), std::string::npos);
  EXPECT_NE(error_for("shared:2147483647").find("--prefix: request 0 would have a prompt of"), std::string::npos);
}

WorkloadSpec think_spec(const std::string& think_time) {
  WorkloadSpec spec = prefix_spec("");
  spec.think_time = think_time;
  return spec;
}

TEST(WorkloadThinkTime, OneSamplePerRequestFromItsOwnStreamAndNothingElseChanges) {
  const BuiltWorkload plain = build_workload(think_spec(""));
  EXPECT_TRUE(plain.think_times.empty());
  const BuiltWorkload uniform = build_workload(think_spec("uniform:0.5:2"));
  ASSERT_EQ(uniform.think_times.size(), plain.requests.size());
  double sum = 0;
  for (size_t i = 0; i < plain.requests.size(); ++i) {
    EXPECT_EQ(uniform.requests[i].arrival, plain.requests[i].arrival);
    EXPECT_EQ(uniform.requests[i].prompt_tokens, plain.requests[i].prompt_tokens);
    EXPECT_EQ(uniform.requests[i].output_tokens, plain.requests[i].output_tokens);
    EXPECT_GE(uniform.think_times[i], SimTime::from_seconds(0.5));
    EXPECT_LE(uniform.think_times[i], SimTime::from_seconds(2));
    sum += uniform.think_times[i].seconds();
  }
  EXPECT_NEAR(sum / 200, 1.25, 0.1);  // the uniform's mean; sd of the mean 0.03
  EXPECT_NE(uniform.description.find("think time uniform:0.5:2"), std::string::npos) << uniform.description;
  EXPECT_EQ(build_workload(think_spec("uniform:0.5:2")).think_times, uniform.think_times);  // same seed
  for (const SimTime t : build_workload(think_spec("fixed:1.5")).think_times) EXPECT_EQ(t, SimTime::from_seconds(1.5));
  WorkloadSpec many = think_spec("exponential:3");
  many.num_requests = 20000;
  double total = 0;
  for (const SimTime t : build_workload(many).think_times) total += t.seconds();
  EXPECT_NEAR(total / 20000, 3.0, 0.08);  // sd of the mean 3/sqrt(20000) = 0.02
}

TEST(WorkloadThinkTime, MalformedSpecsNameTheOptionAndStreamingRefusesIt) {
  const auto error_for = [](const std::string& think) {
    return user_error_of([&] { build_workload(think_spec(think)); });
  };
  EXPECT_EQ(error_for("fixed"), "--think-time: \"fixed\": expected fixed:S (1 parameter after \"fixed:\")");
  EXPECT_EQ(error_for("fixed:-1"), "--think-time: \"fixed:-1\": S must be a number >= 0");
  EXPECT_EQ(error_for("uniform:2:1"), "--think-time: \"uniform:2:1\": B must be a number >= A");
  EXPECT_EQ(error_for("exponential:0"), "--think-time: \"exponential:0\": MEAN must be a positive number");
  EXPECT_EQ(error_for("fixed:2e9"), "--think-time: \"fixed:2e9\": S must be at most 1e+09 s");
  EXPECT_EQ(error_for("poisson:1"),
            "--think-time: \"poisson:1\": unknown think time \"poisson\"; expected "
            "fixed:S, uniform:A:B or exponential:MEAN");
  EXPECT_NE(user_error_of([] { stream_workload(think_spec("fixed:1")); }).find("--streaming with --think-time"),
            std::string::npos);
  std::vector<std::string> syntaxes;
  for (const SpecSyntax& s : think_time_syntaxes()) syntaxes.emplace_back(s.syntax);
  EXPECT_EQ(syntaxes, (std::vector<std::string>{"fixed:S", "uniform:A:B", "exponential:MEAN"}));
}

TEST(WorkloadPrefix, ATraceWithItsOwnHashesRefusesAPrefixAndOneWithoutTakesIt) {
  const auto dir = testing::scratch_dir("workload_prefix");
  WorkloadSpec spec;
  spec.prefix = "shared:32";
  spec.trace = testing::write_text_file(
      dir, "hashed.jsonl", "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n");
  const std::string msg = user_error_of([&] { build_workload(spec); });
  EXPECT_NE(msg.find("--prefix shared:32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hash_ids"), std::string::npos) << msg;
  spec.trace = testing::write_text_file(dir, "plain.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,5\n");
  const BuiltWorkload built = build_workload(spec);
  EXPECT_EQ(built.requests[0].prompt_tokens, 132);
  EXPECT_FALSE(built.prefix_blocks.empty());
}

// --resample block-bootstrap (issue 45): a replicate has the trace's size, is a valid workload,
// is made of runs of B consecutive trace requests with their own gaps, and changes with the seed.
TEST(WorkloadResample, BlockBootstrapReplicatesAreRunsOfTheTraceWithTheirGaps) {
  const auto dir = testing::scratch_dir("resample");
  std::string csv = "arrival_s,prompt_tokens,output_tokens,max_tokens\n";
  // Request i: prompt 100 + i (so each row is recognizable), gaps growing with i.
  double t = 0;
  for (int i = 0; i < 60; ++i) {
    t += 0.01 * i;
    csv += fmt::format("{},{},{},{}\n", t, 100 + i, 1 + i % 7, 20 + i % 7);
  }
  WorkloadSpec spec;
  spec.trace = testing::write_text_file(dir, "t.csv", csv);
  const Workload trace = build_workload(spec).requests;
  spec.resample = "block-bootstrap:5";
  std::set<std::vector<int32_t>> replicates;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    spec.seed = seed;
    const BuiltWorkload b = build_workload(spec);
    const Workload& w = b.requests;
    ASSERT_EQ(w.size(), trace.size());
    EXPECT_NE(b.description.find("block-bootstrap replicate (blocks of 5 requests, seed"), std::string::npos);
    std::vector<int32_t> rows;
    for (size_t k = 0; k < w.size(); ++k) {
      const int i = w[k].prompt_tokens - 100;  // the trace row it came from
      ASSERT_GE(i, 0);
      ASSERT_LT(i, 60);
      rows.push_back(i);
      EXPECT_EQ(w[k].id, static_cast<RequestId>(k));
      EXPECT_EQ(w[k].output_tokens, trace[i].output_tokens);
      EXPECT_EQ(w[k].max_tokens, trace[i].max_tokens) << "the max_tokens column travels with its request";
      if (k % 5 != 0) {
        // Inside a block: the next trace row, after the trace's own gap.
        EXPECT_EQ(i, rows[k - 1] + 1);
        EXPECT_EQ((w[k].arrival - w[k - 1].arrival).ns(), (trace[i].arrival - trace[i - 1].arrival).ns());
      } else if (k > 0 && i > 0) {
        // A block's first request: the gap the trace had before it.
        EXPECT_EQ((w[k].arrival - w[k - 1].arrival).ns(), (trace[i].arrival - trace[i - 1].arrival).ns());
      }
    }
    replicates.insert(rows);
    spec.seed = seed;
    const Workload again = build_workload(spec).requests;
    EXPECT_EQ(again.size(), w.size());
    for (size_t k = 0; k < w.size(); ++k)
      EXPECT_EQ(again[k].arrival, w[k].arrival) << "the same seed, the same replicate";
  }
  EXPECT_EQ(replicates.size(), 6u) << "each seed draws its own replicate";
  // One block as long as the trace is the trace itself.
  spec.resample = "block-bootstrap:60";
  const Workload whole = build_workload(spec).requests;
  for (size_t k = 0; k < whole.size(); ++k) {
    EXPECT_EQ(whole[k].prompt_tokens, trace[k].prompt_tokens);
    EXPECT_EQ(whole[k].arrival, trace[k].arrival);
  }
}

TEST(WorkloadResample, DefaultBlockIsSqrtNAndHashesTravelWithTheirRequests) {
  const auto dir = testing::scratch_dir("resample_hashes");
  std::string jsonl;
  for (int i = 0; i < 30; ++i) {
    jsonl += fmt::format("{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 3, \"hash_ids\": [{}, {}]}}\n",
                         i * 100, 1000 + i, i, 1000 + i);
  }
  WorkloadSpec spec;
  spec.trace = testing::write_text_file(dir, "m.jsonl", jsonl);
  spec.resample = "block-bootstrap";
  spec.seed = 4;
  const BuiltWorkload b = build_workload(spec);
  EXPECT_NE(b.description.find("blocks of 6 requests"), std::string::npos) << b.description;  // ceil(sqrt(30))
  ASSERT_EQ(b.prefix_blocks.size(), 30);
  for (RequestId id = 0; id < 30; ++id) {
    const int i = b.requests[id].prompt_tokens - 1000;
    const auto h = b.prefix_blocks.of(id);
    ASSERT_EQ(h.size(), 2u);
    EXPECT_EQ(h[0], static_cast<uint64_t>(i));
    EXPECT_EQ(h[1], static_cast<uint64_t>(1000 + i));
  }
  EXPECT_EQ(seed_variation(spec),
            "a block-bootstrap replicate of m.jsonl (blocks of ceil(sqrt(n)) requests; Kuensch 1989)");
}

TEST(WorkloadResample, WhatSeedsVaryIsNamedAndBadSpecsAreRefused) {
  WorkloadSpec synthetic;
  synthetic.num_requests = 5;
  synthetic.output_len = "capexp:128:512";
  EXPECT_EQ(seed_variation(synthetic), "output lengths") << "offline arrivals and a fixed prompt draw nothing";
  synthetic.output_len = "fixed:9";
  EXPECT_EQ(seed_variation(synthetic), "");
  synthetic.arrival = "poisson:2";
  synthetic.prompt_len = "uniform:1:9";
  EXPECT_EQ(seed_variation(synthetic), "arrival times, prompt lengths");
  synthetic.resample = "block-bootstrap";
  EXPECT_NE(user_error_of([&] {
              build_workload(synthetic);
            }).find("--resample block-bootstrap: resamples a trace's requests"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { parse_resample_block("bootstrap", "--resample"); }).find("expected block-bootstrap"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { parse_resample_block("block-bootstrap:x", "--resample"); }).find("B must be an integer"),
            std::string::npos);
  EXPECT_EQ(parse_resample_block("block-bootstrap:12", "--resample"), 12);
  WorkloadSpec traced;
  traced.trace = "t.csv";
  traced.resample = "block-bootstrap";
  EXPECT_NE(user_error_of([&] { stream_workload(traced); }).find("--streaming with --resample"), std::string::npos);
}

}  // namespace
}  // namespace batchsim
