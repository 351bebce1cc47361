// batchsim — measurement tables in CSV (see csv_table.h).
#include "hwmodel/base/csv_table.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {
void split(const std::string& line, std::vector<std::string>& out) {
  out.clear();
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.emplace_back(line.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}
}  // namespace

CsvTable::CsvTable(const std::filesystem::path& path) : path_(path), in_(path, "measurement file") {
  if (!in_.next(line_)) throw UserError(fmt::format("{}: empty file", path.string()));
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  if (line_.starts_with("\xEF\xBB\xBF")) line_.erase(0, 3);  // a UTF-8 byte order mark
  split(line_, header_);
  for (size_t i = 0; i < header_.size(); ++i) index_.emplace(header_[i], i);
}

bool CsvTable::next() {
  while (in_.next(line_)) {
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) continue;
    split(line_, fields_);
    if (fields_.size() != header_.size()) {
      fail(fmt::format("{} fields, the header has {}", fields_.size(), header_.size()));
    }
    return true;
  }
  return false;
}

const std::string& CsvTable::text(std::string_view column) const { return fields_[column_index(column)]; }

double CsvTable::number_or_nan(std::string_view column) const {
  const std::string& s = text(column);
  if (s.empty()) return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
    fail(fmt::format("column '{}': '{}' is not a finite number", column, s));
  }
  return v;
}

double CsvTable::number(std::string_view column) const {
  const double v = number_or_nan(column);
  if (std::isnan(v)) fail(fmt::format("column '{}' is empty", column));
  return v;
}

int64_t CsvTable::integer(std::string_view column, int64_t min, int64_t max) const {
  const double v = number(column);
  if (v != std::floor(v) || v < static_cast<double>(min) || v > static_cast<double>(max)) {
    fail(fmt::format("column '{}': {} is not a whole number from {} to {}", column, text(column), min, max));
  }
  return static_cast<int64_t>(v);
}

bool CsvTable::boolean(std::string_view column) const {
  const std::string& s = text(column);
  if (s == "True" || s == "true" || s == "1") return true;
  if (s == "False" || s == "false" || s == "0") return false;
  fail(fmt::format("column '{}': '{}' is not a boolean", column, s));
}

void CsvTable::fail(const std::string& why) const {
  throw UserError(fmt::format("{}:{}: {}", path_.string(), in_.line_number(), why));
}

size_t CsvTable::column_index(std::string_view column) const {
  auto it = index_.find(std::string(column));
  if (it == index_.end()) fail(fmt::format("missing column '{}'", column));
  return it->second;
}

}  // namespace batchsim
