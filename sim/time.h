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
  static SimTime from_seconds(double s) { return SimTime(std::llround(s * 1e9)); }
  static constexpr SimTime zero() { return SimTime(0); }
  static constexpr SimTime max() { return SimTime(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t ns() const { return ns_; }
  constexpr double seconds() const { return static_cast<double>(ns_) * 1e-9; }

  constexpr auto operator<=>(const SimTime&) const = default;
  constexpr SimTime operator+(SimTime o) const { return SimTime(ns_ + o.ns_); }
  constexpr SimTime operator-(SimTime o) const { return SimTime(ns_ - o.ns_); }
  constexpr SimTime& operator+=(SimTime o) { ns_ += o.ns_; return *this; }

 private:
  constexpr explicit SimTime(int64_t ns) : ns_(ns) {}
  int64_t ns_ = 0;
};

}  // namespace batchsim
