// A CSV file's text, built in one buffer and handed to the stream in pieces of about a
// megabyte: the files of an hour-long trace are most of a run's output time.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "hwmodel/base/time.h"

namespace batchsim {

// Numbers go straight into the buffer: integers with std::to_chars, strings as they are, other
// formats with fmt::format_to, doubles with std::to_chars (fixed or general to a precision,
// which the standard defines as printf's %.Nf / %.Ng, the same correctly rounded digits fmt's
// {:.Nf} / {:.Ng} write, in a fraction of the time).
class CsvBuffer {
 public:
  explicit CsvBuffer(std::ostream& out) : out_(out) {}
  template <typename... Args>
  void format(fmt::format_string<Args...> f, Args&&... args) {
    fmt::format_to(fmt::appender(buf_), f, std::forward<Args>(args)...);
  }
  void put(std::string_view text) { buf_.append(text); }
  void put(char c) { buf_.push_back(c); }
  // Written in place (std::to_chars): through format("{}", v) a row's integers spent most of
  // their time parsing the format string.
  void integer(int64_t v) {
    char* out = room(kMaxIntegerChars);
    finish(std::to_chars(out, out + kMaxIntegerChars, v).ptr);
  }
  // {:.9f} (seconds to the ns) and {:.9g}.
  void fixed9(double v) { to_chars(v, std::chars_format::fixed); }
  void general9(double v) { to_chars(v, std::chars_format::general); }
  // fixed9(t.seconds()), written from t's integer nanoseconds: the same digits, as t.seconds()
  // is within 2.3e-16 of its own size of the exact k x 1e-9 s (1e-9 and the product each round
  // by half an ulp), so below kExactNs (23 days) it rounds back to k, the nanoseconds; beyond
  // that, the double's own digits. Most of requests.csv's fields are such times, and
  // std::to_chars at a precision took over half of writing it.
  void seconds(SimTime t) {
    const int64_t ns = t.ns();
    if (ns <= -kExactNs || ns >= kExactNs) {
      fixed9(t.seconds());
      return;
    }
    const uint64_t magnitude = ns < 0 ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
    // Whole seconds, the point, then the nanoseconds zero-padded to nine digits; in place.
    char* out = room(kMaxIntegerChars + 11);
    if (ns < 0) *out++ = '-';
    out = std::to_chars(out, out + kMaxIntegerChars, magnitude / 1'000'000'000u).ptr;
    *out++ = '.';
    std::array<char, 9> fraction;
    const auto n = static_cast<size_t>(std::to_chars(fraction.data(), fraction.data() + fraction.size(),
                                                     static_cast<uint32_t>(magnitude % 1'000'000'000u))
                                           .ptr -
                                       fraction.data());
    for (size_t i = n; i < 9; ++i) *out++ = '0';
    for (size_t i = 0; i < n; ++i) *out++ = fraction[i];
    finish(out);
  }
  // Seconds of a SimTime to the ns, or nothing for "never" (a rejected request has no TTFT).
  void seconds_or_empty(SimTime t) {
    if (t != SimTime::max()) seconds(t);
  }
  // Ends a row; writes the buffer out once it holds about a megabyte.
  void end_row() {
    buf_.push_back('\n');
    if (buf_.size() >= kFlushBytes) flush();
  }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;
  static constexpr size_t kMaxIntegerChars = 20;  // INT64_MIN, UINT64_MAX
  // `n` bytes at the buffer's end to write into, then finish(end of what was written).
  char* room(size_t n) {
    const size_t used = buf_.size();
    buf_.resize(used + n);
    return buf_.data() + used;
  }
  void finish(const char* end) { buf_.resize(static_cast<size_t>(end - buf_.data())); }
  // seconds(t)'s integer path: |t| below 2e15 ns (23 days), where 2.3e-16 x t.seconds() stays
  // under half a nanosecond.
  static constexpr int64_t kExactNs = 2'000'000'000'000'000;
  void to_chars(double v, std::chars_format format) {
    std::array<char, 64> digits;
    const auto [end, ec] = std::to_chars(digits.data(), digits.data() + digits.size(), v, format, 9);
    if (ec != std::errc()) throw std::logic_error("a number too long for a CSV field");
    buf_.append(digits.data(), end);
  }
  std::ostream& out_;
  fmt::memory_buffer buf_;
};

}  // namespace batchsim
