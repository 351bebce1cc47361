// Helpers shared by every test suite.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace batchsim::testing {

// ../shared/data beside the repo (or $BATCHSIM_DATA_DIR). Tests that need the real traces or
// measurements fail with a clear message when it is missing: CI has it.
std::filesystem::path data_dir();
// The repository root (for shipped experiment files, profiles, plots).
std::filesystem::path source_dir();
// A fresh empty directory under the build tree for a test's outputs.
std::filesystem::path scratch_dir(const std::string& name);

// Writes `contents` byte for byte (no newline translation) to dir/name, creating `dir`, and
// returns the path. Throws std::runtime_error when the file cannot be written, so that a test
// of a reader never silently reads a file that is not there.
std::filesystem::path write_text_file(const std::filesystem::path& dir, const std::string& name,
                                      const std::string& contents);

// The message of the UserError that `f` throws. When `f` returns normally the current test
// fails and the result is "" (any other exception propagates and fails the test too).
std::string user_error_of(const std::function<void()>& f);

}  // namespace batchsim::testing
