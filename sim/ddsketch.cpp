#include "sim/ddsketch.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace batchsim {

int64_t nearest_rank(double q, int64_t count) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * static_cast<double>(count) - 1e-9)));
}

DDSketch::DDSketch(double relative_accuracy) : alpha_(relative_accuracy) {
  if (!(relative_accuracy > 0.0 && relative_accuracy < 1.0)) {
    throw std::logic_error(fmt::format("DDSketch: relative accuracy {} not in (0, 1)", relative_accuracy));
  }
  gamma_ = (1.0 + alpha_) / (1.0 - alpha_);
  log_gamma_ = std::log(gamma_);
}

int32_t DDSketch::index_of(double value) const { return static_cast<int32_t>(std::ceil(std::log(value) / log_gamma_)); }

double DDSketch::representative(int32_t index) const {
  // The point of (gamma^(i-1), gamma^i] whose relative distance to both ends is alpha.
  return 2.0 * std::pow(gamma_, index) / (gamma_ + 1.0);
}

void DDSketch::cover(int32_t index) {
  if (counts_.empty()) {
    offset_ = index;
    counts_.assign(1, 0);
    return;
  }
  if (index < offset_) {
    counts_.insert(counts_.begin(), static_cast<size_t>(offset_ - index), 0);
    offset_ = index;
  } else if (index >= offset_ + static_cast<int32_t>(counts_.size())) {
    counts_.resize(static_cast<size_t>(index - offset_) + 1, 0);
  }
}

void DDSketch::add(double value, int64_t weight) {
  if (weight <= 0) return;
  if (!(value >= 0.0) || std::isinf(value)) {
    throw std::logic_error(fmt::format("DDSketch: cannot add {} (non-negative finite values only)", value));
  }
  min_ = count_ == 0 ? value : std::min(min_, value);
  max_ = count_ == 0 ? value : std::max(max_, value);
  count_ += weight;
  if (value <= kMinPositive) {
    zero_count_ += weight;
    return;
  }
  const int32_t index = index_of(value);
  cover(index);
  counts_[static_cast<size_t>(index - offset_)] += weight;
}

void DDSketch::merge(const DDSketch& other) {
  if (other.alpha_ != alpha_) {
    throw std::logic_error(
        fmt::format("DDSketch: cannot merge a sketch of accuracy {} into one of {}", other.alpha_, alpha_));
  }
  if (other.count_ == 0) return;
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = count_ == 0 ? other.max_ : std::max(max_, other.max_);
  count_ += other.count_;
  zero_count_ += other.zero_count_;
  if (other.counts_.empty()) return;
  cover(other.offset_);
  cover(other.offset_ + static_cast<int32_t>(other.counts_.size()) - 1);
  for (size_t k = 0; k < other.counts_.size(); ++k) {
    counts_[static_cast<size_t>(other.offset_ - offset_) + k] += other.counts_[k];
  }
}

double DDSketch::quantile(double q) const {
  if (count_ == 0) return 0.0;
  const int64_t rank = nearest_rank(q, count_);
  if (rank >= count_) return max_;  // the largest sample, known exactly
  int64_t cumulative = zero_count_;
  if (cumulative >= rank) return min_;  // a zero, and min_ is one
  for (size_t k = 0; k < counts_.size(); ++k) {
    cumulative += counts_[k];
    if (cumulative >= rank) {
      // Clamped: the exact extremes are known, and clamping only brings the estimate closer.
      return std::clamp(representative(offset_ + static_cast<int32_t>(k)), min_, max_);
    }
  }
  return max_;
}

}  // namespace batchsim
