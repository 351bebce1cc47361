#include "policies/sglang/sglang_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "policies/common/host_copy.h"

namespace batchsim {

namespace {

// SchedulePolicy._determine_active_policy (schedule_policy.py): lpm falls back to fcfs while
// more than 128 requests wait ("turn off the expensive prefix matching and sorting").
constexpr size_t kLpmMaxWaiting = 128;
// IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and ..._DEPRIORITIZE_THRESHOLD (schedule_policy.py).
constexpr int64_t kInBatchPrefixThreshold = 32;

}  // namespace

namespace {

// server_args.py ServerArgs._handle_gpu_memory_settings's one chain over the device's total
// memory (gpu_mem in MiB): chunked_prefill_size and cuda_graph_max_bs (at TP < 4 / >= 4). T4/4080
// 2048 and 8, A10/4090 2048 and 24/80, A100-40G/L40 4096 and 32/160, H100/A100-80G and H20/H200
// 8192 and 256/512, B200/MI300 16384 and 512; without a known device 4096 and 160.
struct SglangDeviceDefaults {
  int64_t chunked_prefill_size = 0;
  int64_t cuda_graph_max_bs = 0;
};
SglangDeviceDefaults sglang_device_defaults(int64_t gpu_memory_bytes, int tp) {
  if (gpu_memory_bytes <= 0) return {4096, 160};
  const bool large_tp = tp >= 4;
  const int64_t gib = int64_t{1} << 30;
  if (gpu_memory_bytes < 20 * gib) return {2048, 8};
  if (gpu_memory_bytes < 35 * gib) return {2048, large_tp ? 80 : 24};
  if (gpu_memory_bytes < 60 * gib) return {4096, large_tp ? 160 : 32};
  if (gpu_memory_bytes < 160 * gib) return {8192, large_tp ? 512 : 256};
  return {16384, 512};
}

// `gpu_mem` less `reserved` (both MiB) as a share of `gpu_mem`, rounded to 3 decimals as
// server_args.py does.
double sglang_fraction_left(double gpu_mem, double reserved) {
  return std::round((gpu_mem - reserved) / gpu_mem * 1000.0) / 1000.0;
}
constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

int64_t sglang_chunked_prefill_size(int64_t gpu_memory_bytes) {
  return sglang_device_defaults(gpu_memory_bytes, 1).chunked_prefill_size;
}

int64_t sglang_cuda_graph_max_bs(int64_t gpu_memory_bytes, int tp) {
  return sglang_device_defaults(gpu_memory_bytes, tp).cuda_graph_max_bs;
}

double sglang_mem_fraction_static(int64_t gpu_memory_bytes, int tp, int64_t chunked_prefill_size,
                                  int64_t cuda_graph_max_bs) {
  if (gpu_memory_bytes <= 0) return 0.88;  // SGLang's fallback without a known device
  const double mib = static_cast<double>(gpu_memory_bytes) / kMiB;
  if (cuda_graph_max_bs <= 0) cuda_graph_max_bs = sglang_cuda_graph_max_bs(gpu_memory_bytes, tp);
  double reserved = 512.0 + 1.5 * static_cast<double>(std::max<int64_t>(chunked_prefill_size, 2048)) +
                    2.0 * static_cast<double>(cuda_graph_max_bs) + tp / 8.0 * 1024.0;
  if (mib > 60 * 1024) reserved = std::max(reserved, 10.0 * 1024.0);
  return sglang_fraction_left(mib, reserved);
}

double sglang_mem_fraction_static_2025(int64_t gpu_memory_bytes, int tp) {
  if (gpu_memory_bytes <= 0) return 0.88;
  const double mib = static_cast<double>(gpu_memory_bytes) / kMiB;
  double reserved_gib = 32;
  if (mib < 35 * 1024) {
    reserved_gib = 2.8 + tp / 10.0;
  } else if (mib < 90 * 1024) {
    reserved_gib = 9.5 + tp / 2.0;
  } else if (mib < 160 * 1024) {
    reserved_gib = 12 + tp / 2.0;
  }
  return sglang_fraction_left(mib, reserved_gib * 1024.0);
}

int64_t sglang_max_running_requests(int64_t kv_capacity_tokens, int64_t context_len) {
  // model_runner _resolve_max_num_reqs: the request pool holds capacity / context_len x 512
  // requests clamped to [2048, 4096], and no more than capacity / 2 run.
  int64_t pool = context_len > 0 ? kv_capacity_tokens * 512 / context_len : 4096;
  pool = std::clamp<int64_t>(pool, 2048, 4096);
  return std::max<int64_t>(1, std::min(pool, kv_capacity_tokens / 2));
}

SglangPolicy::SglangPolicy(SglangPolicyConfig config, std::string name) : config_(config), name_(std::move(name)) {}

void SglangPolicy::attach(PolicyEnv& env) {
  env_ = &env;
  const int64_t page = config_.page_size;
  if (env.kv_capacity_tokens < page) {
    throw UserError(
        fmt::format("the KV memory left after the weights holds {} tokens, less than one page of "
                    "page_size={}: use a smaller page_size, or more memory (mem_fraction_static, --tp, a "
                    "larger GPU)",
                    env.kv_capacity_tokens, page));
  }
  config_.chunked_prefill_size =
      chunked_prefill_size(env.cost_model != nullptr ? env.cost_model->gpu().memory_bytes : 0);
  const int64_t blocks = env.kv_capacity_tokens / page;
  if (config_.max_running_requests == 0) {
    config_.max_running_requests = sglang_max_running_requests(blocks * page, env.max_model_len);
  }
  role_ = env.role;
  PrefixCacheSource prefix;
  // A decode server shares no prefix: its radix cache is off unless
  // --disaggregation-decode-enable-radix-cache (off by default) turns it on.
  if (config_.radix_cache && role_ != PoolRole::kDecode) prefix = {env.requests, env.prefix_blocks};
  const auto n = static_cast<int64_t>(env.requests->size());
  kv_ = std::make_unique<PagedKvCache>(n, blocks, static_cast<int32_t>(page), 0.0, prefix);
  finished_flag_.assign(n, 0);
  bootstrap_.clear();
  metadata_buffers_in_use_ = 0;
  held_.assign(role_ == PoolRole::kPrefill ? n : 0, 0);
  prealloc_.clear();
  transfer_queue_.clear();
  retracted_.clear();
  remote_stage_.assign(role_ == PoolRole::kDecode ? n : 0, RemoteStage::kNone);
  landed_ = 0;
  // DecodeReqToTokenPool holds max_running_requests + pre_alloc_size requests, pre_alloc_size
  // being 2 x max_running_requests when that is at most 32, else
  // SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS (0 by default) (model_runner_kv_cache_mixin.py).
  const int64_t max_running = config_.max_running_requests;
  request_slots_ = max_running + (max_running <= 32 ? 2 * max_running : 0);
  // NewTokenRatioTracker.from_server_args (scheduler_components/new_token_ratio_tracker.py):
  // init = min(SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness, 1), min = min(init x
  // SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1), decay = (init - min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
  // (environ.py: 0.7, 0.14, 600).
  init_ratio_ = std::min(config_.init_new_token_ratio * config_.schedule_conservativeness, 1.0);
  min_ratio_ = std::min(init_ratio_ * config_.min_new_token_ratio_factor, 1.0);
  decay_ = (init_ratio_ - min_ratio_) / static_cast<double>(config_.new_token_ratio_decay_steps);
  new_token_ratio_ = init_ratio_;
}

int64_t SglangPolicy::chunked_prefill_size(int64_t gpu_memory_bytes) const {
  return config_.chunked_prefill_size > 0 ? config_.chunked_prefill_size
                                          : sglang_chunked_prefill_size(gpu_memory_bytes);
}

std::optional<Policy::KvSizing> SglangPolicy::kv_sizing(const CostModel& cost_model,
                                                        double /*gpu_memory_utilization*/) const {
  const bool given = config_.mem_fraction_static > 0;
  const int64_t memory = cost_model.gpu().memory_bytes;
  const double fraction = given ? config_.mem_fraction_static
                                : sglang_mem_fraction_static(memory, cost_model.tensor_parallel(),
                                                             chunked_prefill_size(memory), config_.cuda_graph_max_bs);
  // A model with sliding-window layers gets SGLang's SWA pool (CostModel::WindowKv::sglang_swa):
  // the window layers' pool holds 0.8 of the full pool's tokens, and only the window of each
  // request; its running requests are bounded by the full pool, which alone is simulated.
  return KvSizing{
      cost_model.kv_capacity_tokens_static(fraction, CostModel::WindowKv::sglang_swa),
      fmt::format("mem_fraction_static {:g}{}", fraction, given ? "" : ", SGLang's rule for this GPU and TP")};
}

std::optional<int64_t> SglangPolicy::cuda_graph_max_batch(const HardwareProfile& gpu, int tp) const {
  return config_.cuda_graph_max_bs > 0 ? config_.cuda_graph_max_bs : sglang_cuda_graph_max_bs(gpu.memory_bytes, tp);
}

void SglangPolicy::on_arrival(RequestId id, SimTime /*now*/) {
  // A streaming run hands a settled request's id (its slot) to a later arrival.
  finished_flag_[id] = 0;
  if (reject_over_context(*env_, id)) return;
  if (role_ == PoolRole::kDecode) {
    arrive_for_decode(id);
    return;
  }
  // SGLang refuses a prompt of max_req_input_len = min(context_len, max_total_num_tokens) - 1
  // tokens or more and lowers max_new_tokens to what the KV pool leaves after it (scheduler.py
  // validate_input_length and handle_generate_request), so that admission's prompt +
  // max_new_tokens + one page fits an empty pool. A simulated request cannot end early: one
  // whose prompt + output + one page do not fit is rejected.
  const Request& r = env_->request(id);
  const int64_t need = static_cast<int64_t>(r.prompt_tokens) + r.output_tokens + config_.page_size + 1;
  if (reject_over_cache(*env_, *kv_, id, need)) return;
  // Scheduler.self_check_during_idle resets new_token_ratio whenever the server is idle; the
  // first request after an idle spell finds it reset.
  if (idle()) new_token_ratio_ = init_ratio_;
  if (config_.overlap_schedule) {
    intake_.on_arrival(id);
    return;
  }
  receive(id);
}

void SglangPolicy::receive(RequestId id) {
  switch (role_) {
    case PoolRole::kColocated:
      waiting_.push_back(id);
      return;
    case PoolRole::kPrefill:
      // PrefillBootstrapQueue.add: the request waits for its bootstrap (a metadata buffer).
      bootstrap_.push_back(id);
      return;
    case PoolRole::kDecode:
      // A landed transfer, now seen by the scheduler (DecodeTransferQueue.pop_transferred polls
      // it at its next step).
      remote_stage_[id] = RemoteStage::kLanded;
      ++landed_;
      return;
  }
}

void SglangPolicy::arrive_for_decode(RequestId id) {
  const Request& r = env_->request(id);
  if (env_->progress_of(id).computed_tokens != r.prompt_tokens) {
    throw std::logic_error(
        fmt::format("{}: request {} reached the decode role with {} of its {} prompt tokens "
                    "computed; a decode server never prefills",
                    name_, id, env_->progress_of(id).computed_tokens, r.prompt_tokens));
  }
  // What an empty decode pool must hold for this request to be preallocated at all (its prompt
  // + R, and its prompt + min(max_new_tokens, 4096) with nothing running to retract) and to
  // decode to its end alone. SGLang aborts only a prompt beyond the pool
  // (DecodePreallocQueue._check_if_req_exceed_kv_capacity) and would keep the others waiting
  // forever.
  const int64_t prompt = r.prompt_tokens;
  const int64_t footprint = std::max({prompt + config_.num_reserved_decode_tokens,
                                      prompt + std::min(max_new_tokens(id), config_.clip_max_new_tokens),
                                      prompt + static_cast<int64_t>(r.output_tokens)});
  if (reject_over_cache(*env_, *kv_, id, footprint)) return;
  if (idle()) new_token_ratio_ = init_ratio_;
  // DecodePreallocQueue.add. (No step of lag: see the header comment, "Overlap scheduling".)
  prealloc_.push_back(id);
}

int64_t SglangPolicy::max_new_tokens(RequestId id) const {
  // The client's limit (PolicyEnv::output_limit), lowered as on_arrival says; at least the
  // output of any request on_arrival accepted.
  const int64_t room = kv_->capacity_tokens() - env_->request(id).prompt_tokens - config_.page_size - 1;
  return std::max<int64_t>(std::min(env_->output_limit(id), room), env_->request(id).output_tokens);
}

int64_t SglangPolicy::expected_new_tokens(RequestId id) const {
  // PrefillAdder: min(max(max_new_tokens - len(output_ids), 0), CLIP_MAX_NEW_TOKENS).
  const int64_t left = std::max<int64_t>(max_new_tokens(id) - env_->progress_of(id).generated_tokens, 0);
  return std::min(left, config_.clip_max_new_tokens);
}

int64_t SglangPolicy::ceil_page(int64_t tokens) const {
  return (tokens + config_.page_size - 1) / config_.page_size * config_.page_size;
}

void SglangPolicy::add_step(RequestId id, int64_t new_tokens, Batch& batch) {
  add_batch_step(*env_, id, new_tokens, batch);
}

void SglangPolicy::sort_waiting_by_prefix() {
  // SchedulePolicy._compute_prefix_matches and _sort_by_longest_prefix (schedule_policy.py): each
  // waiting request is matched against the radix cache; one whose cached prefix is at most 32
  // tokens but that shares at least 32 tokens with a request ahead of it in the queue (a
  // simulated radix tree of the queue) is deprioritized to the end, so that one of them fills
  // the cache for the others; the rest go longest cached prefix first. Python's sort is
  // stable, hence stable_sort.
  const PrefixBlockHashes* hashes = env_->prefix_blocks;
  const bool have_hashes = hashes != nullptr && !hashes->empty();
  std::unordered_set<uint64_t> queued;  // (position, hash) of prompt blocks of the queue's tree
  auto key_of = [](size_t j, uint64_t h) { return h * 0x9E3779B97F4A7C15ull + j; };
  std::vector<std::pair<int64_t, RequestId>> order;
  order.reserve(waiting_.size());
  for (const RequestId id : waiting_) {
    const int64_t known = env_->known_tokens(id);
    const int64_t prefix = kv_->cached_prefix_tokens(id, known);
    bool deprioritized = false;
    if (prefix <= kInBatchPrefixThreshold && have_hashes) {
      const auto own = hashes->of(id);
      size_t j = 0;
      while (j < own.size() && queued.count(key_of(j, own[j])) > 0) ++j;
      const int64_t shared =
          std::min<int64_t>(static_cast<int64_t>(j) * hashes->block_tokens, env_->request(id).prompt_tokens);
      if (shared >= kInBatchPrefixThreshold) {
        deprioritized = true;
      } else {
        for (size_t k = 0; k < own.size(); ++k) queued.insert(key_of(k, own[k]));
      }
    }
    order.emplace_back(deprioritized ? std::numeric_limits<int64_t>::max() : -prefix, id);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < order.size(); ++i) waiting_[i] = order[i].second;
}

// PrefillAdder's budgets (schedule_policy.py), for one prefill batch. rem_total_tokens =
// available + evictable KV - rem_total_token_offset; the offset starts at what the running
// requests are expected to write, min(max_new_tokens left, clip) x new_token_ratio each, and
// grows by every admitted request's extend tokens + max_new_tokens + one page
// (_update_prefill_budget). The KV this batch allocates is added back to the live free count, so
// that the budget sees what SGLang sees before prepare_for_extend allocates (while prefixes the
// batch locks leave it, as in SGLang).
struct SglangPolicy::PrefillBudget {
  const SglangPolicy& policy;
  double offset = 0;
  int64_t allocated = 0;  // tokens of new pages this batch took
  int64_t rem_input = 0;
  int64_t rem_chunk = 0;
  int64_t can_run = 0;  // requests this batch prefills

  int64_t free_tokens() const { return policy.kv_->free_blocks() * policy.config_.page_size; }
  double rem_total() const { return static_cast<double>(free_tokens() + allocated) - offset; }
  void charge(int64_t extend, int64_t max_new, int64_t page_term) {
    offset += static_cast<double>(policy.ceil_page(extend) + max_new + page_term);
    rem_input -= policy.ceil_page(extend);
    rem_chunk -= policy.ceil_page(extend);
  }
  // PrefillAdder.budget_state.
  AddResult state() const {
    if (rem_total() <= 0 || free_tokens() <= 0) return AddResult::kNoToken;
    if (rem_input <= 0 || rem_chunk <= 0) return AddResult::kOther;
    return AddResult::kContinue;
  }
};

bool SglangPolicy::schedule_prefill(Batch& batch) {
  // Scheduler.get_new_batch_prefill (scheduler.py).
  if ((batch_is_full_ || waiting_.empty()) && chunked_ < 0) return false;
  const auto running_bs = static_cast<int64_t>(running_.size());
  if (running_bs >= config_.max_running_requests && chunked_ < 0) {
    batch_is_full_ = true;
    return false;
  }
  if (config_.lpm && config_.radix_cache && waiting_.size() <= kLpmMaxWaiting) sort_waiting_by_prefix();

  PrefillBudget budget{*this};
  for (const RequestId id : running_) {
    budget.offset += static_cast<double>(expected_new_tokens(id)) * new_token_ratio_;
  }
  // Mixed chunks: the running requests' decode tokens come out of every budget first
  // (PrefillAdder's mixed_with_decode_tokens).
  const int64_t mixed_decodes = config_.mixed_chunk ? running_bs : 0;
  budget.offset += static_cast<double>(mixed_decodes);
  budget.rem_input = config_.max_prefill_tokens - mixed_decodes;
  budget.rem_chunk = config_.chunked_prefill_size - mixed_decodes;
  if (chunked_ >= 0) add_chunked_request(budget, batch);

  // The waiting queue, in order, while PrefillAdder.add_one_req says CONTINUE.
  std::vector<RequestId> admitted;
  for (const RequestId id : waiting_) {
    if (budget.can_run >= config_.max_running_requests - running_bs) {  // get_num_allocatable_reqs
      batch_is_full_ = true;
      break;
    }
    bool added = false;
    const AddResult result = add_waiting_request(budget, id, batch, added);
    if (added) admitted.push_back(id);
    if (result != AddResult::kContinue) {
      if (result == AddResult::kNoToken) batch_is_full_ = true;
      break;
    }
  }
  if (batch.items.empty()) return false;
  std::erase_if(waiting_,
                [&](RequestId id) { return std::find(admitted.begin(), admitted.end(), id) != admitted.end(); });
  // mix_with_running: the running requests decode in this batch, after the prefill took its KV.
  if (config_.mixed_chunk && !running_.empty() && pages_for_next_decode(running_) <= kv_->free_blocks()) {
    grow_and_decode(running_, batch);
    mixed_decodes_ = running_.size();
  }
  return true;
}

void SglangPolicy::add_chunked_request(PrefillBudget& budget, Batch& batch) {
  // PrefillAdder.add_chunked_req: the next chunk, at most the chunk budget; its output is
  // charged with its last chunk. Its KV was never checked against the ratio again; here a
  // chunk also waits for free KV (the newest adder's available_chunk_tokens), rather than
  // fail to allocate.
  const int64_t page = config_.page_size;
  const RequestId id = chunked_;
  const int64_t computed = env_->progress_of(id).computed_tokens;
  const int64_t need = env_->known_tokens(id) - computed;
  const int64_t room = (kv_->free_blocks() + kv_->blocks_of(id)) * page - computed;
  const int64_t n = std::min({need, budget.rem_chunk, room});
  if (n <= 0) return;
  const int64_t before = kv_->blocks_of(id);
  if (!kv_->try_grow(id, computed + n)) throw std::logic_error("chunk growth failed after its room was counted");
  budget.allocated += (kv_->blocks_of(id) - before) * page;
  const bool truncated = n < need;
  budget.charge(n, truncated ? 0 : expected_new_tokens(id), 0);
  add_step(id, n, batch);
  ++budget.can_run;
  if (!truncated) {
    prefilled_.push_back(id);
    chunked_ = -1;
  }
}

SglangPolicy::AddResult SglangPolicy::add_waiting_request(PrefillBudget& budget, RequestId id, Batch& batch,
                                                          bool& added) {
  const int64_t page = config_.page_size;
  const int64_t known = env_->known_tokens(id);
  const int64_t cached = config_.radix_cache ? kv_->cached_prefix_tokens(id, known) : 0;
  const int64_t extend = known - cached;
  const int64_t max_new = expected_new_tokens(id);
  // add_one_req: total_tokens = extend + max_new + page (per_req_token_overhead) must stay
  // below rem_total_tokens.
  if (static_cast<double>(extend + max_new + page) >= budget.rem_total()) return AddResult::kNoToken;
  int64_t n = extend;
  bool truncated = false;
  if (ceil_page(extend) > budget.rem_chunk) {
    // _select_prefill_admission: cut at the chunk budget, page-aligned from the prefix
    // on; a chunk charges no output.
    n = (cached + budget.rem_chunk / page * page) / page * page - cached;
    truncated = true;
    if (n <= 0 || chunked_ >= 0) return AddResult::kOther;
  }
  // The ratio check guarantees the extend tokens are free, but not an evictable prefix
  // hit this admission pins: the cache may still refuse, which ends admission as
  // NO_TOKEN.
  if (!kv_->try_admit(id, cached + n, cached + n)) return AddResult::kNoToken;
  budget.allocated += (kv_->blocks_for(cached + n) - kv_->blocks_for(cached)) * page;
  if (cached > 0) env_->use_cached_prefix(id, cached);
  budget.charge(n, truncated ? 0 : max_new, page);
  add_step(id, n, batch);
  added = true;
  ++budget.can_run;
  if (truncated) {
    chunked_ = id;
  } else {
    prefilled_.push_back(id);
  }
  return budget.state();
}

void SglangPolicy::grow_and_decode(std::span<const RequestId> requests, Batch& batch) {
  for (const RequestId id : requests) {
    if (!kv_->try_grow(id, kv_->tokens_of(id) + 1))
      throw std::logic_error("decode growth failed after its pages were counted");
    add_step(id, 1, batch);
  }
}

int64_t SglangPolicy::pages_for_next_decode(std::span<const RequestId> requests) const {
  // ScheduleBatch.new_page_count_next_decode: with page_size 1 one token each; else the
  // requests whose next token starts a page.
  int64_t pages = 0;
  for (const RequestId id : requests) {
    if (kv_->tokens_of(id) % config_.page_size == 0) ++pages;
  }
  return pages;
}

void SglangPolicy::retract(RequestId id, Batch& batch) {
  if (role_ == PoolRole::kDecode) {
    // release_req in decode mode: Req.offload_kv_cache copies the KV to the host before it is
    // freed, and _extend_requests_to_queue(is_retracted=True) puts the request in the prealloc
    // queue's retracted queue; resume_retracted_reqs copies it back, nothing is recomputed.
    const int64_t tokens = kv_->tokens_of(id);
    kv_->release(id);
    env_->preempt(id, /*keeps_kv=*/true);
    batch.extra_time += host_copy_time(tokens);
    retracted_.push_back(id);
    return;
  }
  // ScheduleBatch.release_req + Req.reset_for_retract: the KV is freed (what is cached, its
  // own generated blocks too, stays in the cache, evictable) and the request is prefilled
  // again with its prompt and the tokens it generated; Scheduler._extend_requests_to_queue
  // appends it to the waiting queue.
  kv_->release(id);
  env_->preempt(id, /*keeps_kv=*/false);
  waiting_.push_back(id);
}

void SglangPolicy::schedule_decode(Batch& batch) {
  // Scheduler.update_running_batch: finished requests leave the batch; a smaller batch is no
  // longer full.
  if (decode_shrank_) {
    batch_is_full_ = false;
    decode_shrank_ = false;
  }
  if (running_.empty()) return;
  bool retracted = false;
  if (pages_for_next_decode(running_) > kv_->free_blocks()) {
    // ScheduleBatch.retract_decode (schedule_batch.py): sorted by (len(output_ids),
    // -len(origin_input_ids)) descending, retracted from the back — the fewest generated tokens,
    // then the longest prompt, then the latest in the batch — at least one, until the rest can
    // decode, never the last one. The batch keeps the sorted order (filter_batch(keep_indices)).
    std::vector<RequestId> sorted = running_;
    std::stable_sort(sorted.begin(), sorted.end(), [&](RequestId a, RequestId b) {
      const auto ga = env_->progress_of(a).generated_tokens, gb = env_->progress_of(b).generated_tokens;
      if (ga != gb) return ga > gb;
      return env_->request(a).prompt_tokens < env_->request(b).prompt_tokens;
    });
    bool first = true;
    while (sorted.size() > 1) {
      if (!first && pages_for_next_decode(sorted) <= kv_->free_blocks()) break;
      first = false;
      const RequestId victim = sorted.back();
      sorted.pop_back();
      retract(victim, batch);
    }
    running_ = sorted;
    // new_estimate_ratio = (Σ len(output_ids) + retract_decode_steps x len(reqs)) /
    // Σ max_new_tokens over the requests left, at most 1; update_running_batch sets
    // new_token_ratio to it.
    int64_t decoded = 0, max_new = 0;
    for (const RequestId id : running_) {
      decoded += env_->progress_of(id).generated_tokens;
      max_new += max_new_tokens(id);
    }
    const double estimate =
        static_cast<double>(decoded + config_.retract_decode_steps * static_cast<int64_t>(running_.size())) /
        static_cast<double>(std::max<int64_t>(max_new, 1));
    new_token_ratio_ = std::min(1.0, estimate);
    batch_is_full_ = false;
    retracted = true;
    // SGLang asserts there is room for the one request left; here a chunked prefill may hold
    // the rest of the KV, and it is retracted too rather than stall both.
    if (pages_for_next_decode(running_) > kv_->free_blocks() && chunked_ >= 0) {
      retract(chunked_, batch);
      chunked_ = -1;
    }
    if (pages_for_next_decode(running_) > kv_->free_blocks()) {
      throw std::logic_error("sglang: no KV left for the last running request's next token");
    }
  } else {
    new_token_ratio_ = std::max(new_token_ratio_ - decay_, min_ratio_);
  }
  grow_and_decode(running_, batch);
  repeatable_ = !retracted;
}

void SglangPolicy::schedule(SimTime now, Batch& batch) {
  if (!config_.overlap_schedule) {
    build_batch(batch);
    return;
  }
  // event_loop_overlap: the batch launched now was chosen while the previous one ran.
  const bool held = intake_.schedule(
      now, batch, [this](RequestId id) { receive(id); }, [&] { build_batch(batch); }, [] {});
  if (held) repeatable_ = false;  // a held request joins the next batch
}

void SglangPolicy::build_batch(Batch& batch) {
  repeatable_ = false;
  mixed_decodes_ = 0;
  if (role_ == PoolRole::kPrefill) {
    build_prefill_role_batch(batch);
    return;
  }
  if (role_ == PoolRole::kDecode) {
    build_decode_role_batch(batch);
    return;
  }
  // Scheduler.get_next_batch_to_run: a prefill batch if one can be formed, else decode.
  last_was_prefill_ = schedule_prefill(batch);
  if (last_was_prefill_) return;
  schedule_decode(batch);
  // Nothing left to decode (the last running request finished, which cleared batch_is_full):
  // SGLang's event loop comes round again at once, and this time may prefill.
  if (batch.empty()) last_was_prefill_ = schedule_prefill(batch);
}

bool SglangPolicy::repeat_decode_step(const Batch& /*batch*/) {
  // The next schedule() decodes the same requests again when no prefill can start (the batch
  // is marked full, or nothing waits, and no chunked prefill is in progress: all lasting until
  // a request arrives or finishes) and their next tokens' pages are free (no retraction). In
  // the decode role nothing prefills; what may change the batch is a request moving between
  // its queues (decode_queues_settled).
  if (!repeatable_ || chunked_ >= 0 || decode_shrank_) return false;
  if (role_ == PoolRole::kDecode) {
    if (!decode_queues_settled()) return false;
  } else if (!waiting_.empty() && !batch_is_full_) {
    return false;
  }
  if (pages_for_next_decode(running_) > kv_->free_blocks()) return false;
  new_token_ratio_ = std::max(new_token_ratio_ - decay_, min_ratio_);
  for (const RequestId id : running_) {
    if (!kv_->try_grow(id, kv_->tokens_of(id) + 1))
      throw std::logic_error("decode growth failed after its pages were counted");
  }
  return true;
}

void SglangPolicy::on_iteration_end(const Batch& /*batch*/, std::span<const RequestId> finished, SimTime now) {
  if (config_.overlap_schedule) intake_.on_iteration_end(now);
  for (const RequestId id : finished) {
    finished_flag_[id] = 1;
    if (!held_.empty()) {
      // Prefill role: process_batch_result_disagg_prefill caches the prompt in the radix tree,
      // locked, and the request waits in the inflight queue until its transfer lands
      // (release_held_kv).
      held_[id] = 1;
      continue;
    }
    // Scheduler cache_finished_req: the request's KV stays in the radix cache, evictable (it
    // inserts origin_input_ids + output_ids, mem_cache/radix_cache.py).
    kv_->release(id);
  }
  if (last_was_prefill_) {
    // get_next_batch_to_run merges the last prefill batch into the running batch, less the
    // chunked request; its leaving, or a request that finished with its first token, makes the
    // running batch no longer full.
    if (chunked_ >= 0) batch_is_full_ = false;
    if (mixed_decodes_ > 0 && !finished.empty()) {
      // The decodes carried by the batch that finished leave the merged batch, which is then
      // no longer full (filter_batch).
      const auto before = running_.size();
      std::erase_if(running_, [&](RequestId id) { return finished_flag_[id] != 0; });
      if (running_.size() != before) batch_is_full_ = false;
    }
    for (const RequestId id : prefilled_) {
      if (finished_flag_[id]) {
        batch_is_full_ = false;
      } else {
        running_.push_back(id);
      }
    }
    prefilled_.clear();
  } else if (!finished.empty()) {
    std::erase_if(running_, [&](RequestId id) { return finished_flag_[id] != 0; });
    decode_shrank_ = true;  // seen by the next update_running_batch
  }
}

// ---- Disaggregated roles (the header comment, "Disaggregated pools") ----

void SglangPolicy::build_prefill_role_batch(Batch& batch) {
  // event_loop_normal_disagg_prefill: PrefillBootstrapQueue.pop_bootstrapped moves requests to
  // the waiting queue while a metadata buffer is free (2 x max_running_requests,
  // Scheduler.init_disaggregation); each keeps its buffer until its transfer has landed.
  const int64_t buffers = 2 * config_.max_running_requests;
  while (!bootstrap_.empty() && metadata_buffers_in_use_ < buffers) {
    waiting_.push_back(bootstrap_.front());
    bootstrap_.pop_front();
    ++metadata_buffers_in_use_;
  }
  // get_next_disagg_prefill_batch_to_run clears batch_is_full before every prefill batch (no
  // update_running_batch runs here to clear it), and runs no decode: a prefill server's requests
  // never join its running batch, so none of PrefillAdder's budget goes to running requests.
  batch_is_full_ = false;
  last_was_prefill_ = schedule_prefill(batch);
}

void SglangPolicy::release_held_kv(RequestId id) {
  if (held_.empty() || held_[id] == 0) {
    throw std::logic_error(fmt::format("{}: release of request {}'s KV, which is not held", name_, id));
  }
  // process_disagg_prefill_inflight_queue on KVPoll.Success: release_kv_cache unlocks the radix
  // tree (the prompt stays cached, evictable) and the metadata buffer is freed.
  held_[id] = 0;
  kv_->release(id);
  --metadata_buffers_in_use_;
}

void SglangPolicy::on_kv_received(RequestId id, SimTime /*now*/) {
  if (remote_stage_.empty() || remote_stage_[id] != RemoteStage::kTransferring || !kv_->holds(id)) {
    throw std::logic_error(fmt::format("{}: KV of request {} arrived, but none was awaited", name_, id));
  }
  // KVPoll.Success: the scheduler sees it at its next poll of the transfer queue, one step later
  // with the overlap scheduler (the header comment, "Overlap scheduling").
  if (config_.overlap_schedule) {
    intake_.on_arrival(id);
    return;
  }
  receive(id);
}

SimTime SglangPolicy::host_copy_time(int64_t tokens) const { return host_kv_copy_time(*env_->cost_model, tokens); }

SglangPolicy::RunningFootprint SglangPolicy::running_footprint() const {
  // pop_preallocated's retractable_tokens, Σ len(origin_input_ids) + len(output_ids) over the
  // running batch, and _need_space_for_single_req: max of min(max_new_tokens, 4096) +
  // len(origin_input_ids) over it, less that. A running request's KV holds all it knows but its
  // last token (exact also while a decode run repeats, when its progress lags).
  RunningFootprint f;
  if (running_.empty()) return f;
  int64_t largest = std::numeric_limits<int64_t>::min();
  for (const RequestId id : running_) {
    f.retractable += kv_->tokens_of(id) + 1;
    largest = std::max(largest, std::min(max_new_tokens(id), config_.clip_max_new_tokens) +
                                    static_cast<int64_t>(env_->request(id).prompt_tokens));
  }
  f.single_request_need = largest - f.retractable;
  return f;
}

bool SglangPolicy::preallocation_fits(RequestId id, const RunningFootprint& footprint) const {
  // pop_preallocated: a request slot (DecodeReqToTokenPool.available_size) and a metadata buffer
  // (2 x max_running_requests) must be free; the transfer queue holds a buffer per request.
  if (decoding_requests() >= request_slots_) return false;
  if (static_cast<int64_t>(transfer_queue_.size()) >= 2 * config_.max_running_requests) return false;
  // _allocatable_token_budgets: the free KV less max(R per request that will decode here, the
  // largest running request's need), the requests taken earlier in this pass counted among them
  // (they are in the transfer queue already). No decode radix cache: no evictable KV, no prefix.
  const int64_t reserved = config_.num_reserved_decode_tokens;
  const int64_t allocatable =
      free_kv_tokens() - std::max(reserved * decoding_requests(), footprint.single_request_need);
  // The request's prompt (_pre_alloc_fill_len: nothing generated yet here) plus R, and its
  // prompt + min(max_new_tokens, 4096) less what retracting the running requests would free.
  const int64_t prompt = env_->request(id).prompt_tokens;
  const int64_t required = std::max(
      prompt + reserved, prompt + std::min(max_new_tokens(id), config_.clip_max_new_tokens) - footprint.retractable);
  return required <= allocatable;
}

bool SglangPolicy::resumption_fits(RequestId id, int64_t allocatable) const {
  // resume_retracted_reqs: a request slot, and its KV (_pre_alloc_fill_len: all it knows but its
  // last token, what was copied out) + R within the budget.
  if (decoding_requests() >= request_slots_) return false;
  return env_->progress_of(id).computed_tokens + config_.num_reserved_decode_tokens <= allocatable;
}

bool SglangPolicy::resume_retracted(Batch& batch) {
  if (retracted_.empty()) return false;
  // The budget is worked out once and lowered by what each resumed request takes (fill + R).
  int64_t allocatable = resumption_allocatable();
  size_t resumed = 0;
  for (const RequestId id : retracted_) {
    if (!resumption_fits(id, allocatable)) break;
    const int64_t tokens = env_->progress_of(id).computed_tokens;
    // (resumption_fits leaves R per request free, so the pages are there.)
    if (!kv_->try_admit(id, tokens, tokens)) break;
    allocatable -= tokens + config_.num_reserved_decode_tokens;
    batch.extra_time += host_copy_time(tokens);  // Req.load_kv_cache: host -> device
    // process_decode_queue: self.waiting_queue.extend(resumed_reqs).
    waiting_.push_back(id);
    ++resumed;
  }
  retracted_.erase(retracted_.begin(), retracted_.begin() + static_cast<std::ptrdiff_t>(resumed));
  return resumed > 0;
}

bool SglangPolicy::preallocate() {
  // DecodePreallocQueue.pop_preallocated, first come first served: the first request that does
  // not fit stops it. Its bootstrap handshake is done by the time it arrives here.
  if (prealloc_.empty()) return false;
  const RunningFootprint footprint = running_footprint();  // the running batch does not change in a pass
  bool moved = false;
  while (!prealloc_.empty()) {
    const RequestId id = prealloc_.front();
    if (!preallocation_fits(id, footprint)) break;
    const int64_t prompt = env_->request(id).prompt_tokens;
    // _pre_alloc: KV for the prompt, in whole pages (the budget leaves R per request free; with R
    // below a page the last page may be missing, and the request waits).
    if (!kv_->try_admit(id, prompt, prompt)) break;
    prealloc_.pop_front();
    transfer_queue_.push_back(id);
    remote_stage_[id] = RemoteStage::kTransferring;
    moved = true;
    // send_metadata: the prefill side sends the whole prompt (no decode radix cache).
    env_->start_kv_transfer(id, prompt);
  }
  return moved;
}

bool SglangPolicy::take_landed() {
  // DecodeTransferQueue.pop_transferred: the landed requests, in the transfer queue's order, to
  // the waiting queue (their first token committed); the rest keep waiting for their KV.
  if (landed_ == 0) return false;
  size_t kept = 0;
  for (const RequestId id : transfer_queue_) {
    if (remote_stage_[id] == RemoteStage::kLanded) {
      remote_stage_[id] = RemoteStage::kNone;
      waiting_.push_back(id);
    } else {
      transfer_queue_[kept++] = id;
    }
  }
  transfer_queue_.resize(kept);
  landed_ = 0;
  return true;
}

bool SglangPolicy::join_running() {
  // get_new_prebuilt_batch: min(req_to_token_pool.size, max_running_requests) less the running
  // batch's size join it from the front of the waiting queue; the PrebuiltExtendBatch computes
  // nothing (prepare_for_prebuilt) and is merged at the running batch's end, whose decode step
  // follows at once.
  const auto room = config_.max_running_requests - static_cast<int64_t>(running_.size());
  const auto n = static_cast<std::ptrdiff_t>(std::min<int64_t>(room, static_cast<int64_t>(waiting_.size())));
  if (n <= 0) return false;
  running_.insert(running_.end(), waiting_.begin(), waiting_.begin() + n);
  waiting_.erase(waiting_.begin(), waiting_.begin() + n);
  return true;
}

void SglangPolicy::build_decode_role_batch(Batch& batch) {
  // event_loop_normal_disagg_decode. process_decode_queue: retracted requests are resumed first;
  // while any is left, no request is preallocated and no landed one taken.
  last_was_prefill_ = false;
  bool moved = resume_retracted(batch);
  if (retracted_.empty()) {
    moved |= preallocate();
    moved |= take_landed();
  }
  // get_next_disagg_decode_batch_to_run: the waiting requests join the running batch, which
  // then decodes (update_running_batch, retraction included).
  moved |= join_running();
  schedule_decode(batch);
  // A step that moved a request between the queues is no repeat of the last.
  if (moved) repeatable_ = false;
}

bool SglangPolicy::decode_queues_settled() const {
  // What build_decode_role_batch would move, with no arrival, landing or finish in between (a
  // decode run never passes one) and only the running requests' KV growing since: every test
  // reads the KV and the queues as they are now, as the next schedule() would.
  if (!waiting_.empty() && static_cast<int64_t>(running_.size()) < config_.max_running_requests) return false;
  if (!retracted_.empty()) return !resumption_fits(retracted_.front(), resumption_allocatable());
  // (Nothing retracted: the last schedule() took every landed request.)
  return prealloc_.empty() || !preallocation_fits(prealloc_.front(), running_footprint());
}

}  // namespace batchsim
