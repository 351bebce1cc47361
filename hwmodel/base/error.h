// batchsim — the one exception type for bad user input.
//
// Every user-facing mistake (unknown model name, malformed distribution, unreadable file,
// malformed trace line, policy option out of range) is reported by throwing UserError with a
// message that names the file, line or option. The CLI catches it, prints the message and exits
// with status 2. Internal invariant violations are NOT UserErrors: they are std::logic_error and
// mean a bug in batchsim.
//
// It lives in hwmodel/ because hwmodel is the bottom of the dependency order: every folder may
// include it.
#pragma once

#include <stdexcept>
#include <string>

namespace batchsim {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace batchsim
