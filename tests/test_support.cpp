#include "test_support.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace batchsim::testing {

std::filesystem::path data_dir() {
  const char* env = std::getenv("BATCHSIM_DATA_DIR");
  std::filesystem::path dir = env != nullptr ? env : BATCHSIM_DEFAULT_DATA_DIR;
  if (!std::filesystem::is_directory(dir / "traces")) {
    throw std::runtime_error("shared data not found at " + dir.string() +
                             " (set BATCHSIM_DATA_DIR to the folder holding traces/ and measured/)");
  }
  return dir;
}

std::filesystem::path source_dir() { return BATCHSIM_SOURCE_DIR; }

std::filesystem::path scratch_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(BATCHSIM_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace batchsim::testing
