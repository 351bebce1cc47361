#include "sim/workload/trace_reader.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <memory>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "hwmodel/base/error.h"
#include "hwmodel/base/line_reader.h"

namespace batchsim {

std::string_view trace_format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAzureCsv:
      return "azure-csv";
    case TraceFormat::kGenericCsv:
      return "generic-csv";
    case TraceFormat::kMooncakeJsonl:
      return "mooncake-jsonl";
  }
  return "unknown";
}

namespace {

constexpr std::array<std::string_view, 3> kAzureHeader = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"};
constexpr std::array<std::string_view, 3> kGenericHeader = {"arrival_s", "prompt_tokens", "output_tokens"};
// Columns a CSV may add after its three, in any order, each at most once: the client's limit on
// output tokens (Request::max_tokens; generic CSV only) and the request's priority
// (Request::priority; both formats).
constexpr std::string_view kMaxTokensColumn = "max_tokens";
constexpr std::string_view kPriorityColumn = "priority";
// A CSV line has at most its three columns and the two optional ones.
constexpr size_t kMaxCsvFields = 5;
// Mooncake's hash_ids cover this many prompt tokens each (Mooncake FAST'25 trace README).
constexpr int32_t kMooncakeBlockTokens = 512;

// Absolute timestamps are kept within ±4e18 ns (about ±127 years around 1970) so that the
// difference of any two fits in int64 nanoseconds.
constexpr int64_t kMaxAbsTimeNs = 4'000'000'000'000'000'000;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Splits a CSV line on commas (our traces quote nothing). Returns the number of fields; only
// the first fields.size() are stored.
template <size_t N>
size_t split_csv(std::string_view line, std::array<std::string_view, N>& fields) {
  size_t count = 0;
  for (;;) {
    const size_t comma = line.find(',');
    const std::string_view field = trim(line.substr(0, comma));
    if (count < fields.size()) fields[count] = field;
    ++count;
    if (comma == std::string_view::npos) return count;
    line.remove_prefix(comma + 1);
  }
}

std::optional<int64_t> parse_int64(std::string_view s) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

std::optional<double> parse_double(std::string_view s) {
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// The last date a trace's timestamps named, with its day number: an Azure trace's rows share
// their date (it spans an hour), so its calendar arithmetic and checks run once per date.
struct DateMemo {
  std::array<char, 10> text{};
  int64_t days = 0;
  bool valid = false;
};

// "YYYY-MM-DD HH:MM:SS[.fffffffff][Z|±HH:MM]" → ns since 1970-01-01 UTC, or nullopt.
// Calendar arithmetic by std::chrono (days_from_civil), so day, month, year and leap-day
// rollovers need no special case.
std::optional<int64_t> parse_timestamp_ns(std::string_view s, DateMemo& memo) {
  size_t pos = 0;
  const auto digits = [&](int n, int& out) {
    if (pos + n > s.size()) return false;
    int value = 0;
    for (int i = 0; i < n; ++i) {
      const char c = s[pos + i];
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    pos += n;
    out = value;
    return true;
  };
  const auto expect = [&](char c) {
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  };
  int64_t days = 0;
  if (memo.valid && s.size() > memo.text.size() && std::equal(memo.text.begin(), memo.text.end(), s.begin())) {
    days = memo.days;  // the date of the row before: valid, its day number known
    pos = memo.text.size();
  } else {
    int year = 0, month = 0, day = 0;
    if (!digits(4, year) || !expect('-') || !digits(2, month) || !expect('-') || !digits(2, day)) {
      return std::nullopt;
    }
    if (year < 1900 || year > 2100) return std::nullopt;
    const std::chrono::year_month_day date{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                                           std::chrono::day{static_cast<unsigned>(day)}};
    if (!date.ok()) return std::nullopt;  // e.g. 2023-02-29
    days = std::chrono::sys_days{date}.time_since_epoch().count();
    std::copy_n(s.begin(), memo.text.size(), memo.text.begin());
    memo.days = days;
    memo.valid = true;
  }
  int hour = 0, minute = 0, second = 0;
  if (!expect(' ') && !expect('T')) return std::nullopt;
  if (!digits(2, hour) || !expect(':') || !digits(2, minute) || !expect(':') || !digits(2, second)) {
    return std::nullopt;
  }
  int64_t fraction_ns = 0;
  if (expect('.')) {
    int n = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (n == 9) return std::nullopt;  // finer than a nanosecond: not a format we know
      fraction_ns = fraction_ns * 10 + (s[pos] - '0');
      ++n;
      ++pos;
    }
    if (n == 0) return std::nullopt;
    for (; n < 9; ++n) fraction_ns *= 10;
  }
  int64_t utc_offset_s = 0;
  if (expect('Z')) {
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int sign = s[pos] == '-' ? -1 : 1;
    ++pos;
    int offset_h = 0, offset_min = 0;
    if (!digits(2, offset_h) || !expect(':') || !digits(2, offset_min) || offset_h > 23 || offset_min > 59) {
      return std::nullopt;
    }
    utc_offset_s = sign * (offset_h * 3600 + offset_min * 60);
  }
  if (pos != s.size()) return std::nullopt;
  if (hour > 23 || minute > 59 || second > 59) return std::nullopt;
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - utc_offset_s;
  return seconds * 1'000'000'000 + fraction_ns;
}

// A row as read, before sorting and offsetting.
struct RawRow {
  int64_t time_ns;
  int32_t prompt_tokens;
  int32_t output_tokens;
  int32_t max_tokens = 0;  // 0: the trace has no max_tokens column
  int32_t priority = 0;    // 0 also without a priority column
};

class TraceParser {
 public:
  TraceParser(const std::filesystem::path& path, int64_t max_requests)
      : path_(path), name_(path.string()), max_requests_(max_requests) {}

  TraceReadResult read(double speedup);
  // The rows of `columns` instead of a file; `name_` (the path given) names them.
  TraceReadResult read_columns(const TraceColumns& columns, double speedup);

  // Streaming (TraceStream): open() detects the format; take_row() then hands out the rows one
  // at a time in file order (refusing what a stream cannot do), keeping none of them.
  void open();
  // The row's hash_ids go to `hashes` (cleared when it has none).
  std::optional<RawRow> take_row(std::vector<uint64_t>& hashes);
  // A row's arrival: its offset from the first row's time, divided by `speedup`.
  int64_t arrival_ns(int64_t time_ns, int64_t first_ns, double speedup) const;
  // One line per kind of adjustment made to the rows read so far, naming the file.
  std::vector<std::string> adjustment_warnings(int64_t rows_read, int64_t rows_out_of_order) const;
  TraceFormat format() const { return format_; }
  bool has_max_tokens() const { return has_max_tokens_; }
  bool has_priority() const { return has_priority_; }
  int64_t rows_taken() const { return taken_; }
  // Whether the rows carry hash_ids, as the first row taken decided.
  bool keeps_hashes() const { return hash_mode_ == HashMode::kKeep; }

 private:
  [[noreturn]] void fail_line(std::string_view what) const {
    if (in_memory_) throw UserError(fmt::format("{} row {}: {}", name_, line_no_, what));
    throw UserError(fmt::format("{}:{}: {}", name_, line_no_, what));
  }
  [[noreturn]] void fail_file(std::string_view what) const { throw UserError(fmt::format("{}: {}", name_, what)); }
  // Next non-blank line (trimmed, without its line end) into `line`; false at end of file.
  bool next_line(std::string_view& line);
  bool want_more() const { return max_requests_ == 0 || static_cast<int64_t>(rows_.size()) + taken_ < max_requests_; }
  // Parses the next data line into rows_; false at the end of the file or of max_requests.
  bool read_row();

  int32_t length(int64_t value, std::string_view column, int64_t& clamped_rows) const;
  int32_t length_text(std::string_view text, std::string_view column, int64_t& clamped_rows) const;

  void read_azure_row(std::string_view line);
  void read_generic_row(std::string_view line);
  int32_t max_tokens_text(std::string_view text) const;
  int32_t priority_text(std::string_view text) const;
  int32_t priority_value(int64_t value) const;
  // The columns a CSV header names after its format's three, which `optional` allows; false
  // for a header that is not `leading` followed by such columns. A repeated or unknown
  // optional column is a line error naming it.
  bool read_csv_header(std::string_view line, const std::array<std::string_view, 3>& leading,
                       std::span<const std::string_view> optional);
  void read_mooncake_row(std::string_view line);
  void read_mooncake_row_with_nlohmann(std::string_view line);
  int64_t timestamp_ns_from_ms(int64_t ms) const;
  int64_t timestamp_ns_from_ms(double ms) const;
  // The first `expected` fields of a line that must have exactly that many (at most N).
  template <size_t N>
  void split_fields(std::string_view line, std::array<std::string_view, N>& fields, size_t expected = N) const;

  TraceReadResult finish(double speedup);

  std::filesystem::path path_;
  std::string name_;
  int64_t max_requests_;
  std::unique_ptr<LineReader> in_;  // plain or gzip text
  std::string buffer_;
  int64_t line_no_ = 0;  // for in-memory columns: the row, from 0
  bool in_memory_ = false;

  TraceFormat format_ = TraceFormat::kGenericCsv;
  bool has_max_tokens_ = false;  // a generic CSV with the max_tokens column
  bool has_priority_ = false;    // any format with a priority column (JSONL: key)
  size_t csv_fields_ = 3;        // fields on every CSV line
  size_t max_tokens_field_ = 0;  // their positions, when present
  size_t priority_field_ = 0;
  DateMemo date_memo_;  // an Azure trace's TIMESTAMP date, parsed once
  std::vector<RawRow> rows_;
  int64_t taken_ = 0;  // rows handed out by take_row (and no longer in rows_)
  int64_t last_taken_ns_ = 0;
  enum class HashMode { kUndecided, kKeep, kNone } hash_mode_ = HashMode::kUndecided;  // take_row's
  std::vector<int64_t> hash_offsets_{0};
  std::vector<uint64_t> hashes_;
  std::vector<int64_t> row_lines_;  // a JSONL row's line in the file (read(), not take_row)
  bool any_hash_ids_ = false;
  int64_t prompt_clamped_ = 0;
  int64_t output_clamped_ = 0;
};

bool TraceParser::next_line(std::string_view& line) {
  while (in_->next(buffer_)) {
    line_no_ = in_->line_number();
    std::string_view view = buffer_;
    if (line_no_ == 1 && view.starts_with("\xEF\xBB\xBF")) view.remove_prefix(3);  // UTF-8 BOM
    view = trim(view);
    if (!view.empty()) {
      line = view;
      return true;
    }
  }
  return false;
}

int32_t TraceParser::length(int64_t value, std::string_view column, int64_t& clamped_rows) const {
  if (value < 0) fail_line(fmt::format("{} must be >= 0, got {}", column, value));
  if (value > std::numeric_limits<int32_t>::max()) {
    fail_line(fmt::format("{} = {} is more than {} tokens", column, value, std::numeric_limits<int32_t>::max()));
  }
  if (value == 0) {  // see "Zero lengths" in trace_reader.h
    ++clamped_rows;
    return 1;
  }
  return static_cast<int32_t>(value);
}

int32_t TraceParser::length_text(std::string_view text, std::string_view column, int64_t& clamped_rows) const {
  const std::optional<int64_t> value = parse_int64(text);
  if (!value) fail_line(fmt::format("{} \"{}\" is not an integer", column, text));
  return length(*value, column, clamped_rows);
}

template <size_t N>
void TraceParser::split_fields(std::string_view line, std::array<std::string_view, N>& fields, size_t expected) const {
  const size_t count = split_csv(line, fields);
  if (count != expected) fail_line(fmt::format("expected {} fields, got {}", expected, count));
}

void TraceParser::read_azure_row(std::string_view line) {
  std::array<std::string_view, kMaxCsvFields> fields;
  split_fields(line, fields, csv_fields_);
  const std::optional<int64_t> time_ns = parse_timestamp_ns(fields[0], date_memo_);
  if (!time_ns) {
    fail_line(
        fmt::format("TIMESTAMP \"{}\" is not a date and time like 2023-11-16 18:17:03.9799600 "
                    "(years 1900-2100)",
                    fields[0]));
  }
  const int32_t prompt = length_text(fields[1], "ContextTokens", prompt_clamped_);
  const int32_t output = length_text(fields[2], "GeneratedTokens", output_clamped_);
  const int32_t priority = has_priority_ ? priority_text(fields[priority_field_]) : 0;
  rows_.push_back({*time_ns, prompt, output, 0, priority});
}

int32_t TraceParser::max_tokens_text(std::string_view text) const {
  // Unlike a zero length (see "Zero lengths"), a limit of 0 tokens is no request a server
  // accepts (OpenAI's and TGI's max_tokens are >= 1): the row is malformed.
  if (const std::optional<int64_t> value = parse_int64(text); value && *value < 1) {
    fail_line(fmt::format("max_tokens must be >= 1, got {}", *value));
  }
  int64_t never_clamped = 0;
  return length_text(text, "max_tokens", never_clamped);
}

int32_t TraceParser::priority_value(int64_t value) const {
  // vLLM takes any Python int; ours are int32, as wide as any priority scheme needs.
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    fail_line(fmt::format("priority {} is out of range [{}, {}]", value, std::numeric_limits<int32_t>::min(),
                          std::numeric_limits<int32_t>::max()));
  }
  return static_cast<int32_t>(value);
}

int32_t TraceParser::priority_text(std::string_view text) const {
  const std::optional<int64_t> value = parse_int64(text);
  if (!value) fail_line(fmt::format("priority \"{}\" is not an integer", text));
  return priority_value(*value);
}

bool TraceParser::read_csv_header(std::string_view line, const std::array<std::string_view, 3>& leading,
                                  std::span<const std::string_view> optional) {
  std::array<std::string_view, kMaxCsvFields + 1> fields;
  const size_t count = split_csv(line, fields);
  if (count < leading.size() || !std::equal(leading.begin(), leading.end(), fields.begin())) {
    return false;
  }
  if (count > kMaxCsvFields) fail_line(fmt::format("expected at most {} columns, got {}", kMaxCsvFields, count));
  for (size_t i = leading.size(); i < count; ++i) {
    const std::string_view column = fields[i];
    if (std::find(optional.begin(), optional.end(), column) == optional.end()) {
      fail_line(
          fmt::format("unknown column \"{}\" after {}; the optional columns of this format "
                      "are {}",
                      column, fmt::join(leading, ","), fmt::join(optional, ", ")));
    }
    bool& seen = column == kPriorityColumn ? has_priority_ : has_max_tokens_;
    if (seen) fail_line(fmt::format("column \"{}\" appears twice", column));
    seen = true;
    (column == kPriorityColumn ? priority_field_ : max_tokens_field_) = i;
  }
  csv_fields_ = count;
  return true;
}

void TraceParser::read_generic_row(std::string_view line) {
  std::array<std::string_view, kMaxCsvFields> fields;
  split_fields(line, fields, csv_fields_);
  const std::optional<double> arrival_s = parse_double(fields[0]);
  if (!arrival_s) fail_line(fmt::format("arrival_s \"{}\" is not a number", fields[0]));
  if (std::abs(*arrival_s) * 1e9 > static_cast<double>(kMaxAbsTimeNs)) {
    fail_line(fmt::format("arrival_s {} is out of range (|arrival_s| <= 4e9)", fields[0]));
  }
  const int32_t prompt = length_text(fields[1], "prompt_tokens", prompt_clamped_);
  const int32_t output = length_text(fields[2], "output_tokens", output_clamped_);
  const int32_t max_tokens = has_max_tokens_ ? max_tokens_text(fields[max_tokens_field_]) : 0;
  const int32_t priority = has_priority_ ? priority_text(fields[priority_field_]) : 0;
  rows_.push_back({std::llround(*arrival_s * 1e9), prompt, output, max_tokens, priority});
}

// Scans Mooncake's flat JSON objects without building a DOM: {"key": number | [integers], ...}.
// nlohmann::json builds a node per hash id, which made a 12k-line trace take ~0.25 s; this
// covers the traces' own subset in a few ms. Anything outside it (strings, nested values,
// escapes, booleans, a float length, a missing key, a malformed line) makes it decline, and
// the line is parsed by nlohmann::json, which also words every error. So the fast path never
// decides what is valid, only how fast a valid line is read.
class FlatJsonScanner {
 public:
  explicit FlatJsonScanner(std::string_view text) : text_(text) {}

  struct Fields {
    std::optional<int64_t> timestamp_ms_int;
    std::optional<double> timestamp_ms_float;
    std::optional<int64_t> input_length;
    std::optional<int64_t> output_length;
    std::optional<int64_t> priority;
    bool has_hash_ids = false;
  };

  // Appends hash ids to `hashes`; on false, `hashes` is as it was.
  bool scan(Fields& fields, std::vector<uint64_t>& hashes) {
    const size_t hashes_before = hashes.size();
    if (!scan_object(fields, hashes)) {
      hashes.resize(hashes_before);
      return false;
    }
    return true;
  }

 private:
  bool scan_object(Fields& fields, std::vector<uint64_t>& hashes) {
    skip_space();
    if (!eat('{')) return false;
    skip_space();
    if (eat('}')) return at_end();
    for (;;) {
      std::string_view key;
      if (!scan_key(key)) return false;
      skip_space();
      if (!eat(':')) return false;
      skip_space();
      if (key == "hash_ids") {
        if (fields.has_hash_ids || !scan_id_array(hashes)) return false;
        fields.has_hash_ids = true;
      } else {
        std::optional<int64_t> integer;
        std::optional<double> real;
        if (pos_ < text_.size() && text_[pos_] == '[') {
          std::vector<uint64_t> ignored;  // another array-valued key: not ours
          if (!scan_id_array(ignored)) return false;
        } else if (!scan_number(integer, real)) {
          return false;
        }
        if (key == "timestamp") {
          fields.timestamp_ms_int = integer;
          fields.timestamp_ms_float = real;
        } else if (key == "input_length" || key == "output_length" || key == kPriorityColumn) {
          if (!integer) return false;  // a float or an array: nlohmann reports it
          (key == "input_length"    ? fields.input_length
           : key == "output_length" ? fields.output_length
                                    : fields.priority) = integer;
        }
      }
      skip_space();
      if (eat('}')) return at_end();
      if (!eat(',')) return false;
      skip_space();
    }
  }

  bool scan_key(std::string_view& key) {
    if (!eat('"')) return false;
    const size_t close = text_.find('"', pos_);
    if (close == std::string_view::npos) return false;
    key = text_.substr(pos_, close - pos_);
    if (key.find('\\') != std::string_view::npos) return false;  // escapes: leave to nlohmann
    pos_ = close + 1;
    return true;
  }

  bool scan_id_array(std::vector<uint64_t>& ids) {
    if (!eat('[')) return false;
    skip_space();
    if (eat(']')) return true;
    for (;;) {
      std::optional<int64_t> integer;
      std::optional<double> real;
      if (!scan_number(integer, real) || !integer || *integer < 0) return false;
      ids.push_back(static_cast<uint64_t>(*integer));
      skip_space();
      if (eat(']')) return true;
      if (!eat(',')) return false;
      skip_space();
    }
  }

  // A JSON number (RFC 8259 grammar, checked here because from_chars is laxer): an integer
  // that fits int64 into `integer`, anything with a fraction or exponent into `real`.
  bool scan_number(std::optional<int64_t>& integer, std::optional<double>& real) {
    const size_t start = pos_;
    eat('-');
    if (eat('0')) {
    } else if (!eat_digits()) {
      return false;
    }
    bool is_real = false;
    if (eat('.')) {
      if (!eat_digits()) return false;
      is_real = true;
    }
    if (eat('e') || eat('E')) {
      if (!eat('+')) eat('-');
      if (!eat_digits()) return false;
      is_real = true;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (is_real) {
      double value = 0;
      const auto [end, ec] = std::from_chars(first, last, value);
      if (ec != std::errc() || end != last || !std::isfinite(value)) return false;
      real = value;
    } else {
      int64_t value = 0;
      const auto [end, ec] = std::from_chars(first, last, value);
      if (ec != std::errc() || end != last) return false;  // beyond int64: nlohmann's turn
      integer = value;
    }
    return true;
  }

  bool eat_digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  bool eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r' || text_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

int64_t TraceParser::timestamp_ns_from_ms(int64_t ms) const {
  constexpr int64_t kMaxAbsMs = kMaxAbsTimeNs / 1'000'000;
  if (ms > kMaxAbsMs || ms < -kMaxAbsMs) {
    fail_line(fmt::format("\"timestamp\" = {} ms is out of range", ms));
  }
  return ms * 1'000'000;
}

int64_t TraceParser::timestamp_ns_from_ms(double ms) const {
  constexpr double kMaxAbsMs = static_cast<double>(kMaxAbsTimeNs / 1'000'000);
  if (!(std::abs(ms) <= kMaxAbsMs)) {
    fail_line(fmt::format("\"timestamp\" = {} ms is out of range", ms));
  }
  return std::llround(ms * 1e6);
}

void TraceParser::read_mooncake_row(std::string_view line) {
  FlatJsonScanner::Fields fields;
  if (FlatJsonScanner(line).scan(fields, hashes_) && (fields.timestamp_ms_int || fields.timestamp_ms_float) &&
      fields.input_length && fields.output_length) {
    const int64_t time_ns = fields.timestamp_ms_int ? timestamp_ns_from_ms(*fields.timestamp_ms_int)
                                                    : timestamp_ns_from_ms(*fields.timestamp_ms_float);
    const int32_t prompt = length(*fields.input_length, "input_length", prompt_clamped_);
    const int32_t output = length(*fields.output_length, "output_length", output_clamped_);
    any_hash_ids_ |= fields.has_hash_ids;
    has_priority_ |= fields.priority.has_value();
    const int32_t priority = fields.priority ? priority_value(*fields.priority) : 0;
    hash_offsets_.push_back(static_cast<int64_t>(hashes_.size()));
    row_lines_.push_back(line_no_);
    rows_.push_back({time_ns, prompt, output, 0, priority});
    return;
  }
  // Declined (hashes_ untouched): a line outside the flat subset, or a malformed one.
  read_mooncake_row_with_nlohmann(line);
}

void TraceParser::read_mooncake_row_with_nlohmann(std::string_view line) {
  using nlohmann::json;
  json object;
  try {
    object = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {
    // parse_error, or out_of_range for a number beyond a double (1e400).
    // e.what() is "[json.exception.parse_error.101] parse error at ...": keep the readable part.
    std::string_view what = e.what();
    if (const size_t bracket = what.find("] "); bracket != std::string_view::npos) {
      what.remove_prefix(bracket + 2);
    }
    fail_line(fmt::format("not a JSON object: {}", what));
  }
  if (!object.is_object()) fail_line("not a JSON object");
  const auto shown = [](const json& value) {
    std::string text = value.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
  };
  const auto field = [&](const char* key) -> const json& {
    const auto it = object.find(key);
    if (it == object.end()) fail_line(fmt::format("missing \"{}\"", key));
    return *it;
  };
  // Integral JSON number (5 or 5.0) as int64, or a line error.
  const auto integer = [&](const char* key, const json& value) -> int64_t {
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_line(fmt::format("\"{}\" = {} is out of range", key, shown(value)));
      }
      return static_cast<int64_t>(u);
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_number_float()) {
      const double d = value.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e18) {
        return static_cast<int64_t>(d);
      }
    }
    fail_line(fmt::format("\"{}\" must be an integer, got {}", key, shown(value)));
  };

  const json& timestamp = field("timestamp");
  int64_t time_ns = 0;
  if (timestamp.is_number_integer() || timestamp.is_number_unsigned()) {
    time_ns = timestamp_ns_from_ms(integer("timestamp", timestamp));
  } else if (timestamp.is_number_float()) {
    time_ns = timestamp_ns_from_ms(timestamp.get<double>());
  } else {
    fail_line(fmt::format("\"timestamp\" must be a number of ms, got {}", shown(timestamp)));
  }
  const int32_t prompt = length(integer("input_length", field("input_length")), "input_length", prompt_clamped_);
  const int32_t output = length(integer("output_length", field("output_length")), "output_length", output_clamped_);

  if (const auto it = object.find("hash_ids"); it != object.end()) {
    if (!it->is_array()) fail_line(fmt::format("\"hash_ids\" must be an array, got {}", shown(*it)));
    for (const json& id : *it) {
      const int64_t value = integer("hash_ids", id);
      if (value < 0) fail_line(fmt::format("\"hash_ids\" has a negative id {}", value));
      hashes_.push_back(static_cast<uint64_t>(value));
    }
    any_hash_ids_ = true;
  }
  int32_t priority = 0;
  if (const auto it = object.find(kPriorityColumn); it != object.end()) {
    priority = priority_value(integer("priority", *it));
    has_priority_ = true;
  }
  hash_offsets_.push_back(static_cast<int64_t>(hashes_.size()));
  row_lines_.push_back(line_no_);
  rows_.push_back({time_ns, prompt, output, 0, priority});
}

void TraceParser::open() {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec)) fail_file("is a directory, not a trace file");
  // A character device (/dev/zero, /dev/urandom) never ends. Pipes stay allowed (--trace
  // <(my-generator)); gzip files need none, LineReader reads them as they are.
  if (std::filesystem::is_character_file(path_, ec)) fail_file("is a device, not a trace file");
  in_ = std::make_unique<LineReader>(path_, "trace file");
  std::string_view line;
  if (!next_line(line)) fail_file("empty file, expected a trace header or a JSON line");

  constexpr std::string_view kAzureOptional[] = {kPriorityColumn};
  constexpr std::string_view kGenericOptional[] = {kMaxTokensColumn, kPriorityColumn};
  if (read_csv_header(line, kAzureHeader, kAzureOptional)) {
    format_ = TraceFormat::kAzureCsv;
  } else if (read_csv_header(line, kGenericHeader, kGenericOptional)) {
    format_ = TraceFormat::kGenericCsv;
  } else if (line.starts_with('{')) {
    format_ = TraceFormat::kMooncakeJsonl;
    if (want_more()) read_mooncake_row(line);  // JSONL has no header: line 1 is data
  } else {
    std::string shown(line.substr(0, 60));
    if (line.size() > 60) shown += "...";
    fail_line(
        fmt::format("unrecognised trace header \"{}\"; expected \"TIMESTAMP,ContextTokens,GeneratedTokens\" "
                    "(Azure LLM inference CSV), \"arrival_s,prompt_tokens,output_tokens\" (generic CSV) or "
                    "one JSON object per line (Mooncake JSONL)",
                    shown));
  }
}

bool TraceParser::read_row() {
  std::string_view line;
  if (!want_more() || !next_line(line)) return false;
  switch (format_) {
    case TraceFormat::kAzureCsv:
      read_azure_row(line);
      break;
    case TraceFormat::kGenericCsv:
      read_generic_row(line);
      break;
    case TraceFormat::kMooncakeJsonl:
      read_mooncake_row(line);
      break;
  }
  return true;
}

TraceReadResult TraceParser::read(double speedup) {
  open();
  while (read_row()) {
  }
  return finish(speedup);
}

std::optional<RawRow> TraceParser::take_row(std::vector<uint64_t>& hashes) {
  if (rows_.empty() && !read_row()) return std::nullopt;  // (a JSONL file's first row came with open())
  const RawRow row = rows_.front();
  rows_.clear();
  ++taken_;
  // The first row decides whether requests carry prompt-block hashes (a streaming run sets up
  // prefix caching before it starts); a later row without hash_ids has none, as in read().
  if (hash_mode_ == HashMode::kUndecided) hash_mode_ = any_hash_ids_ ? HashMode::kKeep : HashMode::kNone;
  if (hash_mode_ == HashMode::kNone && any_hash_ids_) {
    fail_line(
        "hash_ids here but not on the first row: --streaming decides from the first row whether requests "
        "carry prompt-block hashes; give the first row hash_ids, or run without --streaming");
  }
  hashes.assign(hashes_.begin(), hashes_.end());  // this row's only: they are cleared per row
  hashes_.clear();
  hash_offsets_.resize(1);
  row_lines_.clear();
  if (taken_ > 1 && row.time_ns < last_taken_ns_) {
    fail_line(
        "timestamp earlier than the row above: --streaming reads a trace in file order and cannot "
        "sort it; sort the file by time, or run without --streaming");
  }
  if (taken_ > std::numeric_limits<RequestId>::max()) fail_file("too many requests for 32-bit request ids");
  last_taken_ns_ = row.time_ns;
  return row;
}

int64_t TraceParser::arrival_ns(int64_t time_ns, int64_t first_ns, double speedup) const {
  int64_t offset_ns = time_ns - first_ns;  // both within ±4e18: no overflow
  if (speedup == 1.0) return offset_ns;
  const double scaled_ns = static_cast<double>(offset_ns) / speedup;
  if (scaled_ns > 9.2e18) {
    throw UserError(fmt::format("--trace-speedup: {} stretches {} beyond the simulated time range", speedup, name_));
  }
  return std::llround(scaled_ns);
}

TraceReadResult TraceParser::read_columns(const TraceColumns& columns, double speedup) {
  in_memory_ = true;
  const size_t n = columns.arrival_s.size();
  const auto check_size = [&](size_t size, std::string_view column, bool optional) {
    if (size == n || (optional && size == 0)) return;
    fail_file(fmt::format("{} has {} values, arrival_s has {}", column, size, n));
  };
  check_size(columns.prompt_tokens.size(), "prompt_tokens", false);
  check_size(columns.output_tokens.size(), "output_tokens", false);
  check_size(columns.max_tokens.size(), "max_tokens", true);
  check_size(columns.priority.size(), "priority", true);
  has_max_tokens_ = !columns.max_tokens.empty();
  has_priority_ = !columns.priority.empty();
  // The checks of read_generic_row, on numbers instead of text.
  for (size_t i = 0; i < n && want_more(); ++i) {
    line_no_ = static_cast<int64_t>(i);
    const double arrival_s = columns.arrival_s[i];
    if (!std::isfinite(arrival_s) || std::abs(arrival_s) * 1e9 > static_cast<double>(kMaxAbsTimeNs)) {
      fail_line(fmt::format("arrival_s {} is out of range (|arrival_s| <= 4e9)", arrival_s));
    }
    const int32_t prompt = length(columns.prompt_tokens[i], "prompt_tokens", prompt_clamped_);
    const int32_t output = length(columns.output_tokens[i], "output_tokens", output_clamped_);
    int32_t max_tokens = 0;
    if (has_max_tokens_) {
      if (columns.max_tokens[i] < 1) fail_line(fmt::format("max_tokens must be >= 1, got {}", columns.max_tokens[i]));
      int64_t never_clamped = 0;
      max_tokens = length(columns.max_tokens[i], "max_tokens", never_clamped);
    }
    const int32_t priority = has_priority_ ? priority_value(columns.priority[i]) : 0;
    rows_.push_back({std::llround(arrival_s * 1e9), prompt, output, max_tokens, priority});
  }
  return finish(speedup);
}

std::vector<std::string> TraceParser::adjustment_warnings(int64_t rows_read, int64_t rows_out_of_order) const {
  std::vector<std::string> warnings;
  const std::string_view prompt_column = format_ == TraceFormat::kAzureCsv     ? "ContextTokens"
                                         : format_ == TraceFormat::kGenericCsv ? "prompt_tokens"
                                                                               : "input_length";
  const std::string_view output_column = format_ == TraceFormat::kAzureCsv     ? "GeneratedTokens"
                                         : format_ == TraceFormat::kGenericCsv ? "output_tokens"
                                                                               : "output_length";
  if (prompt_clamped_ > 0) {
    warnings.push_back(fmt::format("{}: {} of {} requests have {}=0; given 1 prompt token (a prefill needs one)", name_,
                                   prompt_clamped_, rows_read, prompt_column));
  }
  if (output_clamped_ > 0) {
    warnings.push_back(fmt::format("{}: {} of {} requests have {}=0; given 1 output token (the prefill samples one)",
                                   name_, output_clamped_, rows_read, output_column));
  }
  if (rows_out_of_order > 0) {
    warnings.push_back(
        fmt::format("{}: {} rows have a timestamp earlier than the row above; requests sorted by arrival "
                    "(ties keep file order)",
                    name_, rows_out_of_order));
  }
  return warnings;
}

TraceReadResult TraceParser::finish(double speedup) {
  TraceReadResult result;
  result.format = format_;
  result.rows_read = static_cast<int64_t>(rows_.size());
  result.rows_prompt_clamped = prompt_clamped_;
  result.rows_output_clamped = output_clamped_;
  result.priority_column = has_priority_;
  if (rows_.empty()) fail_file("no requests in trace");
  if (rows_.size() > static_cast<size_t>(std::numeric_limits<RequestId>::max())) {
    fail_file("too many requests for 32-bit request ids");
  }

  for (size_t i = 1; i < rows_.size(); ++i) {
    if (rows_[i].time_ns < rows_[i - 1].time_ns) ++result.rows_out_of_order;
  }
  std::vector<int32_t> order(rows_.size());
  std::iota(order.begin(), order.end(), 0);
  if (result.rows_out_of_order > 0) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return rows_[a].time_ns < rows_[b].time_ns; });
  }

  const int64_t first_ns = rows_[order.front()].time_ns;
  result.requests.reserve(rows_.size());
  if (has_max_tokens_) result.max_tokens.reserve(rows_.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const RawRow& row = rows_[order[k]];
    const int64_t offset_ns = arrival_ns(row.time_ns, first_ns, speedup);
    result.requests.push_back(Request{.id = static_cast<RequestId>(k),
                                      .arrival = SimTime::from_ns(offset_ns),
                                      .prompt_tokens = row.prompt_tokens,
                                      .output_tokens = row.output_tokens,
                                      .priority = row.priority});
    if (has_max_tokens_) result.max_tokens.push_back(row.max_tokens);
  }

  if (any_hash_ids_) {
    PrefixBlockHashes& blocks = result.prefix_blocks;
    blocks.block_tokens = kMooncakeBlockTokens;
    blocks.offsets.reserve(rows_.size() + 1);
    blocks.hashes.reserve(hashes_.size());
    blocks.offsets.push_back(0);
    for (int32_t row : order) {
      blocks.hashes.insert(blocks.hashes.end(), hashes_.begin() + hash_offsets_[row],
                           hashes_.begin() + hash_offsets_[row + 1]);
      blocks.offsets.push_back(static_cast<int64_t>(blocks.hashes.size()));
    }
    result.lines.reserve(rows_.size());
    for (int32_t row : order) result.lines.push_back(row_lines_[static_cast<size_t>(row)]);
  }

  result.warnings = adjustment_warnings(result.rows_read, result.rows_out_of_order);
  return result;
}

void check_read_arguments(int64_t max_requests, double speedup) {
  if (max_requests < 0) {
    throw UserError(fmt::format("--num-requests: must be >= 0 (0 = all), got {}", max_requests));
  }
  if (!(std::isfinite(speedup) && speedup > 0.0)) {
    throw UserError(fmt::format("--trace-speedup: must be a number > 0, got {}", speedup));
  }
}

}  // namespace

TraceReadResult read_trace_detailed(const std::filesystem::path& path, int64_t max_requests, double speedup) {
  check_read_arguments(max_requests, speedup);
  return TraceParser(path, max_requests).read(speedup);
}

TraceReadResult read_trace_columns(const TraceColumns& columns, std::string_view name, int64_t max_requests,
                                   double speedup) {
  check_read_arguments(max_requests, speedup);
  return TraceParser(std::filesystem::path(name), max_requests).read_columns(columns, speedup);
}

struct TraceStream::Impl {
  Impl(const std::filesystem::path& path, int64_t max_requests) : parser(path, max_requests) {}
  TraceParser parser;
  double speedup = 1.0;
  std::optional<RawRow> ahead;                 // the next row, read before it is asked for
  std::vector<uint64_t> ahead_hashes, hashes;  // its hash_ids, and those of the row handed out
  int64_t first_ns = 0;
};

TraceStream::TraceStream(const std::filesystem::path& path, int64_t max_requests, double speedup) {
  check_read_arguments(max_requests, speedup);
  impl_ = std::make_unique<Impl>(path, max_requests);
  impl_->speedup = speedup;
  impl_->parser.open();
  impl_->ahead = impl_->parser.take_row(impl_->ahead_hashes);
  if (!impl_->ahead) throw UserError(fmt::format("{}: no requests in trace", path.string()));
  impl_->first_ns = impl_->ahead->time_ns;
}

TraceStream::~TraceStream() = default;
TraceStream::TraceStream(TraceStream&&) noexcept = default;
TraceStream& TraceStream::operator=(TraceStream&&) noexcept = default;

std::optional<TraceStream::Row> TraceStream::next() {
  Impl& s = *impl_;
  if (!s.ahead) return std::nullopt;
  const RawRow row = *s.ahead;
  const int64_t id = s.parser.rows_taken() - 1;  // the row ahead is the last one taken
  std::swap(s.hashes, s.ahead_hashes);
  s.ahead = s.parser.take_row(s.ahead_hashes);
  Row out;
  out.request = Request{.id = static_cast<RequestId>(id),
                        .arrival = SimTime::from_ns(s.parser.arrival_ns(row.time_ns, s.first_ns, s.speedup)),
                        .prompt_tokens = row.prompt_tokens,
                        .output_tokens = row.output_tokens,
                        .priority = row.priority};
  out.max_tokens = row.max_tokens;
  out.hashes = s.hashes;
  return out;
}

TraceFormat TraceStream::format() const { return impl_->parser.format(); }
bool TraceStream::has_max_tokens_column() const { return impl_->parser.has_max_tokens(); }
int32_t TraceStream::prefix_block_tokens() const { return impl_->parser.keeps_hashes() ? kMooncakeBlockTokens : 0; }
bool TraceStream::priority_column() const { return impl_->parser.has_priority(); }
std::vector<std::string> TraceStream::warnings() const {
  return impl_->parser.adjustment_warnings(impl_->parser.rows_taken(), /*rows_out_of_order=*/0);
}

}  // namespace batchsim
