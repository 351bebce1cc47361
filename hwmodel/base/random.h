// batchsim — reproducible random numbers: the generator and the samplers built on it.
//
// Why our own: std::mt19937_64 is fully specified, but std::exponential_distribution,
// std::normal_distribution, std::gamma_distribution... are not — libstdc++, libc++ and MSVC use
// different algorithms, so the same seed gives different workloads on different platforms. We
// therefore write the generator and every sampler here, each a fixed formula over uniform01().
// The only platform dependence left is libm (log, exp, cos, pow): those are accurate to within
// an ulp everywhere, which changes an integer result only when a sample lands within an ulp of a
// rounding boundary.
//
// Invariants: an Rng's whole state is its four words; copying an Rng copies its future stream.
// Not thread-safe: one Rng per stream.
#pragma once

#include <array>
#include <cstdint>

namespace batchsim {

// One step of splitmix64 (Steele, Lea, Flood 2014; Vigna's reference splitmix64.c): advances
// `state` by the golden-ratio increment and returns the mixed value. Used to seed Rng, as the
// xoshiro authors recommend, so that nearby seeds (0, 1, 2...) give unrelated streams.
uint64_t splitmix64(uint64_t& state);

// xoshiro256** 1.0 (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021;
// reference xoshiro256starstar.c): period 2^256 − 1, passes BigCrush, four words of state.
class Rng {
 public:
  // State = four successive splitmix64 outputs of `seed`; never all-zero.
  explicit Rng(uint64_t seed);
  // Independent stream number `stream` (0, 1, 2, ...) of `seed`: Rng(seed) advanced by `stream`
  // jumps of 2^128 steps, so streams never overlap. Workloads draw arrivals, prompt lengths and
  // output lengths from different streams: changing one distribution leaves the others' samples
  // unchanged.
  static Rng for_stream(uint64_t seed, uint32_t stream);
  // Exact state, for checking against the reference implementation's published outputs.
  static Rng from_state(const std::array<uint64_t, 4>& state);

  uint64_t next_u64();
  // In [0, 1): the top 53 bits of next_u64() times 2^-53, so every value is a multiple of 2^-53
  // and 1.0 − uniform01() is exact and in (0, 1].
  double uniform01();
  // Advances the state by 2^128 steps (the reference jump()).
  void jump();

 private:
  Rng() = default;
  uint64_t s_[4] = {0, 0, 0, 0};
};

// Uniform integer in [0, n), n >= 1, without modulo bias (rejection of the short top range, as
// OpenBSD's arc4random_uniform does).
uint64_t sample_below(Rng& rng, uint64_t n);

// Exponential with the given mean (> 0), by inverse CDF: −mean · ln(1 − U).
double sample_exponential(Rng& rng, double mean);

// Exponential with the given mean conditioned on being <= cap (cap > 0), by inverse CDF of the
// truncated law: −mean · ln(1 − U·(1 − e^(−cap/mean))). Equal in distribution to "draw, and
// redraw while above cap", but one draw per sample, so a cap far below the mean cannot loop.
double sample_truncated_exponential(Rng& rng, double mean, double cap);

// Standard normal N(0, 1) by Box–Muller (cosine branch only: stateless, so a sampler's output
// depends on nothing but the Rng; the sine half is discarded). Consumes two uniforms.
double sample_standard_normal(Rng& rng);

// Gamma(shape k > 0, scale θ > 0), mean kθ, variance kθ². Marsaglia & Tsang, "A simple method
// for generating gamma variables" (ACM TOMS 26(3), 2000); for k < 1 their boost
// Gamma(k) = Gamma(k + 1) · U^(1/k).
double sample_gamma(Rng& rng, double shape, double scale);

}  // namespace batchsim
