// Running a shell command from a calibration test: its exit status and what it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace batchsim::calibration::shell {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal, or the command could not start
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) result.output += buf.data();
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// 'text' as one shell word.
inline std::string quoted(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
inline std::string quoted(const std::filesystem::path& path) { return quoted(path.string()); }

// The last line of `text` that is not blank.
inline std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// The `batchsim` binary of this build tree, or "" when it has not been built (the calibration
// suite does not link the CLI; the tests that run it skip then).
inline std::filesystem::path built_batchsim() {
  const std::filesystem::path p = std::filesystem::path(BATCHSIM_BINARY_DIR) / "experiments" / "batchsim";
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) ? p : std::filesystem::path();
}

}  // namespace batchsim::calibration::shell
