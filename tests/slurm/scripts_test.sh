#!/usr/bin/env bash
# Slurm.ScriptsCheckArgumentsAndMergeByHand: experiments/data/slurm/'s scripts without a cluster.
# Every missing or bad argument gets a message naming it and exit status 2; then the array's
# tasks are run one after another by hand, with the SLURM_ARRAY_* variables Slurm would set,
# and merge.sbatch run with bash (the README's "documented second command") gives results
# byte-identical to an unsharded `batchsim compare`. Needs no Slurm (tests/slurm/
# array_sweep_test.sh runs the same scripts on a real one).
#
# usage: tests/slurm/scripts_test.sh BATCHSIM SOURCE_DIR
set -euo pipefail

name="Slurm.ScriptsCheckArgumentsAndMergeByHand"
[ $# -eq 2 ] || { echo "usage: $0 BATCHSIM SOURCE_DIR" >&2; exit 2; }
batchsim=$(realpath -- "$1")
src=$(realpath -- "$2")
slurm="$src/experiments/data/slurm"
experiment="$src/experiments/data/pet-project.yaml"
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH)_' || true)
export BATCHSIM="$batchsim"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect_error "MESSAGE PART" COMMAND...: exit status 2 and MESSAGE PART on stderr.
expect_error() {
  local want=$1 status=0
  shift
  "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
  if [ $status -ne 2 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAILED: '$*' exited $status (want 2) with stderr:" >&2
    sed 's/^/    /' "$tmp/err" >&2
    echo "  want it to say: $want" >&2
    failures=$((failures + 1))
  fi
}

expect_error "missing argument EXPERIMENT" "$slurm/submit.sh"
expect_error "missing argument OUT_DIR" "$slurm/submit.sh" "$experiment"
expect_error "missing argument N" "$slurm/submit.sh" "$experiment" "$tmp/x"
expect_error "N '0' must be a whole number >= 1" "$slurm/submit.sh" "$experiment" "$tmp/x" 0
expect_error "N 'four' must be a whole number >= 1" "$slurm/submit.sh" "$experiment" "$tmp/x" four
expect_error "EXPERIMENT '$tmp/nope.yaml' is not a file" "$slurm/submit.sh" "$tmp/nope.yaml" "$tmp/x" 2
expect_error "CPUS_PER_SHARD '0'" env CPUS_PER_SHARD=0 "$slurm/submit.sh" "$experiment" "$tmp/x" 2
expect_error "MAX_RUNNING 'x'" env MAX_RUNNING=x "$slurm/submit.sh" "$experiment" "$tmp/x" 2
expect_error "'$tmp/no-sbatch' not found" env SBATCH="$tmp/no-sbatch" "$slurm/submit.sh" "$experiment" "$tmp/x" 2
expect_error "the batchsim binary '$tmp/none' is not an executable file (set BATCHSIM)" \
  env BATCHSIM="$tmp/none" "$slurm/submit.sh" "$experiment" "$tmp/x" 2
# sbatch refusing a job: its message, and submit.sh's, and no job id taken for one.
printf '#!/bin/sh\necho "sbatch: error: Invalid partition name specified" >&2\nexit 1\n' >"$tmp/sbatch-refuses"
chmod +x "$tmp/sbatch-refuses"
expect_error "sbatch refused the array" env SBATCH="$tmp/sbatch-refuses" "$slurm/submit.sh" "$experiment" "$tmp/x" 2

expect_error "missing argument EXPERIMENT" bash "$slurm/sweep.sbatch"
expect_error "missing argument OUT_DIR" bash "$slurm/sweep.sbatch" "$experiment"
expect_error "SLURM_ARRAY_TASK_ID is not set" bash "$slurm/sweep.sbatch" "$experiment" "$tmp/x" 2
expect_error "missing argument N (the shard count), and SLURM_ARRAY_TASK_COUNT is not set" \
  env SLURM_ARRAY_TASK_ID=0 bash "$slurm/sweep.sbatch" "$experiment" "$tmp/x"
expect_error "array task 3 is not below N = 3" \
  env SLURM_ARRAY_TASK_ID=3 bash "$slurm/sweep.sbatch" "$experiment" "$tmp/x" 3
expect_error "array task 2 is not below N = 2" \
  env SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=2 bash "$slurm/sweep.sbatch" "$experiment" "$tmp/x"
expect_error "EXPERIMENT '$tmp/nope.yaml' is not a file" \
  env SLURM_ARRAY_TASK_ID=0 bash "$slurm/sweep.sbatch" "$tmp/nope.yaml" "$tmp/x" 2
expect_error "(set BATCHSIM)" \
  env SLURM_ARRAY_TASK_ID=0 BATCHSIM="$tmp/none" bash "$slurm/sweep.sbatch" "$experiment" "$tmp/x" 2

expect_error "missing argument OUT_DIR" bash "$slurm/merge.sbatch"
expect_error "missing argument N" bash "$slurm/merge.sbatch" "$tmp/x"
expect_error "N '-1' must be a whole number >= 1" bash "$slurm/merge.sbatch" "$tmp/x" -1

# The sweep by hand: two of three tasks first, so that merge must name the missing shard.
"$batchsim" compare "$experiment" --out "$tmp/unsharded" --no-plots --jobs 2 >/dev/null 2>&1
for k in 0 2; do
  SLURM_ARRAY_TASK_ID=$k SLURM_ARRAY_TASK_COUNT=3 JOBS=1 bash "$slurm/sweep.sbatch" "$experiment" "$tmp/sweep" \
    >/dev/null 2>"$tmp/shard-$k.err" || { cat "$tmp/shard-$k.err" >&2; echo "FAILED: task $k" >&2; exit 1; }
done
expect_error "1 of 3 shards have no results.csv in $tmp/sweep: shard-1" bash "$slurm/merge.sbatch" "$tmp/sweep" 3
# N given as an argument wins over the array's count (a resubmitted --array=1 has count 1).
SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=1 JOBS=1 bash "$slurm/sweep.sbatch" "$experiment" "$tmp/sweep" 3 \
  >/dev/null 2>"$tmp/shard-1.err" || { cat "$tmp/shard-1.err" >&2; echo "FAILED: task 1" >&2; exit 1; }
grep -qF "shard 1/3 of" "$tmp/shard-1.err" || { echo "FAILED: task 1 did not run shard 1/3" >&2; exit 1; }
expect_error "shard-3 is not one of shard-0 .. shard-2" \
  bash -c "mkdir -p '$tmp/sweep/shard-3' && bash '$slurm/merge.sbatch' '$tmp/sweep' 3; s=\$?; rmdir '$tmp/sweep/shard-3'; exit \$s"
bash "$slurm/merge.sbatch" "$tmp/sweep" 3 --no-plots >/dev/null 2>"$tmp/merge.err" ||
  { cat "$tmp/merge.err" >&2; echo "FAILED: merge.sbatch" >&2; exit 1; }
if ! diff -r "$tmp/unsharded" "$tmp/sweep/merged" >"$tmp/diff" 2>&1; then
  head -n 40 "$tmp/diff" >&2
  echo "FAILED: merge.sbatch's results differ from the unsharded run" >&2
  failures=$((failures + 1))
fi

# A Kubernetes Indexed Job's pod runs the same script, K from JOB_COMPLETION_INDEX.
JOB_COMPLETION_INDEX=1 JOBS=1 bash "$slurm/sweep.sbatch" "$experiment" "$tmp/k8s" 3 >/dev/null 2>"$tmp/k8s.err" ||
  { cat "$tmp/k8s.err" >&2; echo "FAILED: sweep.sbatch with JOB_COMPLETION_INDEX" >&2; failures=$((failures + 1)); }
grep -qF "shard 1/3 of" "$tmp/k8s.err" && cmp -s "$tmp/k8s/shard-1/results.csv" "$tmp/sweep/shard-1/results.csv" ||
  { echo "FAILED: JOB_COMPLETION_INDEX=1 did not run shard 1/3 as array task 1 did" >&2; failures=$((failures + 1)); }
# The manifests: an Indexed Job whose completions is the N (SHARDS) both Jobs pass on.
k8s="$src/experiments/data/kubernetes"
completions=$(sed -nE 's/^  completions: ([0-9]+).*/\1/p' "$k8s/sweep-job.yaml")
grep -qE '^  completionMode: Indexed' "$k8s/sweep-job.yaml" ||
  { echo "FAILED: sweep-job.yaml is not an Indexed Job" >&2; failures=$((failures + 1)); }
for f in sweep-job.yaml merge-job.yaml; do
  shards_value=$(grep -A1 -E '^ +- name: SHARDS$' "$k8s/$f" | sed -nE 's/^ +value: "([0-9]+)"/\1/p')
  [ -n "$completions" ] && [ "$shards_value" = "$completions" ] ||
    { echo "FAILED: $f passes SHARDS '$shards_value', sweep-job.yaml has completions '$completions'" >&2; failures=$((failures + 1)); }
done

if [ $failures -ne 0 ]; then
  echo "[  FAILED  ] $name: $failures checks failed" >&2
  exit 1
fi
echo "[       OK ] $name"
