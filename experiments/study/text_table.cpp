#include "experiments/study/text_table.h"

#include <algorithm>

namespace batchsim {

namespace {

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;  // count UTF-8 code points (the en dash)
  return n;
}

}  // namespace

void render_text_table(std::ostream& out, const std::vector<std::string>& headers,
                       const std::vector<std::vector<std::string>>& rows, size_t left_aligned) {
  std::vector<size_t> width(headers.size(), 0);
  auto measure = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], display_width(r[i]));
  };
  measure(headers);
  for (const auto& r : rows) measure(r);
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string pad(width[i] - display_width(r[i]), ' ');
      s += i < left_aligned ? r[i] + pad : pad + r[i];
      s += i + 1 < r.size() ? "  " : "";
    }
    out << s << '\n';
  };
  line(headers);
  for (const auto& r : rows) line(r);
}

}  // namespace batchsim
