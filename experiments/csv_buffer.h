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

#include "sim/time.h"

namespace batchsim {

// Numbers go straight into the buffer: integers and strings with fmt::format_to, doubles with
// std::to_chars (fixed or general to a precision, which the standard defines as printf's %.Nf /
// %.Ng, the same correctly rounded digits fmt's {:.Nf} / {:.Ng} write, in a fraction of the time).
class CsvBuffer {
 public:
  explicit CsvBuffer(std::ostream& out) : out_(out) {}
  template <typename... Args>
  void format(fmt::format_string<Args...> f, Args&&... args) {
    fmt::format_to(fmt::appender(buf_), f, std::forward<Args>(args)...);
  }
  void put(std::string_view text) { buf_.append(text); }
  void put(char c) { buf_.push_back(c); }
  void integer(int64_t v) { format("{}", v); }
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
    std::array<char, 32> digits;
    char* end = digits.data();
    if (ns < 0) *end++ = '-';
    end = std::to_chars(end, digits.data() + 20, magnitude / 1'000'000'000u).ptr;
    *end++ = '.';
    auto fraction = static_cast<uint32_t>(magnitude % 1'000'000'000u);
    for (int i = 8; i >= 0; --i, fraction /= 10) end[i] = static_cast<char>('0' + fraction % 10);
    buf_.append(digits.data(), end + 9);
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
