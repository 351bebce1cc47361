// Helpers shared by the hwmodel test files.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "hwmodel/error.h"

namespace batchsim::testing {

// Writes `text` to dir/name (creating dir) and returns the path.
inline std::filesystem::path write_file(const std::filesystem::path& dir, const std::string& name,
                                        const std::string& text) {
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// The message of the UserError `f` throws; a test failure if it throws none.
inline std::string user_error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

}  // namespace batchsim::testing
