#include "test_support.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "hwmodel/error.h"

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

std::filesystem::path write_text_file(const std::filesystem::path& dir, const std::string& name,
                                      const std::string& contents) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / name;
  std::ofstream out(path, std::ios::binary);
  out << contents;
  out.close();
  if (!out) throw std::runtime_error("test could not write " + path.string());
  return path;
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

}  // namespace batchsim::testing
