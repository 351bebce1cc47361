// batchsim — reading a text file line by line, plain or gzip-compressed.
//
// The repository stores its large tables and traces gzip-compressed (`conv.csv.gz`,
// `gemm_perf.csv.gz`), and users keep their own traces that way. Every reader of ours (traces,
// measurement tables) opens files through LineReader, so `foo.csv` and `foo.csv.gz` read the
// same: zlib tells a gzip stream from plain text by its first two bytes, whatever the name.
// Named pipes work too (`--trace <(zcat t.csv.gz)`), since the file is read strictly in order.
//
// Errors are UserErrors naming the file: it cannot be opened, it is not readable, or its gzip
// data is corrupt or cut short (the line where reading stopped is named).
//
// Lines are returned without their '\n' (a trailing '\r' is kept: the callers trim it).
// A line longer than `max_line_bytes` (default 64 MiB) is refused, so that a binary file or a
// device with no newline cannot grow one line until memory runs out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace batchsim {

class LineReader {
 public:
  static constexpr int64_t kDefaultMaxLineBytes = int64_t{64} << 20;

  // Opens `path`; throws UserError "<path>: no such file" / "<path>: cannot open ...".
  // `what` names the kind of file in messages ("trace file", "measurement file").
  explicit LineReader(const std::filesystem::path& path, std::string what = "file",
                      int64_t max_line_bytes = kDefaultMaxLineBytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line into `line` (without '\n'); false at the end of the file.
  bool next(std::string& line);
  // Lines returned so far (the number of the last one).
  int64_t line_number() const { return line_no_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  bool refill();

  std::filesystem::path path_;
  std::string what_;
  int64_t max_line_bytes_;
  struct GzFile;
  std::unique_ptr<GzFile> file_;
  std::string buffer_;
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0;
};

}  // namespace batchsim
