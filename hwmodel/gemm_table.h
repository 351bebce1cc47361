// batchsim — measured GEMM times on a grid of shapes, which the cost model looks up.
//
// cuBLAS and CUTLASS pick a kernel (tile shape, split-K, stages) per GEMM shape, so real GEMM
// times step at tile boundaries (H100 bf16 at (n, k) = (4096, 4096): m 256 -> 257 costs 29%
// more) in ways that no smooth efficiency curve eta(M) follows. A hardware profile may therefore
// carry measured times on a grid of (m, n, k), one table per weight dtype (NVIDIA
// aiconfigurator's tables: 74 values of m by 22 of n by 22 of k), and the cost model looks a
// GEMM up there:
//   - within a measured (n, k) column, log time is interpolated linearly in log m between the
//     two nearest measured m (exact at grid points, so the steps at 256/257 are kept);
//   - between columns, in log k between the two nearest measured k at each of the two nearest
//     measured n, then in log n.
// Log-log interpolation is exact for every part of a GEMM that scales as a power of its sizes
// (FLOPs ~ m n k, weight bytes ~ n k), so between grid points only the tile effects are
// approximated. A shape outside the grid's span (m above its largest, n or k outside the
// measured range at the bracketing columns) has no table time: the profile's fitted roofline
// answers there (roofline.h, gemm_time_s).
//
// File format (written by `batchsim calibrate fit`, read beside a profile; see
// hwmodel/README.md): text lines, `#` comments,
//   dtype bf16                       (or fp8: the weight dtype the table times)
//   source <one line of provenance>
//   m 1 2 3 ... 32768                (the m grid, ascending)
//   column N K t_1 ... t_M           (microseconds at each m of the grid; "nan" where not timed)
// Thread safety: immutable once built; lookups are const.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hwmodel/weight_format.h"

namespace batchsim {

struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
};

class GemmTable {
 public:
  struct Column {
    int64_t n = 0, k = 0;
    std::vector<double> seconds;  // per m of the grid; NaN where not measured
  };

  GemmTable() = default;
  // From measured points (any order; repeated shapes keep the last). `dtype` is "bf16" or
  // "fp8". Throws UserError for a non-positive size or time.
  static GemmTable from_points(std::string dtype, std::string source, const std::vector<GemmPoint>& points);
  // The text format above; `where` names the file in errors.
  static GemmTable parse(const std::string& text, const std::string& where);
  std::string to_text() const;

  // Seconds of an m x k by k x n GEMM, or nullopt outside the grid's span. `m` may be
  // fractional (the rows per expert of a grouped GEMM).
  std::optional<double> seconds(double m, int64_t n, int64_t k) const;

  bool empty() const { return columns_.empty(); }
  const std::string& dtype() const { return dtype_; }
  const std::string& source() const { return source_; }
  const std::vector<int64_t>& m_grid() const { return m_; }
  const std::vector<Column>& columns() const { return columns_; }
  // Weight bytes per element of the dtype: 2 for bf16/fp16, 1 for fp8.
  WeightFormat format() const;

 private:
  void index();  // sorts the columns and builds the per-n ranges
  // log seconds at m within column c, or NaN where the column has no bracketing times.
  double log_seconds_in_column(const Column& c, double log_m) const;
  // log seconds at (m, k) among the columns of the distinct n value `n_index`, or NaN.
  double log_seconds_at_n(size_t n_index, double log_m, int64_t k) const;

  std::string dtype_ = "bf16";
  std::string source_;
  std::vector<int64_t> m_;
  std::vector<double> log_m_;
  std::vector<Column> columns_;  // sorted by (n, k)
  std::vector<int64_t> ns_;      // distinct n, ascending
  std::vector<size_t> n_first_;  // columns_ of ns_[i] are [n_first_[i], n_first_[i + 1])
};

// A table as a profile holds it: the file it came from (as the profile names it) and its text,
// parsed on first use, since shipped profiles carry tables most runs never look at.
// Thread safe: the parse happens once (std::call_once).
class GemmTableSource {
 public:
  GemmTableSource(std::string file, std::string text, std::string where)
      : file_(std::move(file)), text_(std::move(text)), where_(std::move(where)) {}
  explicit GemmTableSource(std::string file, GemmTable table);
  const std::string& file() const { return file_; }
  // Throws UserError (naming `where` and the line) when the text is malformed.
  const GemmTable& table() const;

 private:
  std::string file_, text_, where_;
  mutable std::once_flag parsed_;
  mutable GemmTable table_;
};

}  // namespace batchsim
