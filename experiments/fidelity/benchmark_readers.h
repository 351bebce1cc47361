// batchsim — a user's own benchmark as a recorded run (`batchsim validate-serving --run FILE`,
// issue 44): the per-request results of the two clients people benchmark servers with, read
// into the RecordedRun that run_replay.h replays request by request.
//
// vLLM's `vllm bench serve --save-result --save-detailed` (vllm/benchmarks/serve.py, the result
// dict of benchmark()): one JSON object with the run's settings (model_id, max_concurrency,
// request_rate, num_prompts) and, per request in the order sent, input_lens, output_lens, ttfts
// (seconds from the request's start to its first token), itls (the gaps between its later
// tokens, seconds), errors ("" when it succeeded) and, from vLLM 0.11 on, start_times (the
// client's perf_counter when it sent the request). A request's measured e2e is its TTFT plus its
// gaps; its TPOT their sum over output - 1, vLLM's own definition.
//
// aiperf's `profile_export.jsonl` (docs/tutorials/working-with-profile-exports.md): one record a
// line, metadata.request_start_ns (when aiperf sent it, epoch ns) and metrics with
// {value, unit}: input_sequence_length, output_sequence_length, time_to_first_token and
// request_latency (ms); a failed request has a non-null `error` and is left out. The sibling
// profile_export_aiperf.json, where present, names the model (input_config.endpoint.model_names)
// and the concurrency (input_config.loadgen.concurrency).
//
// Neither records the engine: the model comes from the file where it says (else --model), TP,
// the scheduler's limits and the KV size from the command line (--tp, --policy-opt), and what is
// left is vLLM's default, as the report's `derived` says. Requests are replayed at their recorded
// send times; a vLLM result without start_times (before 0.11) is replayed as the closed loop it
// ran (max_concurrency clients at request_rate inf), and refused when it ran at a finite rate,
// whose send times it does not keep.
#pragma once

#include <filesystem>

#include "experiments/fidelity/run_replay.h"

namespace batchsim {

// A vLLM `bench serve --save-detailed` result file. Throws UserError naming the file and field
// for a result without per-request arrays (saved without --save-detailed), arrays of different
// lengths, a negative or non-finite time, or a rate-driven run without start_times.
RecordedRun read_vllm_bench_result(const std::filesystem::path& file);

// An aiperf profile_export.jsonl (or a folder holding one). Throws UserError naming the file,
// line and metric for a malformed record, and when no request succeeded.
RecordedRun read_aiperf_export(const std::filesystem::path& path);

// Whichever `path` is: a folder in LLMServingSim's bench layout (requests.jsonl), a folder or
// file of aiperf's export, or a vLLM result (.json), with `overrides` set on it
// (apply_overrides_and_note_derived). Throws UserError naming what it expected, and asking for
// --model where neither the file nor the command line names the model.
RecordedRun read_recording(const std::filesystem::path& path, const ReplayOverrides& overrides);

}  // namespace batchsim
