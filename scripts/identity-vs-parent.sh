#!/usr/bin/env bash
# CI's identity rail: the outputs of the last commit against its parent's (scripts/
# identity-check.sh: every preset's run, every command, every --help). A commit that means to
# change what batchsim prints or writes says so in its message with a line
#   Changes outputs: <what and why>
# and then the check reports the differences without failing; any other commit must give the
# same bytes. Builds the parent's `batchsim` in a worktree beside the clone.
#   scripts/identity-vs-parent.sh NEW_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
new="$(realpath "$1")"
if ! git rev-parse -q --verify HEAD^ >/dev/null; then
  echo "identity: HEAD has no parent; nothing to compare"
  exit 0
fi
work="$(mktemp -d)"
trap 'git worktree remove --force "$work/parent" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/parent" HEAD^
cmake -S "$work/parent" -B "$work/parent/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATCHSIM_BUILD_TESTS=OFF \
  -DBATCHSIM_BUILD_BENCH=OFF -DBATCHSIM_PYTHON=OFF -DBATCHSIM_WITH_CUDA=OFF >/dev/null
cmake --build "$work/parent/build" --target batchsim -j"$(nproc)" >/dev/null
declared="$(git log -1 --format=%B HEAD | grep -i '^Changes outputs:' || true)"
if scripts/identity-check.sh "$work/parent/build/experiments/batchsim" "$new" "$work/runs" >"$work/report" 2>&1; then
  tail -n 1 "$work/report"
  exit 0
fi
grep -v '^same' "$work/report" | head -n 60
if [ -n "$declared" ]; then
  echo "identity: outputs differ from the parent's, as the commit declares ($declared)"
  exit 0
fi
echo "identity: outputs differ from the parent's and the commit does not say so (add a 'Changes outputs:' line)"
exit 1
