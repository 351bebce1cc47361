// Helpers shared by every test suite.
#pragma once

#include <filesystem>

namespace batchsim::testing {

// ../shared/data beside the repo (or $BATCHSIM_DATA_DIR). Tests that need the real traces or
// measurements fail with a clear message when it is missing: CI has it.
std::filesystem::path data_dir();
// The repository root (for shipped experiment files, profiles, plots).
std::filesystem::path source_dir();
// A fresh empty directory under the build tree for a test's outputs.
std::filesystem::path scratch_dir(const std::string& name);

}  // namespace batchsim::testing
