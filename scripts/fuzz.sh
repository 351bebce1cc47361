#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (ASan + UBSan + fuzzer coverage) in
# build-sanitize/ (shared with scripts/sanitize.sh), seeds each corpus from the data the
# repository ships, and runs every harness for SECONDS (default 20). Exits non-zero on the first
# crash, leak, sanitizer report or timeout; the input that caused it is left in
# build-sanitize/findings/<harness>/. Corpora persist in build-sanitize/corpus/<harness>/, so
# repeated runs keep what earlier runs found.
#   scripts/fuzz.sh            # CI: 20 s per harness
#   scripts/fuzz.sh 3600       # an hour per harness (see tests/fuzz/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
scripts/setup-debian.sh --fuzz
build=build-sanitize
scripts/configure-sanitized.sh
cmake --build "$build" --target fuzzers -j"$(nproc)"

seed() {  # seed HARNESS FILE...: copy files into the harness's corpus (idempotent)
  local dir="$build/corpus/$1"; shift
  mkdir -p "$dir"
  for f in "$@"; do cp "$f" "$dir/seed-$(basename "$f")"; done
}
mkdir -p "$build/seeds"
# The first lines of every shipped trace, and one gzip-compressed (head closes the pipe early:
# zcat's SIGPIPE is expected there).
for t in experiments/data/traces/*/*.gz; do
  (set +o pipefail; zcat "$t" | head -n 40) > "$build/seeds/$(basename "$t" .gz)"
done
(set +o pipefail; zcat experiments/data/traces/azure-llm-2023/code.csv.gz | head -n 15) | gzip -9n \
  > "$build/seeds/code-head.csv.gz"
seed fuzz_trace_reader "$build"/seeds/*
seed fuzz_hf_config tests/fuzz/seeds/hf_config/*
seed fuzz_hardware_profile hwmodel/profiles/*.yaml
seed fuzz_experiment experiments/data/*.yaml tests/fuzz/seeds/run_config/*
seed fuzz_llmservingsim tests/fuzz/seeds/llmservingsim/*
seed fuzz_measurements tests/fuzz/seeds/measurements/*
seed fuzz_results tests/fuzz/seeds/results/*
seed fuzz_calibration_tables tests/fuzz/seeds/calibration_tables/*
seed fuzz_spec_strings tests/fuzz/seeds/spec_strings/*

status=0
for harness in fuzz_trace_reader fuzz_hf_config fuzz_hardware_profile fuzz_experiment fuzz_llmservingsim \
    fuzz_measurements fuzz_results fuzz_calibration_tables fuzz_spec_strings; do
  mkdir -p "$build/findings/$harness"
  echo "fuzz: $harness for ${seconds} s"
  if ! "$build/tests/fuzz/$harness" "$build/corpus/$harness" -max_total_time="$seconds" \
       -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
       -artifact_prefix="$build/findings/$harness/" 2> "$build/findings/$harness.log"; then
    echo "fuzz: $harness FAILED; the input is in $build/findings/$harness/:"
    tail -n 40 "$build/findings/$harness.log"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$build/findings/$harness.log" | sed "s/^/fuzz: $harness /"
done
exit $status
