#include "sim/metrics.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include <boost/sort/spreadsort/float_sort.hpp>

namespace batchsim {

void WeightedSamples::merge(const WeightedSamples& other) {
  for (const auto& [value, weight] : other.samples_) add(value, weight);
}

void WeightedSamples::sort() const {
  if (sorted_) return;
  // By value alone: pairs of one value merge below, whatever their order (their weights are
  // integers), so comparing the weights too would only cost time.
  // Boost.Sort's radix-based float_sort: a run's inter-token gaps are ~10^5 pairs, which a
  // comparison sort took most of summarizing over.
  using Pair = std::pair<double, int64_t>;
  boost::sort::spreadsort::float_sort(
      samples_.begin(), samples_.end(),
      [](const Pair& x, unsigned offset) {
        return boost::sort::spreadsort::float_mem_cast<double, int64_t>(x.first) >> offset;
      },
      [](const Pair& a, const Pair& b) { return a.first < b.first; });
  // Merge equal values so storage stays proportional to distinct values.
  size_t out = 0;
  for (size_t i = 1; i < samples_.size(); ++i) {
    if (samples_[i].first == samples_[out].first) {
      samples_[out].second += samples_[i].second;
    } else {
      samples_[++out] = samples_[i];
    }
  }
  samples_.resize(samples_.empty() ? 0 : out + 1);
  sorted_ = true;
}

double WeightedSamples::mean() const {
  if (total_weight_ == 0) return 0.0;
  // Summed from the stored (value, weight) pairs, not kept as a running sum: k adds of v and
  // one add of (v, k) store the same pair, so they give the same mean to the last bit.
  double sum = 0;
  for (const auto& [value, weight] : samples_) sum += value * static_cast<double>(weight);
  return sum / static_cast<double>(total_weight_);
}

double WeightedSamples::percentile(double q) const {
  if (total_weight_ == 0) return 0.0;
  sort();
  // Nearest rank: the smallest value whose cumulative weight reaches ceil(q * W) (at least 1).
  const int64_t rank = nearest_rank(q, total_weight_);
  int64_t cumulative = 0;
  for (const auto& [value, weight] : samples_) {
    cumulative += weight;
    if (cumulative >= rank) return value;
  }
  return samples_.back().first;
}

namespace {
using SamplePair = std::pair<double, int64_t>;

// A double's bits, mapped so that unsigned order is the values' order (negative values' bits
// flipped, positive values' sign bit set).
uint64_t order_key(double v) {
  const auto bits = std::bit_cast<uint64_t>(v);
  return bits ^ (static_cast<uint64_t>(static_cast<int64_t>(bits) >> 63) | (uint64_t{1} << 63));
}

// The values at the nearest ranks `ranks` (ascending; 1-based cumulative weights, none above
// the pairs' total) of `pairs` into `out`, without reordering them: a radix select. One pass
// finds the range of the values' order keys, a second counts the weight in each of 4,096 equal
// slices of that range (slices of the key are nearly logarithmic in the value, so one outlier
// does not crowd the rest into one slice), a third gathers the pairs of each slice holding a
// rank, which are selected from the same way, or sorted and walked once they are few. In a vllm
// run of the conversation trace this took 7.5 M instructions where sorting the pairs
// (float_sort) and walking them took 14.4 M.
void select_ranks(std::span<const SamplePair> pairs, std::span<const int64_t> ranks, std::span<double> out) {
  constexpr size_t kSortBelow = 64;
  if (pairs.size() <= kSortBelow) {
    std::vector<SamplePair> sorted(pairs.begin(), pairs.end());
    std::sort(sorted.begin(), sorted.end(), [](const SamplePair& a, const SamplePair& b) { return a.first < b.first; });
    int64_t cumulative = 0;
    size_t k = 0;
    for (const SamplePair& p : sorted) {
      cumulative += p.second;
      while (k < ranks.size() && ranks[k] <= cumulative) out[k++] = p.first;
    }
    return;
  }
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (const SamplePair& p : pairs) {
    const uint64_t key = order_key(p.first);
    lo = std::min(lo, key);
    hi = std::max(hi, key);
  }
  if (lo == hi) {  // one value
    std::fill(out.begin(), out.end(), pairs.front().first);
    return;
  }
  constexpr int kSliceBits = 12;
  constexpr size_t kSlices = size_t{1} << kSliceBits;
  const int shift = std::max(0, static_cast<int>(std::bit_width(hi - lo)) - kSliceBits);
  std::array<int64_t, kSlices> weight{};
  std::array<uint32_t, kSlices> count{};
  std::vector<uint16_t> slice_of(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto slice = static_cast<uint16_t>((order_key(pairs[i].first) - lo) >> shift);
    slice_of[i] = slice;
    weight[slice] += pairs[i].second;
    ++count[slice];
  }
  // The slices holding a rank (at most one per rank), each with its ranks and the weight below.
  struct Target {
    size_t first_rank, end_rank;
    int64_t below;
    std::vector<SamplePair> pairs;
  };
  std::vector<Target> targets;
  std::array<int16_t, kSlices> target_of;  // index into targets, or -1
  target_of.fill(-1);
  size_t slice = 0;
  int64_t below = 0;  // the weight of the slices before `slice`
  for (size_t k = 0; k < ranks.size();) {
    while (below + weight[slice] < ranks[k]) below += weight[slice++];
    size_t end = k;
    while (end < ranks.size() && ranks[end] <= below + weight[slice]) ++end;
    target_of[slice] = static_cast<int16_t>(targets.size());
    targets.push_back({k, end, below, {}});
    targets.back().pairs.reserve(count[slice]);
    k = end;
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (const int16_t t = target_of[slice_of[i]]; t >= 0) {
      targets[static_cast<size_t>(t)].pairs.push_back(pairs[i]);
    }
  }
  for (const Target& t : targets) {
    std::vector<int64_t> in_slice_ranks(ranks.begin() + static_cast<ptrdiff_t>(t.first_rank),
                                        ranks.begin() + static_cast<ptrdiff_t>(t.end_rank));
    for (int64_t& r : in_slice_ranks) r -= t.below;
    select_ranks(t.pairs, in_slice_ranks, out.subspan(t.first_rank, t.end_rank - t.first_rank));
  }
}
}  // namespace

void WeightedSamples::percentiles(std::span<const double> qs, std::span<double> out) const {
  if (out.size() != qs.size()) throw std::logic_error("percentiles: one output per quantile");
  std::vector<int64_t> ranks(qs.size());
  for (size_t i = 0; i < qs.size(); ++i) {
    if (i > 0 && qs[i] < qs[i - 1]) throw std::logic_error("percentiles: quantiles must ascend");
    ranks[i] = std::min(nearest_rank(qs[i], total_weight_), total_weight_);
  }
  if (total_weight_ == 0) {
    std::fill(out.begin(), out.end(), 0.0);
    return;
  }
  select_ranks(samples_, ranks, out);
}

double WeightedSamples::max() const {
  if (total_weight_ == 0) return 0.0;
  if (sorted_) return samples_.back().first;
  double largest = samples_.front().first;
  for (const auto& [value, weight] : samples_) largest = std::max(largest, value);
  return largest;
}

double WeightedSamples::value_at_rank(int64_t rank) const {
  int64_t cumulative = 0;
  for (const auto& [value, weight] : samples_) {
    cumulative += weight;
    if (cumulative > rank) return value;
  }
  return samples_.back().first;
}

double WeightedSamples::interpolated_percentile(double q) const {
  if (total_weight_ == 0) return 0.0;
  sort();
  const double h = q * static_cast<double>(total_weight_ - 1);
  const auto below = static_cast<int64_t>(std::floor(h));
  const double lo = value_at_rank(below);
  if (below + 1 >= total_weight_) return lo;
  const double hi = value_at_rank(below + 1);
  return lo + (h - static_cast<double>(below)) * (hi - lo);
}

double WeightedSamples::stddev() const {
  if (total_weight_ == 0) return 0.0;
  // Two passes over the stored pairs (mean first), as numpy does, rather than E[x^2] - E[x]^2,
  // which cancels catastrophically when the spread is small beside the mean.
  const double m = mean();
  double sum = 0;
  for (const auto& [value, weight] : samples_) sum += (value - m) * (value - m) * static_cast<double>(weight);
  return std::sqrt(sum / static_cast<double>(total_weight_));
}

void SketchedSamples::add(double value, int64_t weight) {
  if (weight <= 0) return;
  // The run-length pairs of WeightedSamples::add, summed and sketched as they close.
  if (run_weight_ > 0 && run_value_ == value) {
    run_weight_ += weight;
    return;
  }
  if (run_weight_ > 0) {
    sum_ += run_value_ * static_cast<double>(run_weight_);
    sketch_.add(run_value_, run_weight_);
  }
  run_value_ = value;
  run_weight_ = weight;
}

void SketchedSamples::merge(const SketchedSamples& other) {
  if (other.count() == 0) return;
  if (run_weight_ > 0) {
    sum_ += run_value_ * static_cast<double>(run_weight_);
    sketch_.add(run_value_, run_weight_);
  }
  sketch_.merge(other.sketch_);
  sum_ += other.sum_;
  run_value_ = other.run_value_;
  run_weight_ = other.run_weight_;
}

DDSketch SketchedSamples::closed() const {
  DDSketch all = sketch_;
  all.add(run_value_, run_weight_);  // nothing when the run is empty (weight 0)
  return all;
}

void SketchedSamples::percentiles(std::span<const double> qs, std::span<double> out) const {
  if (out.size() != qs.size()) throw std::logic_error("percentiles: one output per quantile");
  const DDSketch all = closed();
  for (size_t i = 0; i < qs.size(); ++i) out[i] = all.quantile(qs[i]);
}

double SketchedSamples::mean() const {
  if (count() == 0) return 0.0;
  return (sum_ + run_value_ * static_cast<double>(run_weight_)) / static_cast<double>(count());
}

std::string_view phase_name(RequestPhase phase) {
  switch (phase) {
    case RequestPhase::kQueued:
      return "queued";
    case RequestPhase::kPrefilling:
      return "prefilling";
    case RequestPhase::kDecoding:
      return "decoding";
    case RequestPhase::kPreempted:
      return "preempted";
    case RequestPhase::kKvTransfer:
      return "kv_transfer";
    case RequestPhase::kFinished:
      return "finished";
    case RequestPhase::kRejected:
      return "rejected";
  }
  return "?";
}

namespace {
template <class Samples>
Distribution distribution_of(const Samples& s) {
  Distribution d;
  d.count = s.count();
  d.mean = s.mean();
  constexpr std::array<double, 3> kQuantiles = {0.50, 0.90, 0.99};
  std::array<double, 3> p{};
  s.percentiles(kQuantiles, p);
  d.p50 = p[0];
  d.p90 = p[1];
  d.p99 = p[2];
  d.max = s.max();
  return d;
}
}  // namespace

Distribution Distribution::of(const WeightedSamples& s) { return distribution_of(s); }
Distribution Distribution::of(const SketchedSamples& s) { return distribution_of(s); }

template <class Samples>
void RequestFigures<Samples>::Class::add(const RequestRecord& r) {
  ++counts.requests;
  counts.preemptions += r.preemptions;
  if (r.state == RequestState::kRejected) {
    ++counts.rejected;
    return;
  }
  if (!r.completed()) return;
  ++counts.completed;
  e2e.add(r.e2e_s());
  ttft.add(r.ttft_s());
  if (r.output_tokens > 1) tpot.add(r.tpot_s());
  queue.add(r.queueing_s());
}

template <class Samples>
void RequestFigures<Samples>::Class::finish(PriorityClassSummary& out) const {
  out.requests = counts.requests;
  out.completed = counts.completed;
  out.rejected = counts.rejected;
  out.preemptions = counts.preemptions;
  out.e2e_s = Distribution::of(e2e);
  out.ttft_s = Distribution::of(ttft);
  out.tpot_s = Distribution::of(tpot);
  out.queueing_s = Distribution::of(queue);
}

template <class Samples>
void RequestFigures<Samples>::reserve(size_t requests) {
  if constexpr (std::is_same_v<Samples, WeightedSamples>) {
    for (Samples* s : {&all_.e2e, &all_.ttft, &all_.tpot, &all_.queue, &norm_}) s->reserve(requests);
  }
}

template <class Samples>
void RequestFigures<Samples>::add(const RequestRecord& r) {
  first_arrival_ = std::min(first_arrival_, r.arrival);
  // While every request has one priority, that class is all_: it is copied out (the same adds
  // in the same order) only when a second priority comes, so the common run keeps one set of
  // samples instead of two.
  if (by_priority_.empty()) {
    if (!first_priority_) first_priority_ = r.priority;
    if (r.priority != *first_priority_) by_priority_.emplace(*first_priority_, all_);
  }
  all_.add(r);
  if (!by_priority_.empty()) by_priority_[r.priority].add(r);
  if (!r.completed()) return;
  prompt_tokens_ += r.prompt_tokens;
  output_tokens_ += r.output_tokens;
  last_finish_ = std::max(last_finish_, r.finished);
  norm_.add(r.e2e_s() / r.output_tokens);
  if constexpr (std::is_same_v<Samples, SketchedSamples>) {
    // The exact run takes these from its records (summarize_latency_breakdown).
    e2e_ns_ += (r.finished - r.arrival).ns();
    for (size_t k = 0; k < kNumLatencyParts; ++k) {
      part_ns_[k] += r.breakdown.ns[k];
      part_sketch_[k].add(static_cast<double>(r.breakdown.ns[k]));
    }
  }
}

template <class Samples>
void RequestFigures<Samples>::finish(Summary& s, double busy_s, const Samples& tbt_s) const {
  s.requests_total = all_.counts.requests;
  s.requests_completed = all_.counts.completed;
  s.requests_rejected = all_.counts.rejected;
  s.preemptions = all_.counts.preemptions;
  s.prompt_tokens = prompt_tokens_;
  s.output_tokens = output_tokens_;
  if (s.requests_completed > 0) s.makespan_s = (last_finish_ - first_arrival_).seconds();
  if (s.makespan_s > 0) {
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.makespan_s;
    s.total_tokens_per_s = static_cast<double>(s.prompt_tokens + s.output_tokens) / s.makespan_s;
    s.requests_per_s = static_cast<double>(s.requests_completed) / s.makespan_s;
    s.busy_fraction = busy_s / s.makespan_s;
  }
  s.e2e_s = Distribution::of(all_.e2e);
  s.ttft_s = Distribution::of(all_.ttft);
  s.tpot_s = Distribution::of(all_.tpot);
  s.tbt_s = Distribution::of(tbt_s);
  s.normalized_latency_s_per_token = Distribution::of(norm_);
  s.queueing_s = Distribution::of(all_.queue);
  s.priority_classes.clear();
  if (by_priority_.size() >= 2) {
    for (const auto& [priority, c] : by_priority_) {
      PriorityClassSummary& out = s.priority_classes.emplace_back();
      out.priority = priority;
      c.finish(out);
    }
  }
  if constexpr (std::is_same_v<Samples, SketchedSamples>) {
    s.percentile_relative_error = SketchedSamples::kRelativeAccuracy;
    s.latency_breakdown = LatencyBreakdownSummary{};
    const int64_t completed = s.requests_completed;
    if (completed == 0) return;
    for (size_t k = 0; k < kNumLatencyParts; ++k) {
      LatencyPartSummary& part = s.latency_breakdown.parts[k];
      part.mean_s = static_cast<double>(part_ns_[k]) * 1e-9 / static_cast<double>(completed);
      if (e2e_ns_ > 0) part.share = static_cast<double>(part_ns_[k]) / static_cast<double>(e2e_ns_);
      part.p99_s = std::round(part_sketch_[k].quantile(0.99)) * 1e-9;
    }
  }
}

template class RequestFigures<WeightedSamples>;
template class RequestFigures<SketchedSamples>;

LatencyBreakdownSummary summarize_latency_breakdown(const std::vector<RequestRecord>& requests, double e2e_p99_s) {
  LatencyBreakdownSummary summary;
  // Sums in ns, exact, so that means and shares do not depend on the order of the requests.
  std::array<int64_t, kNumLatencyParts> all_ns{}, p99_ns{};
  int64_t all_e2e_ns = 0, p99_e2e_ns = 0, completed = 0;
  for (const RequestRecord& r : requests) {
    if (!r.completed()) continue;
    ++completed;
    const bool tail = r.e2e_s() >= e2e_p99_s;
    summary.p99_requests += tail;
    const int64_t e2e_ns = (r.finished - r.arrival).ns();
    all_e2e_ns += e2e_ns;
    if (tail) p99_e2e_ns += e2e_ns;
    for (size_t k = 0; k < kNumLatencyParts; ++k) {
      all_ns[k] += r.breakdown.ns[k];
      if (tail) p99_ns[k] += r.breakdown.ns[k];
    }
  }
  if (completed == 0) return summary;
  // Only the p99 is wanted: a selection per part, not a sort; the parts' values side by side,
  // gathered in one pass over the records.
  const auto n = static_cast<size_t>(completed);
  std::vector<int64_t> values(n * kNumLatencyParts);
  size_t i = 0;
  for (const RequestRecord& r : requests) {
    if (!r.completed()) continue;
    for (size_t k = 0; k < kNumLatencyParts; ++k) values[k * n + i] = r.breakdown.ns[k];
    ++i;
  }
  const auto rank = static_cast<size_t>(nearest_rank(0.99, completed));
  for (size_t k = 0; k < kNumLatencyParts; ++k) {
    LatencyPartSummary& part = summary.parts[k];
    if (all_ns[k] > 0) {  // else every value is 0, and so is the p99
      const auto first = values.begin() + static_cast<std::ptrdiff_t>(k * n);
      std::nth_element(first, first + static_cast<std::ptrdiff_t>(rank - 1), first + static_cast<std::ptrdiff_t>(n));
      part.p99_s = SimTime::from_ns(*(first + static_cast<std::ptrdiff_t>(rank - 1))).seconds();
    }
    part.mean_s = static_cast<double>(all_ns[k]) * 1e-9 / static_cast<double>(completed);
    if (all_e2e_ns > 0) part.share = static_cast<double>(all_ns[k]) / static_cast<double>(all_e2e_ns);
    if (p99_e2e_ns > 0) part.share_of_p99 = static_cast<double>(p99_ns[k]) / static_cast<double>(p99_e2e_ns);
  }
  return summary;
}

}  // namespace batchsim
