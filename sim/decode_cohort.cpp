#include "sim/decode_cohort.h"

#include <fmt/format.h>

#include <stdexcept>

namespace batchsim {
namespace {

// Heap orders (std::push_heap keeps the largest first under `less`): the finish heap the
// earliest finish, then the earliest join; the context heap the largest key.
bool finishes_later(const auto& a, const auto& b) { return a.key != b.key ? a.key > b.key : a.seq > b.seq; }
bool smaller_key(const auto& a, const auto& b) { return a.key < b.key; }

}  // namespace

void DecodeCohort::enable(int32_t block_size) {
  if (block_size < 1) throw std::logic_error("decode cohort: block size must be positive");
  if (progress_ == nullptr) throw std::logic_error("decode cohort: enabled before the simulation attached it");
  const size_t num_ids = progress_->size();
  enabled_ = true;
  block_size_ = block_size;
  size_ = steps_ = ended_ = next_seq_ = key_sum_ = next_block_key_ = 0;
  last_end_ = SimTime::zero();
  joiners_.clear();
  finish_heap_.clear();
  context_heap_.clear();
  gap_maxima_.clear();
  gap_maxima_pruned_ = 0;
  heaps_compacted_ = 0;
  joins_.clear();
  joins_head_ = 0;
  join_seq_.assign(num_ids, -1);
  join_step_.assign(num_ids, 0);
  key_.assign(num_ids, 0);
  histogram_.assign(static_cast<size_t>(block_size), 0);
}

void DecodeCohort::join(RequestId id, int32_t output_tokens) {
  const auto i = static_cast<size_t>(id);
  const RequestProgress& p = (*progress_)[i];
  const int64_t seq = next_seq_++;
  join_seq_[i] = seq;
  join_step_[i] = steps_;
  const int64_t key = p.computed_tokens - steps_;
  key_[i] = key;
  key_sum_ += key;
  ++histogram_[static_cast<size_t>(mod_block(key))];
  ++size_;
  joiners_.push_back(id);
  joins_.push_back({steps_, seq, id});
  if (joins_.size() > 2 * static_cast<size_t>(size_) + 64) prune_gaps();
  finish_heap_.push_back({steps_ + (output_tokens - p.generated_tokens), seq, id});
  std::push_heap(finish_heap_.begin(), finish_heap_.end(),
                 [](const Entry& a, const Entry& b) { return finishes_later(a, b); });
  context_heap_.push_back({key, seq, id});
  std::push_heap(context_heap_.begin(), context_heap_.end(),
                 [](const Entry& a, const Entry& b) { return smaller_key(a, b); });
}

int64_t DecodeCohort::next_context_max() {
  while (!context_heap_.empty() && !live(context_heap_.front())) {
    std::pop_heap(context_heap_.begin(), context_heap_.end(),
                  [](const Entry& a, const Entry& b) { return smaller_key(a, b); });
    context_heap_.pop_back();
  }
  return context_heap_.empty() ? 0 : context_heap_.front().key + steps_ + 1;
}

int64_t DecodeCohort::min_remaining() {
  while (!finish_heap_.empty() && !live(finish_heap_.front())) pop_finish();
  return finish_heap_.empty() ? INT64_MAX : finish_heap_.front().key - ended_;
}

void DecodeCohort::pop_finish() {
  std::pop_heap(finish_heap_.begin(), finish_heap_.end(),
                [](const Entry& a, const Entry& b) { return finishes_later(a, b); });
  finish_heap_.pop_back();
}

SimTime DecodeCohort::step_ended(SimTime end) {
  if (ended_ >= steps_) throw std::logic_error("decode cohort: a step ended that was not taken");
  const SimTime gap = end - last_end_;
  ++ended_;
  last_end_ = end;
  // The gap belongs to step ended_; entries it is at least as large as can never be a later
  // suffix's maximum.
  while (!gap_maxima_.empty() && gap_maxima_.back().second <= gap) gap_maxima_.pop_back();
  gap_maxima_.emplace_back(ended_, gap);
  if (gap_maxima_.size() > 2 * gap_maxima_pruned_ + 64) prune_gaps();
  return gap;
}

void repeat_gap_maxima(std::span<const SimTime> gaps, std::vector<std::pair<int64_t, SimTime>>& out) {
  out.clear();
  for (size_t i = gaps.size(); i-- > 0;) {
    if (out.empty() || gaps[i] > out.back().second) out.emplace_back(static_cast<int64_t>(i), gaps[i]);
  }
  std::reverse(out.begin(), out.end());
}

void DecodeCohort::steps_ended(SimTime end, int64_t count, std::span<const std::pair<int64_t, SimTime>> run_maxima) {
  if (count <= 0) return;
  if (ended_ + count > steps_) throw std::logic_error("decode cohort: a step ended that was not taken");
  if (run_maxima.empty() || run_maxima.back().first != count - 1) {
    throw std::logic_error("decode cohort: a run's gap maxima do not end with its last step");
  }
  // What step_ended would leave after each step in turn: the entries before the run that are
  // larger than all of its gaps, then the run's own suffix maxima.
  const SimTime run_max = run_maxima.front().second;
  while (!gap_maxima_.empty() && gap_maxima_.back().second <= run_max) gap_maxima_.pop_back();
  for (const auto& [index, gap] : run_maxima) gap_maxima_.emplace_back(ended_ + 1 + index, gap);
  ended_ += count;
  last_end_ = end;
  if (gap_maxima_.size() > 2 * gap_maxima_pruned_ + 64) prune_gaps();
}

void DecodeCohort::prune_gaps() {
  while (joins_head_ < joins_.size() && !live(joins_[joins_head_])) ++joins_head_;
  if (joins_head_ > joins_.size() / 2) {
    joins_.erase(joins_.begin(), joins_.begin() + static_cast<std::ptrdiff_t>(joins_head_));
    joins_head_ = 0;
  }
  // A member asks for the gaps after its first step (join step + 1); the oldest asks for most.
  const int64_t oldest_first = joins_head_ < joins_.size() ? joins_[joins_head_].key + 1 : ended_;
  const auto keep = std::upper_bound(gap_maxima_.begin(), gap_maxima_.end(), oldest_first,
                                     [](int64_t step, const auto& e) { return step < e.first; });
  gap_maxima_.erase(gap_maxima_.begin(), keep);
  gap_maxima_pruned_ = gap_maxima_.size();
}

SimTime DecodeCohort::max_gap_after(int64_t first) const {
  const auto it = std::upper_bound(gap_maxima_.begin(), gap_maxima_.end(), first,
                                   [](int64_t step, const auto& e) { return step < e.first; });
  return it == gap_maxima_.end() ? SimTime::zero() : it->second;
}

void DecodeCohort::leave(RequestId id) {
  const auto i = static_cast<size_t>(id);
  if (join_seq_[i] < 0) throw std::logic_error(fmt::format("decode cohort: request {} left but is no member", id));
  if (steps_ != ended_) throw std::logic_error("decode cohort: a member left while a step was in flight");
  const int64_t joined = join_step_[i];
  const int64_t steps = ended_ - joined;
  RequestProgress& p = (*progress_)[i];
  if (steps > 0) {
    p.computed_tokens += steps;
    p.generated_tokens += static_cast<int32_t>(steps);
    p.last_token = last_end_;
    // Its first step's gap went to max_tbt as that step ended (joiners_ended).
    const SimTime later = max_gap_after(joined + 1);
    if (later > p.max_tbt) p.max_tbt = later;
  } else {
    std::erase(joiners_, id);
  }
  key_sum_ -= key_[i];
  --histogram_[static_cast<size_t>(mod_block(key_[i]))];
  --size_;
  join_seq_[i] = -1;
  compact();
}

void DecodeCohort::compact() {
  // Left members' entries stay in the heaps until they surface; rebuilt when they are most of
  // them, so that the heaps stay proportional to the members (a streaming run's memory).
  // Only once they have doubled since the last time, so that a run of leaves costs O(1) each.
  const size_t larger = std::max(finish_heap_.size(), context_heap_.size());
  if (larger <= 2 * std::max<size_t>(heaps_compacted_, 32) || larger <= 2 * static_cast<size_t>(size_)) return;
  std::erase_if(finish_heap_, [this](const Entry& e) { return !live(e); });
  std::make_heap(finish_heap_.begin(), finish_heap_.end(),
                 [](const Entry& a, const Entry& b) { return finishes_later(a, b); });
  std::erase_if(context_heap_, [this](const Entry& e) { return !live(e); });
  std::make_heap(context_heap_.begin(), context_heap_.end(),
                 [](const Entry& a, const Entry& b) { return smaller_key(a, b); });
  heaps_compacted_ = std::max(finish_heap_.size(), context_heap_.size());
}

void DecodeCohort::throw_finished_late(RequestId id) {
  throw std::logic_error(fmt::format("decode cohort: request {} finished before the step that ended", id));
}

}  // namespace batchsim
