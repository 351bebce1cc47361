// CsvBuffer::seconds writes a time from its integer nanoseconds; it must give the bytes that
// printing the time's double seconds to 9 decimals gave, which every CSV field of a time was;
// CsvBuffer::integer the digits fmt's "{}" gave.
#include "experiments/run/csv_buffer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace batchsim {
namespace {

std::string written(const std::function<void(CsvBuffer&)>& write) {
  std::ostringstream out;
  CsvBuffer csv(out);
  write(csv);
  csv.flush();
  return out.str();
}

std::string as_seconds(int64_t ns) {
  return written([ns](CsvBuffer& csv) { csv.seconds(SimTime::from_ns(ns)); });
}

std::string as_fixed9(int64_t ns) {
  return written([ns](CsvBuffer& csv) { csv.fixed9(SimTime::from_ns(ns).seconds()); });
}

TEST(CsvBuffer, SecondsAreTheDigitsOfFixed9OfTheSeconds) {
  std::vector<int64_t> values = {0,
                                 1,
                                 9,
                                 10,
                                 499'999'999,
                                 500'000'000,
                                 999'999'999,
                                 1'000'000'000,
                                 1'000'000'001,
                                 3'505'400'000'001,
                                 604'800'000'000'000,  // a week
                                 1'999'999'999'999'999,
                                 2'000'000'000'000'000,
                                 2'000'000'000'000'001,
                                 9'007'199'254'740'993};
  std::mt19937_64 rng(17);
  // Uniform in the exponent: gaps of microseconds, arrivals of days, and around the switch to
  // the double's digits at 2e15 ns.
  std::uniform_real_distribution<double> exponent(0.0, 16.0);
  for (int i = 0; i < 300'000; ++i) values.push_back(static_cast<int64_t>(std::pow(10.0, exponent(rng))));
  for (int64_t k = 0; k < 2000; ++k) values.push_back(k * 1'000'000'000 + (k % 2 == 0 ? 0 : 999'999'999));
  const size_t positive = values.size();
  for (size_t i = 0; i < positive; ++i) values.push_back(-values[i]);
  for (const int64_t ns : values) ASSERT_EQ(as_seconds(ns), as_fixed9(ns)) << ns << " ns";
  EXPECT_EQ(as_seconds(1'500'000'000), "1.500000000");
  EXPECT_EQ(as_seconds(-1), "-0.000000001");
}

// Integers are written in place with std::to_chars; they must be what fmt's "{}" wrote, also
// at the extremes and across the buffer's growth (many in one buffer, flushed at the end).
TEST(CsvBuffer, IntegersAreFmtsDecimalDigits) {
  std::vector<int64_t> values = {0, 1, -1, 9, 10, -10, INT64_MAX, INT64_MIN, INT32_MAX, INT32_MIN};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100'000; ++i) values.push_back(static_cast<int64_t>(rng()) >> (rng() % 64));
  std::string want;
  for (const int64_t v : values) want += fmt::format("{},", v);
  const std::string got = written([&values](CsvBuffer& csv) {
    for (const int64_t v : values) {
      csv.integer(v);
      csv.put(',');
    }
  });
  EXPECT_EQ(got, want);
}

TEST(CsvBuffer, NeverIsAnEmptyField) {
  EXPECT_EQ(written([](CsvBuffer& csv) { csv.seconds_or_empty(SimTime::max()); }), "");
  EXPECT_EQ(written([](CsvBuffer& csv) { csv.seconds_or_empty(SimTime::from_ns(42)); }), "0.000000042");
}

}  // namespace
}  // namespace batchsim
