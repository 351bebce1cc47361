// batchsim — speculative decoding: what drafts, how many tokens, and how often they are accepted.
//
// A drafter proposes k tokens after a sequence's last one; the target model verifies the last
// token and the k drafts in one forward pass (1 + k query tokens attending to the sequence's
// KV), keeps the longest accepted prefix of the drafts and samples one token more, so a step
// gains 1 + accepted tokens (Leviathan et al., "Fast Inference from Transformers via
// Speculative Decoding", ICML 2023; vLLM v1 v1/core/sched/scheduler.py update_from_output:
// num_computed_tokens -= rejected). The drafters (vLLM --speculative-config `method`, SGLang
// --speculative-algorithm; docs/REFERENCE-moe-spec-offload.md section 5):
//   ngram     prompt lookup on the CPU (vLLM's NgramProposer): no GPU pass;
//   eagle     a one-layer draft head on the target's hidden states (EAGLE, arXiv 2401.15077);
//   eagle3    EAGLE-3's head (arXiv 2503.01840), costed as eagle;
//   mtp       the model's own multi-token-prediction layer (DeepSeek-V3, num_nextn_predict_layers
//             = 1), one decoder layer of the target, k passes of the one module;
//   draft     a separate small model (`draft:MODEL`), k forward passes of it with its own KV.
// How the passes are costed is CostModel's (cost_model.h, "Speculative decoding").
//
// Acceptance rates are per draft position and unconditional, as vLLM's synthetic rejection
// sampler takes them (config/speculative.py synthetic_acceptance_rates: non-increasing, the
// rate at which position i is accepted at all): position i is accepted with probability
// rate[i] / rate[i - 1] once position i - 1 was, so the expected accepted drafts per step are
// their sum. One rate alone is Leviathan et al.'s per-token acceptance alpha: position i is
// accepted with probability alpha^i. Shipped presets (speculative_presets()) carry measured
// rates with their source.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

enum class DraftMethod { ngram, eagle, eagle3, mtp, draft_model };
std::string_view draft_method_name(DraftMethod method);

struct SpeculativeDecoding {
  DraftMethod method = DraftMethod::ngram;
  int k = 0;  // draft tokens per step; 0: off
  // Unconditional acceptance rate of each draft position (size k, non-increasing, in [0, 1]).
  std::vector<double> accept;
  std::string draft_model;    // method draft_model: the draft model's name or config
  std::string accept_source;  // where the rates come from (a preset's citation, or "given")

  bool enabled() const { return k > 0; }
  // Expected accepted drafts per full step: the sum of the rates.
  double expected_accepted() const;
  // KV slots vLLM reserves beyond the verified tokens (allocate_slots num_lookahead_tokens): k for
  // a drafter that runs on the GPU after the target and writes its drafts' KV (EAGLE, MTP, a
  // draft model), none for n-gram lookup.
  int lookahead_slots() const { return method == DraftMethod::ngram ? 0 : k; }
  // Tokens per sequence that vLLM takes from the step budget for drafting
  // (VllmConfig._set_max_num_scheduled_tokens, max_num_new_slots_for_drafting): 1 for a draft
  // model, 0 for serial EAGLE, MTP and n-gram.
  int budget_slots_per_sequence() const { return method == DraftMethod::draft_model ? 1 : 0; }
  // Whether the drafter runs forward passes on the GPU.
  bool drafts_on_gpu() const { return method != DraftMethod::ngram; }
};

// A measured mean acceptance length tau (tokens per step, 1 + accepted drafts) with the k it
// was measured at. Published figures are such means, not rates per position; a preset's rates
// are Leviathan et al.'s geometric ones that give the same mean at that k: position i accepted
// with alpha^i, sum over i <= k of alpha^i = tau - 1 (a shorter k takes the first of them).
struct SpeculativePreset {
  std::string name;
  DraftMethod method;
  double mean_accepted_length = 1;  // tau
  int measured_k = 1;
  std::string source;
  std::vector<double> rates(int k) const;
};
const std::vector<SpeculativePreset>& speculative_presets();

// Parses `METHOD:k=K:accept=RATES` (METHOD ngram | eagle | eagle3 | mtp | draft:MODEL; RATES a
// list A1,A2,... of k rates, one rate alpha, or a preset's name). Throws UserError naming
// `option` on anything else.
SpeculativeDecoding parse_speculative_decoding(std::string_view spec, std::string_view option);

}  // namespace batchsim
