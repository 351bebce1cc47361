// batchsim — what every libFuzzer harness of tests/fuzz shares.
//
// The readers under test take file paths (a trace, a config.json, a profile), so the fuzzer's
// bytes are written to one file per process and rewritten for every input. A harness calls one
// reader and lets only UserError pass: any other exception (a std::logic_error is a bug, a
// third-party exception an unconverted parser error) escapes, and libFuzzer reports it as a
// crash with the input that caused it, as it does for every sanitizer report.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace batchsim::fuzz {

inline std::filesystem::path as_file(const uint8_t* data, size_t size, const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("batchsim-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::filesystem::path path = dir / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// Writes `text` to `file`, creating its folder: for harnesses whose reader takes a folder of files.
inline void write_file(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace batchsim::fuzz
