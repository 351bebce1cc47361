#include "test_support.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <zlib.h>

#include "hwmodel/base/error.h"

namespace batchsim::testing {

namespace {
std::filesystem::path data_folder(const char* env_subfolder, const char* repo_folder) {
  const char* env = std::getenv("BATCHSIM_DATA_DIR");
  const std::filesystem::path dir =
      env != nullptr && *env != '\0' ? std::filesystem::path(env) / env_subfolder : source_dir() / repo_folder;
  if (!std::filesystem::is_directory(dir)) {
    throw std::runtime_error("test data not found at " + dir.string() +
                             (env != nullptr ? " ($BATCHSIM_DATA_DIR/" + std::string(env_subfolder) + ")"
                                             : std::string(" (part of the repository)")));
  }
  return dir;
}
}  // namespace

std::filesystem::path traces_dir() { return data_folder("traces", "experiments/data/traces"); }
std::filesystem::path measured_dir() { return data_folder("measured", "hwmodel/measured"); }

std::filesystem::path data_file(const std::filesystem::path& dir, const std::string& relative) {
  const std::filesystem::path plain = dir / relative;
  std::filesystem::path gz = plain;
  gz += ".gz";
  return !std::filesystem::exists(plain) && std::filesystem::exists(gz) ? gz : plain;
}

std::filesystem::path source_dir() { return BATCHSIM_SOURCE_DIR; }

std::filesystem::path scratch_dir(const std::string& name) {
  // ctest runs every test as its own process, two at a time in CI, and tests of one file often
  // write the same file name: each test gets its own folder so that one never removes or
  // rewrites what another is reading.
  std::filesystem::path dir = std::filesystem::path(BATCHSIM_BINARY_DIR) / "test-scratch";
  if (const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info()) {
    dir /= std::string(test->test_suite_name()) + "." + test->name();
  }
  dir /= name;
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

std::filesystem::path write_gzip_file(const std::filesystem::path& dir, const std::string& name,
                                      const std::string& contents) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / name;
  gzFile out = gzopen(path.c_str(), "wb9");
  if (out == nullptr) throw std::runtime_error("test could not write " + path.string());
  const int written = contents.empty() ? 0 : gzwrite(out, contents.data(), static_cast<unsigned>(contents.size()));
  if (gzclose(out) != Z_OK || written != static_cast<int>(contents.size())) {
    throw std::runtime_error("test could not write " + path.string());
  }
  return path;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
