// batchsim — reading numbers out of user text (see parse.h).
#include "hwmodel/base/parse.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string>

#include "hwmodel/base/error.h"

namespace batchsim {

double parse_double(std::string_view text, std::string_view what, double min, double max) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    throw UserError(fmt::format("{}: '{}' is not a number", what, text));
  }
  if (v < min || v > max) throw UserError(fmt::format("{}: {} is out of range [{:g}, {:g}]", what, text, min, max));
  return v;
}

int64_t parse_int(std::string_view text, std::string_view what, int64_t min, int64_t max) {
  int64_t v = 0;
  const char* first = text.data();
  if (!text.empty() && text.front() == '+') ++first;  // from_chars takes '-' only
  const auto [end, ec] = std::from_chars(first, text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw UserError(fmt::format("{}: '{}' is not an integer", what, text));
  }
  if (v < min || v > max) throw UserError(fmt::format("{}: {} is out of range [{}, {}]", what, text, min, max));
  return v;
}

std::vector<std::string_view> split_fields(std::string_view text, char sep) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    fields.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return fields;
    start = end + 1;
  }
}

}  // namespace batchsim
