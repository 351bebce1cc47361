// batchsim — one way to read a number (and a spec's fields) out of user text.
//
// Every spec string, option value and table cell that holds a number goes through these, so
// that "1e3", " 5", "5x", "nan" and "1e400" mean the same (or are refused the same way)
// wherever a user types them. `what` names the option, key or file:line for the message:
//   parse_double("5x", "--moe-routing power:")  ->  UserError "--moe-routing power:: '5x' is not a number"
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

namespace batchsim {

// The whole of `text` (no leading or trailing characters) as a finite number in [min, max].
// Throws UserError naming `what` otherwise.
double parse_double(std::string_view text, std::string_view what, double min = -std::numeric_limits<double>::max(),
                    double max = std::numeric_limits<double>::max());
// The whole of `text` as an integer in [min, max] (decimal digits with an optional sign).
int64_t parse_int(std::string_view text, std::string_view what, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max());

// `text` split at every `sep`, empty fields kept ("a,,b" -> a, "", b; "" -> one empty field),
// so that a spec's parser can refuse an empty part rather than skip it.
std::vector<std::string_view> split_fields(std::string_view text, char sep);

}  // namespace batchsim
