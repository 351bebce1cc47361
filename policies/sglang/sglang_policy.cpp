#include "policies/sglang/sglang_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

// SchedulePolicy._determine_active_policy (schedule_policy.py): lpm falls back to fcfs while
// more than 128 requests wait ("turn off the expensive prefix matching and sorting").
constexpr size_t kLpmMaxWaiting = 128;
// IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and ..._DEPRIORITIZE_THRESHOLD (schedule_policy.py).
constexpr int64_t kInBatchPrefixThreshold = 32;

enum class AddResult { kContinue, kNoToken, kOther };

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
  PrefixCacheSource prefix;
  if (config_.radix_cache) prefix = {env.requests, env.prefix_blocks};
  const auto n = static_cast<int64_t>(env.requests->size());
  kv_ = std::make_unique<PagedKvCache>(n, blocks, static_cast<int32_t>(page), 0.0, prefix);
  finished_flag_.assign(n, 0);
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
  waiting_.push_back(id);
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

bool SglangPolicy::schedule_prefill(Batch& batch) {
  // Scheduler.get_new_batch_prefill (scheduler.py).
  if ((batch_is_full_ || waiting_.empty()) && chunked_ < 0) return false;
  const auto running_bs = static_cast<int64_t>(running_.size());
  if (running_bs >= config_.max_running_requests && chunked_ < 0) {
    batch_is_full_ = true;
    return false;
  }
  if (config_.lpm && config_.radix_cache && waiting_.size() <= kLpmMaxWaiting) sort_waiting_by_prefix();

  // PrefillAdder (schedule_policy.py). rem_total_tokens = available + evictable KV -
  // rem_total_token_offset; the offset starts at what the running requests are expected to
  // write, min(max_new_tokens left, clip) x new_token_ratio each, and grows by every admitted
  // request's extend tokens + max_new_tokens + one page (_update_prefill_budget). The KV this
  // batch allocates is added back to the live free count, so that the budget sees what SGLang
  // sees before prepare_for_extend allocates (while prefixes the batch locks leave it, as in
  // SGLang).
  double offset = 0;
  for (const RequestId id : running_) {
    offset += static_cast<double>(expected_new_tokens(id)) * new_token_ratio_;
  }
  // Mixed chunks: the running requests' decode tokens come out of every budget first
  // (PrefillAdder's mixed_with_decode_tokens).
  const int64_t mixed_decodes = config_.mixed_chunk ? running_bs : 0;
  offset += static_cast<double>(mixed_decodes);
  const int64_t page = config_.page_size;
  int64_t allocated = 0;  // tokens of new pages this batch took
  int64_t rem_input = config_.max_prefill_tokens - mixed_decodes;
  int64_t rem_chunk = config_.chunked_prefill_size - mixed_decodes;
  auto free_tokens = [&] { return kv_->free_blocks() * page; };
  auto rem_total = [&] { return static_cast<double>(free_tokens() + allocated) - offset; };
  auto charge = [&](int64_t extend, int64_t max_new, int64_t page_term) {
    offset += static_cast<double>(ceil_page(extend) + max_new + page_term);
    rem_input -= ceil_page(extend);
    rem_chunk -= ceil_page(extend);
  };
  // PrefillAdder.budget_state.
  auto budget_state = [&] {
    if (rem_total() <= 0 || free_tokens() <= 0) return AddResult::kNoToken;
    if (rem_input <= 0 || rem_chunk <= 0) return AddResult::kOther;
    return AddResult::kContinue;
  };
  int64_t can_run = 0;

  if (chunked_ >= 0) {
    // PrefillAdder.add_chunked_req: the next chunk, at most the chunk budget; its output is
    // charged with its last chunk. Its KV was never checked against the ratio again; here a
    // chunk also waits for free KV (the newest adder's available_chunk_tokens), rather than
    // fail to allocate.
    const RequestId id = chunked_;
    const int64_t computed = env_->progress_of(id).computed_tokens;
    const int64_t need = env_->known_tokens(id) - computed;
    const int64_t room = (kv_->free_blocks() + kv_->blocks_of(id)) * page - computed;
    const int64_t n = std::min({need, rem_chunk, room});
    if (n > 0) {
      const int64_t before = kv_->blocks_of(id);
      if (!kv_->try_grow(id, computed + n)) throw std::logic_error("chunk growth failed after its room was counted");
      allocated += (kv_->blocks_of(id) - before) * page;
      const bool truncated = n < need;
      charge(n, truncated ? 0 : expected_new_tokens(id), 0);
      add_step(id, n, batch);
      ++can_run;
      if (!truncated) {
        prefilled_.push_back(id);
        chunked_ = -1;
      }
    }
  }

  // The waiting queue, in order, while PrefillAdder.add_one_req says CONTINUE.
  std::vector<RequestId> admitted;
  for (const RequestId id : waiting_) {
    if (can_run >= config_.max_running_requests - running_bs) {  // get_num_allocatable_reqs
      batch_is_full_ = true;
      break;
    }
    const int64_t known = env_->known_tokens(id);
    const int64_t cached = config_.radix_cache ? kv_->cached_prefix_tokens(id, known) : 0;
    const int64_t extend = known - cached;
    const int64_t max_new = expected_new_tokens(id);
    AddResult result = AddResult::kContinue;
    // add_one_req: total_tokens = extend + max_new + page (per_req_token_overhead) must stay
    // below rem_total_tokens.
    if (static_cast<double>(extend + max_new + page) >= rem_total()) {
      result = AddResult::kNoToken;
    } else {
      int64_t n = extend;
      bool truncated = false;
      if (ceil_page(extend) > rem_chunk) {
        // _select_prefill_admission: cut at the chunk budget, page-aligned from the prefix
        // on; a chunk charges no output.
        n = (cached + rem_chunk / page * page) / page * page - cached;
        truncated = true;
        if (n <= 0 || chunked_ >= 0) result = AddResult::kOther;
      }
      if (result == AddResult::kContinue) {
        // The ratio check guarantees the extend tokens are free, but not an evictable prefix
        // hit this admission pins: the cache may still refuse, which ends admission as
        // NO_TOKEN.
        if (!kv_->try_admit(id, cached + n, cached + n)) {
          result = AddResult::kNoToken;
        } else {
          allocated += (kv_->blocks_for(cached + n) - kv_->blocks_for(cached)) * page;
          if (cached > 0) env_->use_cached_prefix(id, cached);
          charge(n, truncated ? 0 : max_new, page);
          add_step(id, n, batch);
          admitted.push_back(id);
          ++can_run;
          if (truncated) {
            chunked_ = id;
          } else {
            prefilled_.push_back(id);
          }
          result = budget_state();
        }
      }
    }
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

void SglangPolicy::retract(RequestId id) {
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
      retract(victim);
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
      retract(chunked_);
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
      now, batch, [this](RequestId id) { waiting_.push_back(id); }, [&] { build_batch(batch); }, [] {});
  if (held) repeatable_ = false;  // a held request joins the next batch
}

void SglangPolicy::build_batch(Batch& batch) {
  // Scheduler.get_next_batch_to_run: a prefill batch if one can be formed, else decode.
  repeatable_ = false;
  mixed_decodes_ = 0;
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
  // a request arrives or finishes) and their next tokens' pages are free (no retraction).
  if (!repeatable_ || chunked_ >= 0 || decode_shrank_) return false;
  if (!waiting_.empty() && !batch_is_full_) return false;
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

}  // namespace batchsim
