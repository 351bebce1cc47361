// batchsim — measured GEMM tables and their log-space interpolation (see gemm_table.h).
#include "hwmodel/gemm_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMicro = 1e-6;

// Linear interpolation of y at x between (x0, y0) and (x1, y1); y0 where x0 == x1.
double lerp(double x, double x0, double y0, double x1, double y1) {
  if (x1 == x0) return y0;
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

WeightFormat GemmTable::format() const {
  for (int f = 0; f < kNumWeightFormats; ++f) {
    if (weight_format_name(static_cast<WeightFormat>(f)) == dtype_) return static_cast<WeightFormat>(f);
  }
  return WeightFormat::bf16;
}

GemmTable GemmTable::from_points(std::string dtype, std::string source, const std::vector<GemmPoint>& points) {
  GemmTable t;
  t.dtype_ = std::move(dtype);
  t.source_ = std::move(source);
  std::vector<int64_t> ms;
  for (const GemmPoint& p : points) {
    if (p.m < 1 || p.n < 1 || p.k < 1 || !(p.seconds > 0) || !std::isfinite(p.seconds)) {
      throw UserError(
          fmt::format("GEMM table: point m={} n={} k={} t={} needs positive sizes and time", p.m, p.n, p.k, p.seconds));
    }
    ms.push_back(p.m);
  }
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  t.m_ = ms;
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> by_shape;
  for (const GemmPoint& p : points) {
    auto [it, inserted] = by_shape.try_emplace({p.n, p.k}, std::vector<double>(ms.size(), kNaN));
    const auto at = std::lower_bound(ms.begin(), ms.end(), p.m) - ms.begin();
    it->second[static_cast<size_t>(at)] = p.seconds;
  }
  for (auto& [shape, seconds] : by_shape) t.columns_.push_back({shape.first, shape.second, std::move(seconds)});
  t.index();
  return t;
}

void GemmTable::index() {
  std::sort(columns_.begin(), columns_.end(),
            [](const Column& a, const Column& b) { return a.n != b.n ? a.n < b.n : a.k < b.k; });
  log_m_.clear();
  for (int64_t m : m_) log_m_.push_back(std::log(static_cast<double>(m)));
  ns_.clear();
  n_first_.clear();
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (ns_.empty() || columns_[i].n != ns_.back()) {
      ns_.push_back(columns_[i].n);
      n_first_.push_back(i);
    }
  }
  n_first_.push_back(columns_.size());
}

double GemmTable::log_seconds_in_column(const Column& c, double log_m) const {
  // The nearest measured m at or below log_m and above it, skipping m's the column lacks.
  const auto hi = static_cast<std::ptrdiff_t>(std::lower_bound(log_m_.begin(), log_m_.end(), log_m) - log_m_.begin());
  const auto size = static_cast<std::ptrdiff_t>(log_m_.size());
  if (hi < size && log_m_[hi] == log_m && !std::isnan(c.seconds[hi])) return std::log(c.seconds[hi]);
  std::ptrdiff_t below = hi - 1;
  while (below >= 0 && std::isnan(c.seconds[below])) --below;
  std::ptrdiff_t above = hi < size && log_m_[hi] == log_m ? hi + 1 : hi;
  while (above < size && std::isnan(c.seconds[above])) ++above;
  if (below < 0 || above >= size) return kNaN;
  return lerp(log_m, log_m_[below], std::log(c.seconds[below]), log_m_[above], std::log(c.seconds[above]));
}

double GemmTable::log_seconds_at_n(size_t n_index, double log_m, int64_t k) const {
  const auto first = columns_.begin() + static_cast<std::ptrdiff_t>(n_first_[n_index]);
  const auto last = columns_.begin() + static_cast<std::ptrdiff_t>(n_first_[n_index + 1]);
  const auto upper = std::lower_bound(first, last, k, [](const Column& c, int64_t v) { return c.k < v; });
  if (upper == last) return kNaN;  // k above this n's range
  if (upper->k == k) return log_seconds_in_column(*upper, log_m);
  if (upper == first) return kNaN;  // k below this n's range
  const Column& a = *(upper - 1);
  const Column& b = *upper;
  const double ta = log_seconds_in_column(a, log_m), tb = log_seconds_in_column(b, log_m);
  if (std::isnan(ta) || std::isnan(tb)) return kNaN;
  return lerp(std::log(static_cast<double>(k)), std::log(static_cast<double>(a.k)), ta,
              std::log(static_cast<double>(b.k)), tb);
}

std::optional<double> GemmTable::seconds(double m, int64_t n, int64_t k) const {
  if (columns_.empty() || !(m >= static_cast<double>(m_.front())) || m > static_cast<double>(m_.back()) ||
      n < ns_.front() || n > ns_.back()) {
    return std::nullopt;
  }
  const double log_m = std::log(m);
  const auto upper = std::lower_bound(ns_.begin(), ns_.end(), n);
  const auto b = static_cast<size_t>(upper - ns_.begin());
  double log_t = kNaN;
  if (ns_[b] == n) {
    log_t = log_seconds_at_n(b, log_m, k);
  } else {
    const double ta = log_seconds_at_n(b - 1, log_m, k), tb = log_seconds_at_n(b, log_m, k);
    if (!std::isnan(ta) && !std::isnan(tb)) {
      log_t = lerp(std::log(static_cast<double>(n)), std::log(static_cast<double>(ns_[b - 1])), ta,
                   std::log(static_cast<double>(ns_[b])), tb);
    }
  }
  if (std::isnan(log_t)) return std::nullopt;
  return std::exp(log_t);
}

std::string GemmTable::to_text() const {
  std::string out = "# batchsim GEMM table (format: hwmodel/gemm_table.h): times in microseconds\n";
  out += fmt::format("dtype {}\nsource {}\nm", dtype_, source_);
  for (int64_t m : m_) out += fmt::format(" {}", m);
  out += '\n';
  for (const Column& c : columns_) {
    out += fmt::format("column {} {}", c.n, c.k);
    for (double s : c.seconds) out += std::isnan(s) ? std::string(" nan") : fmt::format(" {:.5g}", s / kMicro);
    out += '\n';
  }
  return out;
}

GemmTable GemmTable::parse(const std::string& text, const std::string& where) {
  GemmTable t;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool have_m = false;
  auto fail = [&](const std::string& why) -> void { throw UserError(fmt::format("{}:{}: {}", where, line_no, why)); };
  auto numbers = [&](std::string_view rest, size_t skip) {
    std::vector<double> values;
    size_t pos = 0;
    while (pos < rest.size()) {
      while (pos < rest.size() && rest[pos] == ' ') ++pos;
      if (pos >= rest.size()) break;
      size_t end = rest.find(' ', pos);
      if (end == std::string_view::npos) end = rest.size();
      const std::string_view word = rest.substr(pos, end - pos);
      double v = kNaN;
      if (word != "nan") {
        const auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
        if (ec != std::errc() || p != word.data() + word.size() || !std::isfinite(v) ||
            (values.size() >= skip && !(v > 0))) {
          fail(fmt::format("'{}' is not a positive number", word));
        }
      } else if (values.size() < skip) {
        fail("a size cannot be nan");
      }
      values.push_back(v);
      pos = end;
    }
    return values;
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string word = line.substr(0, space);
    const std::string_view rest =
        space == std::string::npos ? std::string_view() : std::string_view(line).substr(space + 1);
    if (word == "dtype") {
      t.dtype_ = std::string(rest);
      if (t.dtype_ != "bf16" && t.dtype_ != "fp8" && t.dtype_ != "fp8-block" && t.dtype_ != "mxfp4" &&
          t.dtype_ != "nvfp4") {
        fail(fmt::format("dtype '{}': expected bf16, fp8, fp8-block, mxfp4 or nvfp4", t.dtype_));
      }
    } else if (word == "source") {
      t.source_ = std::string(rest);
    } else if (word == "m") {
      for (double v : numbers(rest, 1 << 20)) {
        if (v != std::floor(v) || v > 1e9 || (!t.m_.empty() && v <= static_cast<double>(t.m_.back()))) {
          fail("the m grid must be ascending whole numbers");
        }
        t.m_.push_back(static_cast<int64_t>(v));
      }
      have_m = !t.m_.empty();
    } else if (word == "column") {
      if (!have_m) fail("a column before the m grid");
      const std::vector<double> v = numbers(rest, 2);
      if (v.size() != t.m_.size() + 2) fail(fmt::format("a column needs n, k and {} times", t.m_.size()));
      if (v[0] != std::floor(v[0]) || v[1] != std::floor(v[1]) || v[0] > 1e9 || v[1] > 1e9) {
        fail("n and k must be whole numbers");
      }
      Column c{static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1]), {}};
      for (size_t i = 2; i < v.size(); ++i) c.seconds.push_back(v[i] * kMicro);
      t.columns_.push_back(std::move(c));
    } else {
      fail(fmt::format("unknown line '{}' (expected dtype, source, m or column)", word));
    }
  }
  if (t.columns_.empty()) throw UserError(fmt::format("{}: no GEMM table columns", where));
  t.index();
  for (size_t i = 1; i < t.columns_.size(); ++i) {
    if (t.columns_[i].n == t.columns_[i - 1].n && t.columns_[i].k == t.columns_[i - 1].k) {
      throw UserError(fmt::format("{}: column n={} k={} appears twice", where, t.columns_[i].n, t.columns_[i].k));
    }
  }
  return t;
}

GemmTableSource::GemmTableSource(std::string file, GemmTable table) : file_(std::move(file)), table_(std::move(table)) {
  std::call_once(parsed_, [] {});  // already built: nothing to parse
}

const GemmTable& GemmTableSource::table() const {
  std::call_once(parsed_, [this] { table_ = GemmTable::parse(text_, where_); });
  return table_;
}

}  // namespace batchsim
