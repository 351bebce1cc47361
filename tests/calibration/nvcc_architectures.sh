#!/usr/bin/env bash
# tests/calibration/nvcc_architectures.sh SOURCE_DIR WORK_DIR [CACHE_DIR]
#
# Compiles batchsim-calibrate's CUDA sources (-c, each .cu once per architecture) for sm_80,
# 89, 90 and 100 — A100, L40S, H100/H200, B200 — with calibration/nvcc-build.sh, the nvcc line a
# GPU run uses without CMake; then builds the whole binary that way for sm_90 (reusing those
# objects), and runs what runs without a GPU: --help, `shapes`, and `info`, which must say that
# there is no CUDA device (exit 3).
#
# Exit 77 (a skip; ctest's SKIP_RETURN_CODE) where there is no nvcc: CI machines have no CUDA
# toolkit. With CACHE_DIR, a run whose inputs (nvcc's version, calibration/'s sources and
# scripts, this script) hash to those of an earlier passing run reports that run's results
# instead of compiling again (BATCHSIM_NVCC_CHECK_NO_CACHE=1 compiles anyway).
set -uo pipefail
src=$1 work=$2 cache=${3:-}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if ! [ -x "$NVCC" ]; then
  echo "SKIP: no nvcc here (no CUDA toolkit): the CUDA sources are compiled only where one is installed"
  exit 77
fi
export NVCC
archs=(80 89 90 100)
cu_files=$(cd "$src/calibration" && printf '%s ' *.cu)
key=$({ "$NVCC" --version; cat "$src"/calibration/*.cu "$src"/calibration/*.h "$src"/calibration/*.cpp \
        "$src"/calibration/nvcc-build.sh "$0"; } | sha256sum | cut -c1-16)
if [ -n "$cache" ] && [ -z "${BATCHSIM_NVCC_CHECK_NO_CACHE:-}" ] && [ -f "$cache/$key.passed" ]; then
  echo "cached: the same nvcc and sources passed at $(stat -c %y "$cache/$key.passed" | cut -d. -f1):"
  cat "$cache/$key.passed"
  exit 0
fi
mkdir -p "$work"
report=$work/report.txt
: > "$report"
failed=0
"$NVCC" --version | grep -o "release .*" | sed "s/^/nvcc /" | tee -a "$report"
for arch in "${archs[@]}"; do
  start=$SECONDS
  if JOBS=${JOBS:-2} "$src/calibration/nvcc-build.sh" "$arch" "$work/sm_$arch" - "$src"/calibration/*.cu \
      > "$work/sm_$arch.log" 2>&1; then
    echo "sm_$arch: compiled (${cu_files}in $((SECONDS - start)) s)" | tee -a "$report"
  else
    echo "sm_$arch: FAILED:" | tee -a "$report"
    cat "$work/sm_$arch.log"
    failed=1
  fi
done
# The whole binary with nvcc alone, as run-on-gpu.sh builds it on an image without CMake's
# libraries: the host sources into the sm_90 objects, then the link.
start=$SECONDS
binary=$work/sm_90/batchsim-calibrate
hosts=("$src"/calibration/*.cpp)
if [ "$failed" = 0 ] && JOBS=${JOBS:-2} "$src/calibration/nvcc-build.sh" 90 "$work/sm_90" "$binary" "${hosts[@]}" \
    > "$work/link.log" 2>&1; then
  echo "nvcc-only build for sm_90: linked ($((SECONDS - start)) s)" | tee -a "$report"
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  "$binary" --help > "$work/help.log" 2>&1 || { echo "--help failed:"; cat "$work/help.log"; failed=1; }
  if ! "$binary" shapes --model llama-3-8b --tp 8 > "$work/shapes.log" 2>&1 \
      || ! grep -q '^mlp_up_proj,4096,3584,1,8,llama-3-8b$' "$work/shapes.log"; then
    echo "shapes failed or listed other GEMMs:"; cat "$work/shapes.log"; failed=1
  fi
  "$binary" info > "$work/info.log" 2>&1
  status=$?
  if [ "$status" = 0 ]; then
    echo "info: a CUDA device is present here" | tee -a "$report"
  elif [ "$status" != 3 ] || ! grep -q "no CUDA device" "$work/info.log"; then
    echo "info: expected exit 3 and 'no CUDA device' without a GPU, got $status:"; cat "$work/info.log"; failed=1
  else
    echo "info without a GPU: exit 3, 'no CUDA device available'" | tee -a "$report"
  fi
elif [ "$failed" = 0 ]; then
  echo "nvcc-only build for sm_90: FAILED:" | tee -a "$report"
  cat "$work/link.log"
  failed=1
fi
if [ "$failed" = 0 ] && [ -n "$cache" ]; then
  mkdir -p "$cache"
  cp "$report" "$cache/$key.passed"
fi
exit "$failed"
