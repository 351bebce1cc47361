// batchsim — a mergeable quantile sketch with relative-error guarantees, for percentiles of
// runs too long to keep every sample (streaming mode, SimulationOptions::streaming).
//
// DDSketch (Masson, Rim, Lee, "DDSketch: A Fast and Fully-Mergeable Quantile Sketch with
// Relative-Error Guarantees", VLDB 2019): a positive value x falls in bucket
// i = ceil(log_gamma(x)) with gamma = (1 + alpha) / (1 - alpha), which covers
// (gamma^(i-1), gamma^i]; the bucket's representative 2 gamma^i / (gamma + 1) is within a
// relative `alpha` of every value in it. Storage is one count per occupied bucket index
// (dense between the lowest and highest index seen): latencies from 1 us to 1e4 s at
// alpha = 1% take about 1,150 buckets, whatever the number of samples.
//
// Invariants and guarantees:
//  * quantile(q) uses the nearest-rank definition of WeightedSamples::percentile (the smallest
//    value whose cumulative weight reaches ceil(q W)), and returns a value within a relative
//    `alpha` of that exact sample (Masson et al., Prop. 3), clamped to the exact min and max;
//    the top rank (q = 1) is the exact max.
//  * Values <= kMinPositive (zeros) go to a bucket of their own, reported as the exact minimum.
//  * merge(other) of sketches with the same alpha is the sketch of the union, count for count:
//    buckets are a pure function of the value, so merging adds counts (the paper's "fully
//    mergeable").
//  * Negative values are a caller bug (latencies and gaps are >= 0): std::logic_error.
#pragma once

#include <cstdint>
#include <vector>

namespace batchsim {

// Nearest rank of quantile q among `count` samples: ceil(q * count), at least 1 (1-based). The
// one definition of a percentile's rank for exact samples (WeightedSamples) and sketches.
int64_t nearest_rank(double q, int64_t count);

class DDSketch {
 public:
  // Values at or below this are counted as zero (far below a nanosecond, the clock's tick).
  static constexpr double kMinPositive = 1e-12;

  DDSketch() : DDSketch(0.01) {}  // implicit, so that arrays of sketches value-initialize
  explicit DDSketch(double relative_accuracy);

  void add(double value, int64_t weight = 1);
  // Adds every sample of `other`; its relative accuracy must be this one's (std::logic_error).
  void merge(const DDSketch& other);

  double relative_accuracy() const { return alpha_; }
  int64_t count() const { return count_; }
  double min() const { return count_ > 0 ? min_ : 0.0; }
  double max() const { return count_ > 0 ? max_ : 0.0; }
  // q in [0, 1]; 0 when empty. See the header comment.
  double quantile(double q) const;
  // The buckets' counts, for tests that compare sketches: zero bucket first, then by index.
  int64_t zero_count() const { return zero_count_; }
  const std::vector<int64_t>& bucket_counts() const { return counts_; }
  int32_t first_bucket_index() const { return offset_; }

 private:
  int32_t index_of(double value) const;
  double representative(int32_t index) const;
  // Makes counts_ span `index`.
  void cover(int32_t index);

  double alpha_;
  double gamma_;
  double log_gamma_;
  std::vector<int64_t> counts_;  // counts_[k] is bucket offset_ + k
  int32_t offset_ = 0;
  int64_t zero_count_ = 0;
  int64_t count_ = 0;
  double min_ = 0, max_ = 0;
};

}  // namespace batchsim
