// batchsim — simulated time.
//
// Time is an integer count of nanoseconds in a strong type, so that event order and every
// output are exact and reproducible to the byte (no floating-point drift when thousands of
// iteration durations are added up). Conversions to and from seconds round to the nearest ns.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace batchsim {

class SimTime {
 public:
  constexpr SimTime() = default;
  static constexpr SimTime from_ns(int64_t ns) { return SimTime(ns); }
  // std::llround(s * 1e9), inline: every iteration's duration comes through here, and the
  // library call was 5% of a fast-forwarded run. Below 2^52 ns (52 days) truncation and the
  // fraction left are exact, so rounding half away from zero on them is llround's answer; a
  // larger (already integral) or non-finite value takes the library's.
  static SimTime from_seconds(double s) {
    const double ns = s * 1e9;
    if (!(std::fabs(ns) < 0x1p52)) return SimTime(std::llround(ns));
    auto whole = static_cast<int64_t>(ns);
    const double fraction = ns - static_cast<double>(whole);
    if (fraction >= 0.5) {
      ++whole;
    } else if (fraction <= -0.5) {
      --whole;
    }
    return SimTime(whole);
  }
  static constexpr SimTime zero() { return SimTime(0); }
  static constexpr SimTime max() { return SimTime(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t ns() const { return ns_; }
  constexpr double seconds() const { return static_cast<double>(ns_) * 1e-9; }

  constexpr auto operator<=>(const SimTime&) const = default;
  constexpr SimTime operator+(SimTime o) const { return SimTime(ns_ + o.ns_); }
  constexpr SimTime operator-(SimTime o) const { return SimTime(ns_ - o.ns_); }
  constexpr SimTime& operator+=(SimTime o) {
    ns_ += o.ns_;
    return *this;
  }

 private:
  constexpr explicit SimTime(int64_t ns) : ns_(ns) {}
  int64_t ns_ = 0;
};

}  // namespace batchsim
