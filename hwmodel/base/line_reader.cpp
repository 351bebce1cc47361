// batchsim — plain or gzip text, line by line (see line_reader.h).
#include "hwmodel/base/line_reader.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {
constexpr unsigned kChunkBytes = 256 * 1024;
}  // namespace

struct LineReader::GzFile {
  gzFile handle = nullptr;
  ~GzFile() {
    if (handle != nullptr) gzclose(handle);
  }
};

LineReader::LineReader(const std::filesystem::path& path, std::string what, int64_t max_line_bytes)
    : path_(path), what_(std::move(what)), max_line_bytes_(max_line_bytes), file_(std::make_unique<GzFile>()) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UserError(fmt::format("{}: is a directory, not a {}", path.string(), what_));
  }
  errno = 0;
  file_->handle = gzopen(path.c_str(), "rb");
  if (file_->handle == nullptr) {
    const int err = errno;
    if (!std::filesystem::exists(path, ec)) {
      throw UserError(fmt::format("{}: no such {}", path.string(), what_));
    }
    throw UserError(fmt::format("{}: cannot open {}{}", path.string(), what_,
                                err != 0 ? fmt::format(" ({})", std::strerror(err)) : ""));
  }
  gzbuffer(file_->handle, kChunkBytes);
}

LineReader::~LineReader() = default;

namespace {
// zlib's message for the stream's error, without the path it puts in front.
std::string zlib_error(gzFile handle, const std::filesystem::path& path, int& code) {
  std::string message = gzerror(handle, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  const std::string prefix = path.string() + ": ";
  if (message.starts_with(prefix)) message.erase(0, prefix.size());
  return message;
}
}  // namespace

bool LineReader::refill() {
  if (eof_) return false;
  buffer_.erase(0, pos_);
  pos_ = 0;
  const size_t old_size = buffer_.size();
  buffer_.resize(old_size + kChunkBytes);
  const int got = gzread(file_->handle, buffer_.data() + old_size, kChunkBytes);
  buffer_.resize(old_size + static_cast<size_t>(std::max(got, 0)));
  // A short read is the end of the file or an error; zlib reports a gzip stream cut short only
  // there (Z_BUF_ERROR), and corrupt data as a failed read (Z_DATA_ERROR).
  if (got < 0 || static_cast<unsigned>(got) < kChunkBytes) {
    int code = Z_OK;
    const std::string message = zlib_error(file_->handle, path_, code);
    if (code == Z_ERRNO) {
      throw UserError(fmt::format("{}: read error after line {}: {}", path_.string(), line_no_, message));
    }
    if (code != Z_OK) {
      throw UserError(
          fmt::format("{}: corrupt or truncated gzip data after line {}: {}", path_.string(), line_no_, message));
    }
    if (got <= 0) eof_ = true;
  }
  return got > 0;
}

bool LineReader::next(std::string& line) {
  size_t searched = pos_;
  while (true) {
    const size_t newline = buffer_.find('\n', searched);
    const size_t length = (newline != std::string::npos ? newline : buffer_.size()) - pos_;
    if (static_cast<int64_t>(length) > max_line_bytes_) {
      throw UserError(fmt::format("{}:{}: line longer than {} bytes (is this a text {}?)", path_.string(), line_no_ + 1,
                                  max_line_bytes_, what_));
    }
    if (newline != std::string::npos) {
      line.assign(buffer_, pos_, length);
      pos_ = newline + 1;
      ++line_no_;
      return true;
    }
    searched = buffer_.size() - pos_;  // offset after compaction in refill()
    if (!refill()) break;
  }
  if (pos_ < buffer_.size()) {  // a last line without '\n'
    line.assign(buffer_, pos_, std::string::npos);
    pos_ = buffer_.size();
    ++line_no_;
    return true;
  }
  return false;
}

}  // namespace batchsim
