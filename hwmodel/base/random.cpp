#include "hwmodel/base/random.h"

#include <cmath>
#include <numbers>

namespace batchsim {

namespace {

constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t& word : s_) word = splitmix64(sm);
  // splitmix64 is a bijection of its counter, so four successive outputs are never all zero.
}

Rng Rng::for_stream(uint64_t seed, uint32_t stream) {
  Rng rng(seed);
  for (uint32_t i = 0; i < stream; ++i) rng.jump();
  return rng;
}

Rng Rng::from_state(const std::array<uint64_t, 4>& state) {
  Rng rng;
  for (int i = 0; i < 4; ++i) rng.s_[i] = state[i];
  return rng;
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

void Rng::jump() {
  static constexpr uint64_t kJump[4] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL, 0xa9582618e03fc9aaULL,
                                        0x39abdc4529b1661cULL};
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (uint64_t word : kJump) {
    for (int b = 0; b < 64; ++b) {
      if (word & (uint64_t{1} << b)) {
        s0 ^= s_[0];
        s1 ^= s_[1];
        s2 ^= s_[2];
        s3 ^= s_[3];
      }
      next_u64();
    }
  }
  s_[0] = s0;
  s_[1] = s1;
  s_[2] = s2;
  s_[3] = s3;
}

uint64_t sample_below(Rng& rng, uint64_t n) {
  // 2^64 mod n: values below it would make the low residues one more likely than the others.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = rng.next_u64();
    if (r >= threshold) return r % n;
  }
}

double sample_exponential(Rng& rng, double mean) { return -mean * std::log(1.0 - rng.uniform01()); }

double sample_truncated_exponential(Rng& rng, double mean, double cap) {
  // CDF of Exp(mean) at cap; -expm1(-x) = 1 - e^-x without cancellation for small cap/mean.
  const double mass_below_cap = -std::expm1(-cap / mean);
  const double x = -mean * std::log1p(-rng.uniform01() * mass_below_cap);
  // U·mass < mass, so x < cap mathematically; guard the last ulp of the libm round trip.
  return x < cap ? x : cap;
}

double sample_standard_normal(Rng& rng) {
  const double u1 = 1.0 - rng.uniform01();  // (0, 1]: log(u1) is finite
  const double u2 = rng.uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double sample_gamma(Rng& rng, double shape, double scale) {
  if (shape < 1.0) {
    // Marsaglia & Tsang §6: if X ~ Gamma(k+1) and U ~ U(0,1], X·U^(1/k) ~ Gamma(k).
    const double x = sample_gamma(rng, shape + 1.0, 1.0);
    const double u = 1.0 - rng.uniform01();
    return scale * x * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0.0;
    double v = 0.0;
    do {
      x = sample_standard_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng.uniform01();
    const double x2 = x * x;
    // Squeeze first (cheap, accepts ~98%), then the exact log test. log(0) = -inf accepts.
    if (u < 1.0 - 0.0331 * x2 * x2) return scale * d * v;
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return scale * d * v;
  }
}

}  // namespace batchsim
