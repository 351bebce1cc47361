#include "policies/continuous/continuous_policy.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "policies/common/host_copy.h"
#include "sim/decode_cohort.h"

namespace batchsim {

ContinuousPolicy::ContinuousPolicy(ContinuousPolicyConfig config, std::string name)
    : config_(config), name_(std::move(name)) {}

BatchDefaults vllm_batch_defaults(ContinuousPolicyConfig::UsageContext context, int64_t gpu_memory_bytes,
                                  const std::string& gpu_name) {
  const bool large = gpu_memory_bytes >= (int64_t{70} << 30) && gpu_name.find("a100") == std::string::npos;
  const bool llm = context == ContinuousPolicyConfig::UsageContext::llm_class;
  if (large) return {llm ? 16384 : 8192, 1024};
  return {llm ? 8192 : 2048, 256};
}

ContinuousPolicyConfig ContinuousPolicy::resolved_limits(const CostModel* cost_model) const {
  ContinuousPolicyConfig c = config_;
  if (c.usage_context != ContinuousPolicyConfig::UsageContext::none && cost_model != nullptr) {
    std::string name = cost_model->gpu().name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const BatchDefaults d = vllm_batch_defaults(c.usage_context, cost_model->gpu().memory_bytes, name);
    if (!c.max_num_batched_tokens_set) c.max_num_batched_tokens = d.max_num_batched_tokens;
    if (!c.max_num_seqs_set) c.max_num_seqs = d.max_num_seqs;
  }
  return c;
}

std::optional<Policy::KvSizing> ContinuousPolicy::kv_sizing(const CostModel& cost_model,
                                                            double gpu_memory_utilization) const {
  // Both engines measure their peak with one step of the budget this policy runs with before
  // they size the KV cache; what differs is how many rows of logits that step computes.
  const ContinuousPolicyConfig limits = resolved_limits(&cost_model);
  const int64_t max_len = std::max<int64_t>(1, cost_model.model().max_context_tokens);
  const int64_t profile_tokens = ContinuousPacking::budget_for(limits, max_len);
  // A paged pool keeps a sliding-window layer's blocks for its window only (vLLM v1's hybrid
  // KV cache manager; vLLM v0 never served a model mixing window and full layers: gpt-oss came
  // with 0.10.1, V1 only): capacity in tokens of the full layers, and each request holds
  // sliding_window_side_blocks() more (attach). A reserving cache reserves every layer.
  const CostModel::WindowKv window = limits.paged ? CostModel::WindowKv::hybrid : CostModel::WindowKv::as_full;
  if (config_.free_gpu_memory_fraction > 0) {
    // TensorRT-LLM's dummy context requests of min(max_num_tokens, max_seq_len) tokens make up
    // max_num_tokens, each sampling one token (KvCacheCreator._create_dummy_context_requests,
    // tensorrt_llm/_torch/pyexecutor/_util.py).
    const int64_t per_request = std::min(profile_tokens, max_len);
    const int64_t rows = (profile_tokens + per_request - 1) / per_request;
    return KvSizing{
        cost_model.kv_capacity_tokens_of_free(config_.free_gpu_memory_fraction, profile_tokens, rows, window),
        fmt::format("free_gpu_memory_fraction {:g} of the memory left after a {}-token profile run",
                    config_.free_gpu_memory_fraction, profile_tokens)};
  }
  // vLLM's profile run spreads max_num_batched_tokens over min(max_num_batched_tokens,
  // max_num_seqs) dummy requests and samples each (GPUModelRunner.profile_run and _dummy_run,
  // vllm/v1/worker/gpu_model_runner.py; Worker.determine_available_memory gives the KV what the
  // --gpu-memory-utilization share leaves after its peak; local-inference-lab/vllm@69520bc).
  // vLLM v0 profiled max_num_batched_tokens over max_num_seqs sequences the same way
  // (vllm/worker/model_runner.py profile_run), and TGI's warmup is a prefill of its token budget
  // that computes the logits of every prompt token (prefill_logprobs in the warmup requests of
  // backends/v3/src/client/grpc_client.rs), which max_num_seqs above that budget gives here.
  const int64_t rows = std::min(profile_tokens, limits.max_num_seqs);
  return after_profile_run(cost_model, gpu_memory_utilization, profile_tokens, rows, window);
}

void ContinuousPolicy::attach(PolicyEnv& env) {
  env_ = &env;
  config_ = resolved_limits(env.cost_model);
  capacity_.attach(config_, env, name_);
  packing_.attach(config_, env);
  cohort_ = nullptr;
  if (env.cohort != nullptr && capacity_.kv().cohort_grows_by_count() && !capacity_.ranking().ranked() &&
      !config_.generation_first && env.role == PoolRole::kColocated) {
    cohort_ = env.cohort;
    // (A reservation takes no blocks as it grows: its cohort counts none.)
    cohort_->enable(capacity_.paged_kv() != nullptr ? capacity_.paged_kv()->block_size() : 1);
  }
}

bool reject_over_context(PolicyEnv& env, RequestId id) {
  const Request& r = env.request(id);
  const int64_t total = static_cast<int64_t>(r.prompt_tokens) + r.output_tokens;
  if (env.max_model_len > 0 && total > env.max_model_len) {
    env.reject(id, fmt::format("prompt + output exceed max_model_len {}: {} + {} tokens", env.max_model_len,
                               r.prompt_tokens, r.output_tokens));
    return true;
  }
  return false;
}

bool reject_over_cache(PolicyEnv& env, const KvCacheManager& kv, RequestId id, int64_t footprint_tokens) {
  if (kv.fits_when_empty(footprint_tokens)) return false;
  env.reject(id, fmt::format("needs more KV than the whole cache holds ({} tokens): {} tokens", kv.capacity_tokens(),
                             footprint_tokens));
  return true;
}

void ContinuousPolicy::on_arrival(RequestId id, SimTime /*now*/) {
  // A streaming run hands a settled request's id (its slot) to a later arrival.
  capacity_.on_arrival(id);
  const Request& r = env_->request(id);
  if (reject_over_context(*env_, id)) return;
  if (env_->role == PoolRole::kDecode && env_->progress_of(id).computed_tokens > 0) {
    // Prefilled elsewhere: no prompt limit applies here (a re-prefill after a recompute
    // preemption is cut into budget-sized chunks, see ContinuousPacking::step_tokens), only
    // whether its KV can ever fit.
    if (reject_over_cache(*env_, capacity_.kv(), id, capacity_.reserve_tokens(id))) return;
    capacity_.add_remote(id);
    return;
  }
  // vLLM v0: without chunking, prompt_limit = min(max_model_len, max_num_batched_tokens).
  if (!config_.chunked && r.prompt_tokens > packing_.token_budget()) {
    env_->reject(id, fmt::format("prompt exceeds max_num_batched_tokens {} (chunked prefill "
                                 "is off): {} tokens",
                                 packing_.token_budget(), r.prompt_tokens));
    return;
  }
  // vLLM v0 can_allocate says NEVER from the prompt's blocks alone; we test the whole footprint
  // (prompt + output - 1). A request preempted by recompute is readmitted with prompt +
  // generated tokens, through the same watermark check: one whose footprint leaves less than
  // the watermark in an empty cache could be admitted, grow, be preempted and then never be
  // readmitted (v0 drops it then as FINISHED_IGNORED). Rejecting it on arrival says why.
  if (reject_over_cache(*env_, capacity_.kv(), id, capacity_.reserve_tokens(id))) return;
  if (config_.async_scheduling) {
    intake_.on_arrival(id);
    return;
  }
  capacity_.waiting().add(id);
}

bool ContinuousPolicy::schedule_running(Batch& batch, int64_t& budget) {
  if (!config_.generation_first) return schedule_running_pass(batch, budget, RunningPass::all);
  // TensorRT-LLM MicroBatchScheduler::operator(): generation requests take their tokens in the
  // first loop; context chunks share what is left after it.
  const bool decoded = schedule_running_pass(batch, budget, RunningPass::decodes);
  const bool prefilled = schedule_running_pass(batch, budget, RunningPass::prefills);
  return decoded && prefilled;
}

bool ContinuousPolicy::schedule_running_pass(Batch& batch, int64_t& budget_left, RunningPass pass) {
  std::vector<RequestId>& running = capacity_.running();
  bool preempted = false;
  // A local copy, written back at the end: through the reference every batch append would
  // make the compiler store and reload it, once per running request.
  int64_t budget = budget_left;
  // vLLM v1 schedule() step 1 / v0 _schedule_running: running requests in admission order
  // while budget is left (a decode costs one token; a partial prefill its next chunk).
  const size_t first = pass != RunningPass::all ? 0
                       : cohort_ != nullptr     ? schedule_cohort(batch, budget, preempted)
                                                : schedule_leading_decodes(batch, budget);
  for (size_t i = first; i < running.size() && budget > 0;) {
    const RequestId id = running[i];
    const RequestProgress& p = env_->progress_of(id);
    // (Read once: nothing below changes this request's progress but its own preemption, which
    // ends the pass.)
    const int64_t known = env_->known_tokens(id);
    const int64_t need = known - p.computed_tokens;
    if (pass != RunningPass::all) {
      const bool decode = p.generated_tokens > 0 && need == 1;
      if (decode != (pass == RunningPass::decodes)) {
        ++i;
        continue;
      }
    }
    // A step of one token (a decode, mostly) takes it whenever budget is left, under every rule
    // of step_tokens; running requests are mostly decodes, so they skip its rules.
    const int64_t n = need == 1 ? 1 : packing_.step_tokens(need, budget);
    if (n == 0) break;
    // Speculative decoding (vLLM v1 schedule(): num_new_tokens counts the request's drafts,
    // clipped by the budget, whose cut truncates the drafts): a decode verifies up to k drafts,
    // and its KV takes slots for them and for the drafter's lookahead (allocate_slots
    // num_lookahead_tokens). A request still in its prefill drafts nothing
    // (update_draft_token_ids drops a prefill chunk's drafts).
    // Neither drafts nor slots go past the most the request can hold (its reservation, or prompt
    // + max_tokens): tokens beyond it would never be kept.
    ContinuousPacking::Drafts d;
    if (packing_.speculates() && need == 1 && p.generated_tokens > 0) {
      d = packing_.drafts_within(std::max<int64_t>(0, capacity_.speculative_cap(id) - known), budget);
    }
    const int64_t drafts = d.drafts, slots = d.slots;
    bool scheduled = true;
    bool preempted_here = false;
    while (!capacity_.grow(id, p.computed_tokens + n + slots)) {
      // Out of blocks: preempt the newest running request (vLLM `running.pop()`), or the
      // lowest-ranked (priority, sjf), possibly this one. A ranked victim scheduled earlier in
      // this step leaves the batch and its tokens go back to the budget (vLLM v1 refunds
      // num_scheduled_tokens).
      const RequestId victim = capacity_.preemption_victim(batch);
      budget += packing_.remove_from_batch(victim, batch);
      capacity_.preempt(victim, batch);
      preempted = true;
      preempted_here = true;
      if (victim == id) {
        scheduled = false;
        break;
      }
    }
    // vLLM v1 `if new_blocks is None: break`: a request that preempted itself ends the pass.
    // Under fcfs it was the newest, so nothing runs after it anyway; under a ranked policy the
    // higher-ranked requests behind it wait for the next step, as in v1.
    if (!scheduled) break;
    // A victim may have been ahead of this request (a prefill in the decode pass, or a
    // lower-ranked request scheduled earlier).
    if (preempted_here && (i >= running.size() || running[i] != id)) {
      i = static_cast<size_t>(std::find(running.begin(), running.end(), id) - running.begin());
    }
    packing_.add_step(id, n, p, known, batch, static_cast<int32_t>(drafts));
    budget -= n + drafts;
    ++i;
  }
  budget_left = budget;
  return !preempted;
}

namespace {

// A running request whose next step is a plain decode: it has sampled, and all it knows but its
// last token is in the KV cache (what schedule_leading_decodes and schedule_cohort take).
inline bool plain_decode(const RequestProgress& p, const Request& r) {
  return p.generated_tokens > 0 && p.computed_tokens + 1 == r.prompt_tokens + p.generated_tokens;
}

}  // namespace

size_t ContinuousPolicy::schedule_cohort(Batch& batch, int64_t& budget, bool& preempted) {
  if (budget <= 0) return 0;  // (nobody steps, members included, as schedule_leading_decodes)
  std::vector<RequestId>& running = capacity_.running();
  KvCacheManager& kv = capacity_.kv();
  PagedKvCache* const paged_kv = capacity_.paged_kv();
  DecodeCohort& cohort = *cohort_;
  auto members = static_cast<size_t>(cohort.size());
  const size_t limit = std::min(running.size(), static_cast<size_t>(budget));
  if (members > limit) {
    // The budget ends among the members: the per-request loop stops where it does.
    dissolve_cohort();
    return schedule_leading_decodes(batch, budget);
  }
  // The plain decodes right behind the members join them (schedule_leading_decodes' test),
  // those whose reservation holds them to their last token (a reserving manager's; any
  // request's under paged KV); those at a block boundary take a block this step, as the
  // members whose tokens are.
  const Request* requests = env_->requests->data();
  const RequestProgress* progress = env_->progress->data();
  const bool paged = paged_kv != nullptr;
  const int64_t block_size = paged ? paged_kv->block_size() : 1;
  size_t end = members;
  int64_t blocks = paged ? cohort.blocks_next_step() : 0;
  for (; end < limit; ++end) {
    const RequestId id = running[end];
    const RequestProgress& p = progress[id];
    const Request& r = requests[id];
    const int64_t computed = p.computed_tokens;
    if (!plain_decode(p, r)) break;
    if (kv.tokens_of(id) != computed || !kv.grows_within(id, int64_t{r.prompt_tokens} + r.output_tokens - 1)) break;
    if (paged && computed % block_size == 0) ++blocks;
  }
  if (paged && blocks > paged_kv->free_blocks()) {
    // Out of blocks: what schedule_leading_decodes and the pass after it do, growing in order
    // and preempting the newest running request (vLLM `running.pop()`) whenever one does not
    // fit, until it fits or the one being grown is the newest and preempts itself, which ends
    // the pass. Under fcfs nothing is in the batch yet, and every victim is behind the one
    // being grown: members and joiners at the back leave first.
    blocks = 0;
    for (size_t c = 0; c < end; ++c) {
      const RequestId id = running[c];
      const bool needs =
          c < members ? cohort.needs_block_next_step(id) : progress[id].computed_tokens % block_size == 0;
      if (!needs) continue;
      while (paged_kv->free_blocks() - blocks < 1) {
        const RequestId victim = running.back();
        const size_t at = running.size() - 1;
        if (at < members) {
          leave_cohort(victim);
          --members;
        }
        if (at < end) --end;
        capacity_.preempt(victim, batch);
        preempted = true;
        if (victim == id) break;
      }
      if (end == c) break;  // it preempted itself: nobody is behind it
      ++blocks;
    }
  }
  for (size_t i = members; i < end; ++i) cohort.join(running[i], requests[running[i]].output_tokens);
  const int64_t size = cohort.size();
  if (size == 0) return 0;
  if (!kv.grow_cohort(size, blocks))
    throw std::logic_error("decode cohort growth failed after its blocks were counted");
  BatchShape& shape = batch.shape;
  shape.num_decodes += size;
  shape.decode_context_sum += cohort.next_context_sum();
  shape.decode_context_max = std::max(shape.decode_context_max, cohort.next_context_max());
  shape.num_sampled += size;  // each decode samples
  cohort.grow();
  budget -= size;
  batch.cohort = std::span<const RequestId>(running.data(), static_cast<size_t>(size));
  return static_cast<size_t>(size);
}

void ContinuousPolicy::leave_cohort(RequestId id) {
  cohort_->leave(id);
  // Its KV tokens, which lagged, are its computed ones (a running request's are, between steps).
  capacity_.kv().settle_cohort_member(id, env_->progress_of(id).computed_tokens);
}

void ContinuousPolicy::dissolve_cohort() {
  const auto members = static_cast<size_t>(cohort_->size());  // `running`'s prefix
  for (size_t i = 0; i < members; ++i) leave_cohort(capacity_.running()[i]);
}

size_t ContinuousPolicy::schedule_leading_decodes(Batch& batch, int64_t& budget) {
  PagedKvCache* const paged_kv = capacity_.paged_kv();
  // (One token per decode: a speculating replica's decodes take the general pass.)
  if (paged_kv == nullptr || budget <= 0 || packing_.speculates()) return 0;
  // Written in place (the items sized for the most there can be, then cut) and the shape's
  // decode aggregates (BatchShape::add_decode's) summed in locals: Batch::add per request would
  // store and reload them all, as the compiler cannot tell the batch from the KV cache's members.
  const std::vector<RequestId>& running = capacity_.running();
  const size_t limit = std::min(running.size(), static_cast<size_t>(budget));
  const size_t base = batch.items.size();
  batch.items.resize(base + limit);
  BatchItem* out = batch.items.data() + base;
  const RequestId* ids = running.data();
  const Request* requests = env_->requests->data();
  const RequestProgress* progress = env_->progress->data();
  int64_t context_sum = 0, context_max = 0;
  PagedKvCache::DecodeGrowth growth(*paged_kv);
  size_t i = 0;
  for (; i < limit; ++i) {
    const RequestId id = ids[i];
    const RequestProgress& p = progress[id];
    const int64_t computed = p.computed_tokens;
    if (!plain_decode(p, requests[id])) break;
    if (!growth.grow(id, computed)) break;
    out[i] = BatchItem{id, 1, computed};
    context_sum += computed + 1;
    context_max = std::max(context_max, computed + 1);
  }
  batch.items.resize(base + i);
  const auto scheduled = static_cast<int64_t>(i);
  BatchShape& shape = batch.shape;
  shape.num_decodes += scheduled;
  shape.decode_context_sum += context_sum;
  shape.decode_context_max = std::max(shape.decode_context_max, context_max);
  shape.num_sampled += scheduled;  // each decode samples
  budget -= scheduled;
  return i;
}

void ContinuousPolicy::schedule_swapped(Batch& batch, int64_t& budget) {
  const std::vector<RequestId>& running = capacity_.running();
  while (capacity_.has_swapped() && budget > 0 && static_cast<int64_t>(running.size()) < config_.max_num_seqs) {
    // vLLM v0 _schedule_swapped: FCFS from `swapped` while can_swap_in (which, like
    // admission, keeps the watermark free) and the budget allow.
    const RequestId id = capacity_.swapped_front();
    // The victim may have been swapped out in the middle of a chunked prefill: it resumes
    // with its next chunk, else with a decode.
    const int64_t n = packing_.step_tokens(packing_.need_of(id), budget);
    if (n == 0) break;
    if (!capacity_.swap_in(id, n, batch)) break;
    packing_.add_step(id, n, batch);
    budget -= n;
  }
}

void ContinuousPolicy::schedule_waiting(Batch& batch, int64_t& budget) {
  WaitingQueue& waiting = capacity_.waiting();
  const std::vector<RequestId>& running = capacity_.running();
  // TGI batching_task: the inner loop's prefill is always followed by a decode.
  if (config_.decode_after_admission && admitted_into_running_) {
    forced_decode_ = !waiting.empty();
    return;
  }
  if (!capacity_.admission_allowed(budget, steps_since_admission_, packing_)) {
    held_back_ = true;
    return;
  }
  // Whether this admission joins a running batch (TGI's inner loop) or starts one.
  into_running_ = !running.empty();
  // vLLM v1 schedule() step 2 / v0 _schedule_prefills: in the waiting queue's order (FCFS, or
  // by rank) while a sequence slot (max_num_seqs), budget and KV are left; the first request
  // that does not fit stops admission (head-of-line), so a later, smaller (or, under a ranked
  // policy, lower-ranked) request never overtakes it.
  while (!waiting.empty() && budget > 0 && static_cast<int64_t>(running.size()) < config_.max_num_seqs) {
    const RequestId id = waiting.front();
    if (capacity_.is_remote_pending(id)) {
      if (!capacity_.admit_remote(id)) break;
      continue;
    }
    const ContinuousCapacity::AdmissionStep step =
        capacity_.admission_step(id, budget, packing_.partial_prefills(), packing_);
    if (step.tokens == 0) break;
    if (!capacity_.admit(id, step, batch)) break;
    admitted_ = true;
    packing_.add_step(id, step.tokens, batch);
    budget -= step.tokens;
  }
}

bool ContinuousPolicy::fill_batch(Batch& batch, int64_t& budget) {
  if (!config_.mixed_prefill && !config_.chunked) {
    // vLLM v0 `_schedule_default`: admit prefills if nothing is swapped out; only when no
    // prefill was admitted, run the decodes; only when nothing was preempted, swap in.
    if (!capacity_.has_swapped()) schedule_waiting(batch, budget);
    if (!batch.empty()) return true;
    // v0 under policy "priority": `if len(prefills.seq_groups) == 0`, first
    // _schedule_priority_preemption, then the decodes of those left; its preemptions do not
    // hold back the swap-in (only _schedule_running's do).
    const bool forced = config_.preempt_for_waiting && capacity_.ranking().ranked() &&
                        capacity_.preempt_for_best_waiting(batch, packing_);
    if (!schedule_running(batch, budget)) return false;
    schedule_swapped(batch, budget);
    // v0 ends a step that preempted every running request with nothing scheduled; its next
    // step, at once since nothing computes, admits the waiting requests: here the same step.
    if (forced && batch.empty() && !capacity_.has_swapped()) schedule_waiting(batch, budget);
    return !forced;
  } else {
    // Mixed (Orca) and chunked (Sarathi-Serve, vLLM v1): running first, then swapped and new
    // requests, the latter only in a step without preemption (vLLM v1 scheduler step 2).
    if (!schedule_running(batch, budget)) return false;
    schedule_swapped(batch, budget);
    if (!capacity_.has_swapped()) schedule_waiting(batch, budget);
  }
  return true;
}

// Inlined into schedule(), whose synchronous path is then the body it had before async
// scheduling existed.
[[gnu::always_inline]] inline void ContinuousPolicy::build_batch(Batch& batch) {
  capacity_.promote_received();
  bool preempted = false;
  for (;;) {
    int64_t budget = packing_.token_budget();
    packing_.begin_batch();
    admitted_ = false;
    held_back_ = false;
    forced_decode_ = false;
    into_running_ = false;
    const bool cut_short = !fill_batch(batch, budget);
    preempted |= cut_short;
    // Under a ranked policy a step can end with nothing scheduled: the first request grown was
    // the lowest-ranked and preempted itself, which ends the running pass (vLLM v1 `break`),
    // and a step that preempted admits nobody. vLLM's step then computes nothing and the
    // engine schedules again at once; the simulation runs no empty iteration, so that next
    // step is taken here. Each such pass moves a request out of the running set, so it ends.
    // (A swap-out's transfer time stays in batch.extra_time.)
    if (!(cut_short && batch.empty() && capacity_.ranking().ranked())) break;
  }
  // A step that admitted is no decode step even when its shape is all decodes: a request
  // readmitted after recompute whose cache hit leaves one token to compute (its own output
  // blocks are cached) runs alone in an exclusive prefill step, and the next step differs.
  // A remote request whose KV was allocated now is no decode of this batch, but it will join
  // a later one: the next step differs.
  // Admissions may have moved `running` since the cohort's span was taken.
  if (!batch.cohort.empty()) {
    batch.cohort = std::span<const RequestId>(capacity_.running().data(), batch.cohort.size());
  }
  repeatable_ = !preempted && !admitted_ && !capacity_.remote_admitted() && !batch.empty() &&
                batch.shape.prefills.empty() && !capacity_.has_swapped();
  steps_since_admission_ = admitted_ ? 0 : steps_since_admission_ + 1;
  admitted_into_running_ = admitted_ && into_running_;
}

void ContinuousPolicy::schedule(SimTime now, Batch& batch) {
  if (config_.async_scheduling) [[unlikely]] {
    schedule_ahead(now, batch);
    return;
  }
  build_batch(batch);
}

void ContinuousPolicy::schedule_ahead(SimTime now, Batch& batch) {
  // vLLM's async scheduling: this step was chosen while the previous one ran.
  const int64_t steps_since_admission = steps_since_admission_;
  const bool held = intake_.schedule(
      now, batch, [this](RequestId id) { capacity_.waiting().add(id); }, [&] { build_batch(batch); },
      [&] { steps_since_admission_ = steps_since_admission; });
  if (held) repeatable_ = false;  // a held request joins the next step
}

bool ContinuousPolicy::repeat_decode_step(const Batch& batch) {
  // After a decode-only schedule() without preemption, the next schedule() returns the same
  // decodes as long as no request arrives or finishes and no decode runs out of KV: the
  // running set and its order are unchanged; a waiting request was kept out by the token
  // budget (the same decodes use the same share), max_num_seqs (the same count) or KV memory
  // (which decode growth only shrinks); in exclusive mode a decode-only iteration already
  // means no prefill could be admitted, for the same lasting reasons.
  if (!repeatable_) return false;
  // decode_after_admission kept the waiting requests out of this step only.
  if (forced_decode_) return false;
  // TGI's wait rule is the one reason to keep new requests out that expires by itself: the
  // schedule() after enough decode steps lets them in. (Its other branch, too few requests
  // fitting at once, lasts: decodes only shrink the room.)
  if (held_back_ && steps_since_admission_ + 1 >= config_.max_waiting_tokens) return false;
  if (!batch.cohort.empty()) {
    // The cohort's step (its members are all the batch: a decode-only step's plain decodes),
    // in O(1). Its cache counts blocks, so the only cached blocks it can evict are a preempted
    // request's own (PreemptedBlockQueue), checked as below.
    if (!batch.items.empty()) return false;
    const PagedKvCache* paged = capacity_.paged_kv();
    const int64_t blocks = paged != nullptr ? cohort_->blocks_next_step() : 0;
    if (paged != nullptr && growth_evicts_a_waiting_hit(*paged, blocks)) return false;
    if (!capacity_.kv().grow_cohort(cohort_->size(), blocks)) return false;  // schedule() would preempt
    cohort_->grow();
    ++steps_since_admission_;
    return true;
  }
  // The KV cache takes the run's steps in O(1) each (KvCacheManager::begin_decode_run); the
  // requests' own counts catch up when the run ends (on_iteration_end).
  KvCacheManager& kv = capacity_.kv();
  if (!kv.in_decode_run()) kv.begin_decode_run(batch.items);
  if (config_.paged) {
    const auto& paged = static_cast<const PagedKvCache&>(kv);
    const int64_t new_blocks = paged.decode_run_blocks();
    if (new_blocks > paged.free_blocks()) return false;  // schedule() would preempt
    // With prefix caching and a request waiting, growth must not evict a block of its cached
    // prefix: a shorter hit can need fewer free blocks (a budget-capped chunk), so schedule()
    // must look again. Admission stops at the head of the queue, so only the head's prefix
    // counts, unless TGI's wait rule counts what the others would find; any other eviction
    // only shrinks the free room, as growth does. With nobody waiting, what is cached
    // changes no decision of schedule().
    if (growth_evicts_a_waiting_hit(paged, new_blocks)) return false;
  }
  if (!kv.decode_run_step()) throw std::logic_error("decode growth failed after its blocks were counted");
  ++steps_since_admission_;  // as schedule() would count this decode-only step
  return true;
}

bool ContinuousPolicy::growth_evicts_a_waiting_hit(const PagedKvCache& paged, int64_t new_blocks) const {
  const WaitingQueue& waiting = capacity_.waiting();
  if (waiting.empty()) return false;
  return config_.max_waiting_tokens > 0 ? paged.allocation_evicts(new_blocks)
                                        : paged.allocation_evicts_run_of(waiting.front(), new_blocks);
}

void ContinuousPolicy::on_iteration_end(const Batch& /*batch*/, std::span<const RequestId> finished, SimTime now) {
  capacity_.kv().end_decode_run();  // the iteration (run) that grew the requests has ended
  if (config_.async_scheduling) intake_.on_iteration_end(now);
  if (finished.empty()) return;
  capacity_.release_finished(finished, cohort_ != nullptr);
}

}  // namespace batchsim
