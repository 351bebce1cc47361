// LineReader: plain and gzip-compressed text read line by line, the same either way, and every
// way a file can be bad is a UserError naming it.
#include "hwmodel/base/line_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using testing::user_error_of;

std::vector<std::string> all_lines(const std::filesystem::path& path,
                                   int64_t max_line = LineReader::kDefaultMaxLineBytes) {
  LineReader in(path, "file", max_line);
  std::vector<std::string> lines;
  std::string line;
  while (in.next(line)) {
    lines.push_back(line);
    EXPECT_EQ(in.line_number(), static_cast<int64_t>(lines.size()));
  }
  return lines;
}

// Enough text to cross several of the reader's 256 KiB chunks, with lines of every length.
std::string long_text() {
  std::string text;
  for (int i = 0; i < 60000; ++i) text += std::string(static_cast<size_t>(i % 37), 'x') + std::to_string(i) + "\n";
  return text;
}

TEST(LineReader, GzipAndPlainFilesReadTheSameLines) {
  const auto dir = testing::scratch_dir("line_reader_same");
  const std::string text = "a,b\r\n1,2\n\nlast line without newline";
  const auto plain = testing::write_text_file(dir, "t.csv", text);
  const auto gz = testing::write_gzip_file(dir, "t.csv.gz", text);
  const std::vector<std::string> expected = {"a,b\r", "1,2", "", "last line without newline"};
  EXPECT_EQ(all_lines(plain), expected);
  EXPECT_EQ(all_lines(gz), expected);
  // The name does not matter: zlib detects gzip from the data.
  const auto misnamed = testing::write_gzip_file(dir, "compressed.csv", text);
  EXPECT_EQ(all_lines(misnamed), expected);

  const std::string big = long_text();
  const auto big_plain = testing::write_text_file(dir, "big.csv", big);
  const auto big_gz = testing::write_gzip_file(dir, "big.csv.gz", big);
  const std::vector<std::string> lines = all_lines(big_gz);
  ASSERT_EQ(lines.size(), 60000u);
  EXPECT_EQ(lines[59999], std::string(59999 % 37, 'x') + "59999");
  EXPECT_EQ(all_lines(big_plain), lines);
}

TEST(LineReader, EmptyFilesHaveNoLines) {
  const auto dir = testing::scratch_dir("line_reader_empty");
  EXPECT_TRUE(all_lines(testing::write_text_file(dir, "e.csv", "")).empty());
  EXPECT_TRUE(all_lines(testing::write_gzip_file(dir, "e.csv.gz", "")).empty());
}

TEST(LineReader, BadFilesAreNamed) {
  const auto dir = testing::scratch_dir("line_reader_bad");
  EXPECT_EQ(user_error_of([&] { LineReader r(dir / "nope.csv.gz", "trace file"); }),
            (dir / "nope.csv.gz").string() + ": no such trace file");
  EXPECT_THAT(user_error_of([&] { LineReader r(dir, "trace file"); }), HasSubstr(": is a directory, not a trace file"));

  // A gzip stream cut short: the lines before the cut are read, then the file is named.
  const auto whole = testing::write_gzip_file(dir, "whole.csv.gz", long_text());
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = testing::write_text_file(dir, "cut.csv.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(
      user_error_of([&] { all_lines(cut); }),
      AllOf(HasSubstr("cut.csv.gz: corrupt or truncated gzip data after line"), HasSubstr("unexpected end of file")));
  // Corrupt data in the middle of the stream.
  std::string corrupt = bytes;
  for (size_t i = 100; i < 200; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  const auto bad = testing::write_text_file(dir, "bad.csv.gz", corrupt);
  EXPECT_THAT(user_error_of([&] { all_lines(bad); }),
              HasSubstr("bad.csv.gz: corrupt or truncated gzip data after line"));
}

// An error in the gzip data is reported where the caller reaches it: after the last line it was
// given.
TEST(LineReader, AnErrorIsReportedAfterTheLastLineGiven) {
  const auto dir = testing::scratch_dir("line_reader_after");
  const auto whole = testing::write_gzip_file(dir, "whole.csv.gz", long_text());
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = testing::write_text_file(dir, "cut.csv.gz", bytes.substr(0, bytes.size() * 3 / 4));
  LineReader reader(cut, "file");
  std::string line;
  int64_t given = 0;
  const std::string message = user_error_of([&] {
    while (reader.next(line)) given = reader.line_number();
  });
  EXPECT_GT(given, 0);
  EXPECT_THAT(message, HasSubstr(fmt::format("cut.csv.gz: corrupt or truncated gzip data after line {}:", given)));
}

// A named pipe (--trace <(zcat t.csv.gz)) reads the same lines as the file it carries.
TEST(LineReader, NamedPipesReadTheSameLines) {
  const auto dir = testing::scratch_dir("line_reader_pipe");
  const std::string text = long_text();
  const auto gz = testing::write_gzip_file(dir, "t.csv.gz", text);
  const auto fifo = dir / "pipe";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::ofstream out(fifo, std::ios::binary);
    std::ifstream in(gz, std::ios::binary);
    out << in.rdbuf();
  });
  const auto lines = all_lines(fifo);
  writer.join();
  EXPECT_EQ(lines, all_lines(gz));
  EXPECT_EQ(lines.size(), 60000u);
}

TEST(LineReader, RefusesALineLongerThanItsLimit) {
  const auto dir = testing::scratch_dir("line_reader_long");
  const auto path = testing::write_text_file(dir, "long.csv", "short\n" + std::string(5000, 'y') + "\n");
  EXPECT_EQ(all_lines(path, 5000).size(), 2u);
  EXPECT_THAT(user_error_of([&] { all_lines(path, 4999); }), HasSubstr("long.csv:2: line longer than 4999 bytes"));
}

}  // namespace
}  // namespace batchsim
