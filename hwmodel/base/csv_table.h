// batchsim — a measurement table in CSV, read row by row with columns found by header name.
//
// Measurement tables (Vidur's profiles, NVIDIA aiconfigurator's kernel tables, measured serving
// results, calibration's own output) are plain CSV without quoted fields, often gzip-compressed;
// CsvTable reads them through LineReader and checks every field it converts. A row with another
// number of fields than the header, a missing column, a number that does not parse or lies out
// of the range asked for, is a UserError naming the file and line ("mlp.csv.gz:17: column
// 'num_tokens': 1e30 is not a whole number from 1 to 1e+09"): nothing is cast before it is
// checked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hwmodel/base/line_reader.h"

namespace batchsim {

class CsvTable {
 public:
  explicit CsvTable(const std::filesystem::path& path);

  bool has(std::string_view column) const { return index_.count(std::string(column)) != 0; }
  const std::vector<std::string>& header() const { return header_; }
  // The next non-empty row; false at the end of the file.
  bool next();

  const std::string& text(std::string_view column) const;
  // NaN for an empty field (Vidur leaves a median empty when an operator was not timed).
  double number_or_nan(std::string_view column) const;
  // A finite number (an empty field is an error).
  double number(std::string_view column) const;
  // A whole number in [min, max], checked before it is converted.
  int64_t integer(std::string_view column, int64_t min = std::numeric_limits<int64_t>::min() / 2,
                  int64_t max = std::numeric_limits<int64_t>::max() / 2) const;
  bool boolean(std::string_view column) const;
  [[noreturn]] void fail(const std::string& why) const;

 private:
  size_t column_index(std::string_view column) const;

  std::filesystem::path path_;
  LineReader in_;
  std::string line_;
  std::vector<std::string> header_;
  std::vector<std::string> fields_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace batchsim
