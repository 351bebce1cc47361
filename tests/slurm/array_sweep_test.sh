#!/usr/bin/env bash
# Slurm.ArraySweepEqualsUnsharded: experiments/data/slurm/ on a real Slurm cluster. Starts a private
# one-node cluster on localhost (munged, slurmctld and slurmd as the current user, everything
# in a temporary folder, on free ports: nothing of the machine's own munge or Slurm is used or
# touched), submits an experiment with experiments/data/slurm/submit.sh as a job array of N shards
# and a dependent merge job, waits for both, and checks that the merged results folder is
# byte-identical, file for file, to an unsharded `batchsim compare` of the same experiment;
# each shard ran a part of it, in its own array task.
#
# usage: tests/slurm/array_sweep_test.sh BATCHSIM SOURCE_DIR [EXPERIMENT.yaml [N]]
# exit: 0 passed, 1 failed, 77 skipped (Slurm or munge is not installed, or its daemons cannot
# start here for lack of permission; the reason is printed). BATCHSIM_REQUIRE_SLURM=1 turns a
# skip into a failure (CI sets it: there a skip would hide a broken setup).
# environment: BATCHSIM_SLURM_TIMEOUT_S (default 240): the most seconds to wait for the jobs;
#   BATCHSIM_SLURM_KEEP=1 keeps the temporary folder.
set -euo pipefail

name="Slurm.ArraySweepEqualsUnsharded"
[ $# -ge 2 ] || { echo "usage: $0 BATCHSIM SOURCE_DIR [EXPERIMENT.yaml [N]]" >&2; exit 2; }
batchsim=$(realpath -- "$1")
source_dir=$(realpath -- "$2")
experiment=$(realpath -- "${3:-$source_dir/experiments/data/pet-project.yaml}")
shards=${4:-3}
timeout_s=${BATCHSIM_SLURM_TIMEOUT_S:-240}
[ -x "$batchsim" ] || { echo "$name: error: BATCHSIM '$batchsim' is not executable" >&2; exit 2; }
[ -f "$experiment" ] || { echo "$name: error: no experiment file '$experiment'" >&2; exit 2; }

skip() {
  if [ "${BATCHSIM_REQUIRE_SLURM:-0}" = 1 ]; then
    echo "$name: FAILED: would skip, but BATCHSIM_REQUIRE_SLURM=1: $*" >&2
    exit 1
  fi
  echo "[  SKIPPED ] $name: $*"
  exit 77
}
failure=""
fail() {
  failure=$*
  echo "[  FAILED  ] $name: $*" >&2
  exit 1
}

missing=()
for c in munged mungekey munge unmunge slurmctld slurmd sbatch scontrol sinfo squeue scancel python3 timeout; do
  command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[ ${#missing[@]} -eq 0 ] ||
  skip "Slurm is not installed (missing: ${missing[*]}); scripts/setup-debian.sh installs slurm-wlm and munge"

# Nothing of an enclosing Slurm job (a CI runner that is itself a Slurm job) may leak in.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN)_' || true)

# munged refuses a socket folder that not everyone may enter, and unix socket paths are short.
tmp=$(mktemp -d /tmp/batchsim-slurm.XXXXXX)
chmod 755 "$tmp"
mkdir -p "$tmp"/{munge,run,state,spool,log}
chmod 700 "$tmp/munge"
export SLURM_CONF="$tmp/slurm.conf"
socket="$tmp/run/munge.sock"
started=0

dump_logs() {
  for f in "$tmp"/log/*.log "$tmp"/munge/munged.log "$tmp"/sweep/logs/*.out; do
    [ -f "$f" ] || continue
    echo "---- ${f#"$tmp"/} (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
}

pid_of() { [ -s "$1" ] && cat "$1" 2>/dev/null || true; }
stop_pid() {  # PID: TERM, wait up to 10 s, then KILL
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  local status=$?
  set +e
  if [ $status -ne 0 ] && [ $status -ne 77 ] && [ $started = 1 ]; then
    dump_logs
    [ -z "$failure" ] || echo "[  FAILED  ] $name: $failure (the logs above are its daemons' and jobs')" >&2
  fi
  # The pids first: a daemon removes its pid file as it begins to shut down, not at its end.
  local slurmd_pid slurmctld_pid munged_pid
  slurmd_pid=$(pid_of "$tmp/run/slurmd.pid")
  slurmctld_pid=$(pid_of "$tmp/run/slurmctld.pid")
  munged_pid=$(pid_of "$tmp/run/munged.pid")
  if [ -n "$slurmctld_pid" ]; then
    timeout 10 scancel --user="$(id -un)" >/dev/null 2>&1
    timeout 10 scontrol shutdown >/dev/null 2>&1
  fi
  stop_pid "$slurmd_pid"
  stop_pid "$slurmctld_pid"
  stop_pid "$munged_pid"
  if [ "${BATCHSIM_SLURM_KEEP:-0}" = 1 ]; then
    echo "$name: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Daemons that cannot start for lack of permission skip the test; any other failure fails it.
cannot_start() {  # WHAT LOG
  started=1
  if grep -qiE "permission denied|operation not permitted|must be run as root|not owned by" "$2" 2>/dev/null; then
    tail -n 20 "$2" >&2
    skip "$1 cannot start here for lack of permission (log above)"
  fi
  fail "$1 did not start"
}

# munge: a private key, socket, pid, seed and log.
timeout 30 mungekey --create --keyfile="$tmp/munge/munge.key" >/dev/null 2>"$tmp/munge/mungekey.err" ||
  cannot_start "mungekey" "$tmp/munge/mungekey.err"
timeout 30 munged --key-file="$tmp/munge/munge.key" --socket="$socket" --pid-file="$tmp/run/munged.pid" \
       --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" 2>>"$tmp/munge/munged.log" ||
  cannot_start "munged" "$tmp/munge/munged.log"
echo ok | timeout 10 munge --socket="$socket" | timeout 10 unmunge --socket="$socket" >/dev/null ||
  cannot_start "munged (a credential does not round-trip)" "$tmp/munge/munged.log"

# slurm.conf: this node as slurmd sees it (CPUs, sockets, cores, memory), named localhost.
node=$(timeout 30 slurmd -C 2>/dev/null | head -n 1 | sed -E 's/^NodeName=[^ ]+/NodeName=localhost/')
[[ $node == NodeName=localhost\ *CPUs=* ]] || fail "slurmd -C gave no node line: '$node'"
read -r ctld_port slurmd_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
user=$(id -un)
cat >"$SLURM_CONF" <<EOF
ClusterName=batchsim-test
SlurmctldHost=localhost
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
MailProg=/bin/true
$node State=UNKNOWN
PartitionName=batchsim Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

started=1
timeout 30 slurmctld -i 2>>"$tmp/log/slurmctld.log" || cannot_start "slurmctld" "$tmp/log/slurmctld.log"
timeout 30 slurmd -N localhost 2>>"$tmp/log/slurmd.log" || cannot_start "slurmd" "$tmp/log/slurmd.log"
state=""
for _ in $(seq 60); do
  state=$(timeout 10 sinfo -h -N -n localhost -o %T 2>/dev/null || true)
  [[ $state == idle* ]] && break
  sleep 0.5
done
if [[ $state != idle* ]]; then
  for f in "$tmp/log/slurmd.log" "$tmp/log/slurmctld.log"; do
    grep -qiE "permission denied|operation not permitted|must be run as root" "$f" 2>/dev/null &&
      cannot_start "slurmd/slurmctld" "$f"
  done
  fail "the node did not come up idle within 30 s (sinfo state: '${state:-none}')"
fi
echo "$name: one-node Slurm cluster up as $user (slurmctld :$ctld_port, slurmd :$slurmd_port, $node)"

# The reference: the same experiment, unsharded, on this machine.
timeout 300 "$batchsim" compare "$experiment" --out "$tmp/unsharded" --no-plots --jobs 2 >"$tmp/unsharded.log" 2>&1 ||
  { cat "$tmp/unsharded.log" >&2; fail "the unsharded compare failed"; }

# The sweep, exactly as a user submits it.
start=$(date +%s)
ids=$(BATCHSIM="$batchsim" CPUS_PER_SHARD=1 MERGE_FLAGS=--no-plots \
      timeout 60 "$source_dir/experiments/data/slurm/submit.sh" "$experiment" "$tmp/sweep" "$shards") ||
  fail "experiments/data/slurm/submit.sh failed"
read -r array_job merge_job <<<"$ids"
[[ $array_job =~ ^[0-9]+$ && $merge_job =~ ^[0-9]+$ ]] || fail "submit.sh printed '$ids', not two job ids"

job_states() { timeout 10 scontrol show job -o "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2 | sort | uniq -c | xargs; }
while :; do
  merge_line=$(timeout 10 scontrol show job -o "$merge_job" 2>/dev/null || true)
  merge_state=$(grep -oE 'JobState=[A-Z_]+' <<<"$merge_line" | cut -d= -f2 || true)
  case "$merge_state" in
    COMPLETED) break ;;
    FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
      fail "the merge job $merge_job ended $merge_state (array: $(job_states "$array_job"))" ;;
  esac
  if grep -q 'Reason=DependencyNeverSatisfied' <<<"$merge_line"; then
    fail "an array task failed, so the merge job never runs (array: $(job_states "$array_job"))"
  fi
  [ $(($(date +%s) - start)) -lt "$timeout_s" ] ||
    fail "the jobs did not finish within ${timeout_s} s (array: $(job_states "$array_job"); merge: ${merge_state:-unknown})"
  sleep 1
done
echo "$name: array job $array_job ($shards tasks: $(job_states "$array_job")) and merge job $merge_job done in $(($(date +%s) - start)) s"

# Each array task ran its own shard, and the shards split the runs between them.
total=$(($(wc -l <"$tmp/unsharded/results.csv") - 1))
sum=0
for ((k = 0; k < shards; k++)); do
  grep -q "shard $k/$shards of" "$tmp/sweep/logs/shard-$k.out" ||
    fail "logs/shard-$k.out does not show array task $k running shard $k/$shards"
  [ -f "$tmp/sweep/shard-$k/results.csv" ] || fail "shard-$k/results.csv is missing"
  rows=$(($(wc -l <"$tmp/sweep/shard-$k/results.csv") - 1))
  [ "$rows" -ge 1 ] && [ "$rows" -lt "$total" ] || fail "shard-$k holds $rows of $total runs: not a part of them"
  sum=$((sum + rows))
done
[ "$sum" -eq "$total" ] || fail "the shards hold $sum runs, the unsharded experiment $total"

# The merged folder is the unsharded one, byte for byte, every file.
if ! diff -r "$tmp/unsharded" "$tmp/sweep/merged" >"$tmp/diff.txt" 2>&1; then
  head -n 40 "$tmp/diff.txt" >&2
  fail "merged results differ from the unsharded run (diff -r above)"
fi
files=$(find "$tmp/sweep/merged" -type f | wc -l)
echo "[       OK ] $name: $total runs of $(basename "$experiment") in $shards array tasks, merged by a dependent job: $files files byte-identical to the unsharded run"
