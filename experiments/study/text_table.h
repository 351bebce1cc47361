// batchsim — a table of text cells printed in aligned columns, as the terminal shows `compare`'s
// report and `plan`'s candidates.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace batchsim {

// Columns as wide as their widest cell (counted in UTF-8 code points, so an en dash is one),
// two spaces apart; the first `left_aligned` columns are padded on the right, the others on the
// left. Each row is one line.
void render_text_table(std::ostream& out, const std::vector<std::string>& headers,
                       const std::vector<std::vector<std::string>>& rows, size_t left_aligned);

}  // namespace batchsim
