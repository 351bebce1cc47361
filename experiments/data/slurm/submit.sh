#!/usr/bin/env bash
# Submits a batchsim experiment to Slurm as N shards and a merge: a job array of N tasks
# (sweep.sbatch: task K runs `batchsim compare EXPERIMENT --shard K/N --out OUT_DIR/shard-K`)
# and a job that runs after every task succeeded (merge.sbatch, `--dependency=afterok`:
# `batchsim merge OUT_DIR/shard-* --out OUT_DIR/merged`). Prints the two job ids.
#
# usage: experiments/data/slurm/submit.sh EXPERIMENT.yaml OUT_DIR N [COMPARE_FLAG...]
#   COMPARE_FLAG...  more `batchsim compare` flags for every shard (--num-requests 300, ...)
# environment (all optional):
#   BATCHSIM            the batchsim binary (default: build/experiments/batchsim of this
#                       checkout, else `batchsim` on PATH); made absolute
#   CPUS_PER_SHARD      CPUs of each array task, and its --jobs (default 4)
#   MAX_RUNNING         at most this many tasks at once (sbatch --array=0-N-1%MAX_RUNNING)
#   SWEEP_SBATCH_FLAGS  more sbatch options for the array (--partition=cpu --mem-per-cpu=2G)
#   MERGE_SBATCH_FLAGS  more sbatch options for the merge job
#   MERGED_DIR          where the merged results go (default OUT_DIR/merged)
#   MERGE_FLAGS         more `batchsim merge` flags (--no-plots)
#   SBATCH              the sbatch command (default sbatch)
# sbatch's own variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...) apply to
# both jobs. Each task's log is OUT_DIR/logs/shard-K.out, the merge's OUT_DIR/logs/merge.out.
# Paths are made absolute here; OUT_DIR and the binary must be on a file system every node
# shares.
set -euo pipefail

die() {
  echo "submit.sh: error: $*" >&2
  exit 2
}
usage="usage: experiments/data/slurm/submit.sh EXPERIMENT.yaml OUT_DIR N [COMPARE_FLAG...]"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit 0
fi
[ $# -ge 1 ] || die "missing argument EXPERIMENT (the experiment file); $usage"
[ $# -ge 2 ] || die "missing argument OUT_DIR (the results folder: shard-K/, merged/, logs/); $usage"
[ $# -ge 3 ] || die "missing argument N (how many shards: array tasks); $usage"
experiment=$1
out_dir=$2
shard_count=$3
shift 3
[[ $shard_count =~ ^[0-9]+$ ]] && [ "$shard_count" -ge 1 ] || die "N '$shard_count' must be a whole number >= 1"
[ -f "$experiment" ] || die "EXPERIMENT '$experiment' is not a file"
cpus=${CPUS_PER_SHARD:-4}
[[ $cpus =~ ^[0-9]+$ ]] && [ "$cpus" -ge 1 ] || die "CPUS_PER_SHARD '$cpus' must be a whole number >= 1"
array="0-$((shard_count - 1))"
if [ -n "${MAX_RUNNING:-}" ]; then
  [[ $MAX_RUNNING =~ ^[0-9]+$ ]] && [ "$MAX_RUNNING" -ge 1 ] || die "MAX_RUNNING '$MAX_RUNNING' must be a whole number >= 1"
  array+="%$MAX_RUNNING"
fi

if [ -n "${BATCHSIM:-}" ]; then
  batchsim=$BATCHSIM
elif [ -x "$here/../../build/experiments/batchsim" ]; then
  batchsim="$here/../../build/experiments/batchsim"
elif command -v batchsim >/dev/null 2>&1; then
  batchsim=$(command -v batchsim)
else
  die "no batchsim binary: build it (cmake --build build) or set BATCHSIM"
fi
[ -x "$batchsim" ] || die "the batchsim binary '$batchsim' is not an executable file (set BATCHSIM)"
sbatch=${SBATCH:-sbatch}
command -v "$sbatch" >/dev/null 2>&1 ||
  die "'$sbatch' not found: run this on a Slurm login node (or set SBATCH to the sbatch command)"

abs() { realpath -m -- "$1"; }
batchsim=$(abs "$batchsim")
experiment=$(abs "$experiment")
out_dir=$(abs "$out_dir")
merged_dir=$(abs "${MERGED_DIR:-$out_dir/merged}")
mkdir -p "$out_dir/logs"

# --parsable prints "JOBID" or "JOBID;CLUSTER".
# shellcheck disable=SC2086  # the *_SBATCH_FLAGS are lists of options, split on spaces
if ! array_job=$("$sbatch" --parsable --export="ALL,BATCHSIM=$batchsim" --array="$array" \
  --cpus-per-task="$cpus" --output="$out_dir/logs/shard-%a.out" ${SWEEP_SBATCH_FLAGS:-} \
  "$here/sweep.sbatch" "$experiment" "$out_dir" "$shard_count" "$@"); then
  die "sbatch refused the array (its message is above)"
fi
array_job=${array_job%%;*}
[[ $array_job =~ ^[0-9]+$ ]] || die "sbatch gave no job id for the array: '$array_job'"
# shellcheck disable=SC2086
if ! merge_job=$("$sbatch" --parsable --export="ALL,BATCHSIM=$batchsim" --dependency="afterok:$array_job" \
  --output="$out_dir/logs/merge.out" ${MERGE_SBATCH_FLAGS:-} \
  "$here/merge.sbatch" "$out_dir" "$shard_count" "$merged_dir" ${MERGE_FLAGS:-}); then
  die "sbatch refused the merge job (its message is above); the array job $array_job is queued: scancel $array_job"
fi
merge_job=${merge_job%%;*}
[[ $merge_job =~ ^[0-9]+$ ]] ||
  die "sbatch gave no job id for the merge: '$merge_job' (the array job $array_job is queued: scancel $array_job)"

echo "submit.sh: array job $array_job ($shard_count shards of $(basename "$experiment") -> $out_dir/shard-K)," \
     "merge job $merge_job (after all succeed -> $merged_dir); logs in $out_dir/logs" >&2
echo "$array_job $merge_job"
