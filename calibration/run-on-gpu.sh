#!/usr/bin/env bash
# calibration/run-on-gpu.sh — the one prepared GPU run of issue 6 (item 8).
#
# Builds batchsim-calibrate, checks the CUDA kernels against the CPU reference, runs
# `measure --quick`, fits a hardware profile when the fit command exists, and copies the
# results to $OUT — within about 8 minutes on one H200. Run from anywhere:
#
#   OUT=/some/dir calibration/run-on-gpu.sh
#
# What comes back in $OUT (8 files at most, none deeper than $OUT/file):
#   run.log  meas.tar.gz (the whole measurement directory, attention_mixed.csv included)
#   device.json  bandwidth.csv  mlp.csv  attention.csv
#   profile.yaml, validation.json (only where the batchsim CLI could be built)
#
# The GPU machines' image has nvcc, CMake and ninja but maybe not the project's CPU libraries
# (fmt, Eigen, yaml-cpp, Boost, nlohmann-json); then the CMake configure fails and the
# calibrate binary is built with nvcc alone (calibration/ needs only the standard library and
# CUDA) and the fit is left for a CPU machine — it is a pure function of the CSVs:
#   build/experiments/batchsim calibrate fit <meas dir> --out profile.yaml
#
# Environment: OUT (default ./calibration-out), BUILD_DIR (default ./build-gpu),
# MEASURE_BUDGET_S (default 240: measuring stops after that, keeping the rows so far),
# CALIBRATE_BUILD (auto | nvcc: skip the CMake attempt).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/calibration-out}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
MEASURE_BUDGET_S=${MEASURE_BUDGET_S:-240}
MEAS=$BUILD_DIR/meas
PROFILE=$BUILD_DIR/profile.yaml
JOBS=$(nproc)
mkdir -p "$OUT" "$BUILD_DIR"
exec > >(tee "$OUT/run.log") 2>&1

failures=()
step() { printf '\n== %s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }

export PATH=/usr/local/cuda/bin:$PATH
# CUPTI sits in include/ and lib64/ (package installs), extras/CUPTI/ (runfile installs), or a
# pip wheel (nvidia/cuda_cupti). Find its header and library for the nvcc-only build and the
# loader.
CUPTI_INCLUDE="" CUPTI_LIBRARY=""
for d in /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include; do
  if [ -z "$CUPTI_INCLUDE" ] && [ -f "$d/cupti.h" ]; then CUPTI_INCLUDE=$d; fi
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64; do
  for f in "$d/libcupti.so" "$d"/libcupti.so.1[0-9]; do
    if [ -z "$CUPTI_LIBRARY" ] && [ -f "$f" ]; then CUPTI_LIBRARY=$f; fi
  done
done
if [ -z "$CUPTI_INCLUDE" ] || [ -z "$CUPTI_LIBRARY" ]; then
  wheel=$(python3 -c 'import nvidia.cuda_cupti, os; print(os.path.dirname(nvidia.cuda_cupti.__file__))' 2>/dev/null || true)
  if [ -n "$wheel" ]; then
    [ -z "$CUPTI_INCLUDE" ] && [ -f "$wheel/include/cupti.h" ] && CUPTI_INCLUDE=$wheel/include
    [ -z "$CUPTI_LIBRARY" ] && CUPTI_LIBRARY=$(ls "$wheel"/lib/libcupti.so* 2>/dev/null | head -1)
  fi
fi
echo "CUPTI: header in ${CUPTI_INCLUDE:-?}, library ${CUPTI_LIBRARY:-?}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib ${CUPTI_LIBRARY:+"$(dirname "$CUPTI_LIBRARY")"}; do
  if [ -d "$d" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
done

step "device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv || true
nvcc --version | tail -2

step "build batchsim-calibrate (CMake, whole project configured)"
CMAKE_BUILD=$BUILD_DIR/cmake
CALIBRATE=""
if [ "${CALIBRATE_BUILD:-auto}" != nvcc ] && timeout 120 cmake -S "$ROOT" -B "$CMAKE_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DBATCHSIM_BUILD_TESTS=OFF -DBATCHSIM_BUILD_BENCH=OFF \
    && timeout 300 cmake --build "$CMAKE_BUILD" --target batchsim-calibrate -j "$JOBS"; then
  CALIBRATE=$CMAKE_BUILD/calibration/batchsim-calibrate
  # The fit needs the `batchsim` CLI (all of the project): build it while the GPU measures.
  ( timeout 420 cmake --build "$CMAKE_BUILD" --target batchsim -j "$((JOBS > 4 ? JOBS - 2 : JOBS))" \
      > "$BUILD_DIR/batchsim-build.log" 2>&1 ) &
  BATCHSIM_BUILD_PID=$!
else
  step "building batchsim-calibrate with nvcc alone (CMake skipped or failed above)"
  OBJ=$BUILD_DIR/nvcc-obj
  mkdir -p "$OBJ"
  # Every source in calibration/ belongs to the binary (see calibration/CMakeLists.txt).
  ls calibration/*.cpp calibration/*.cu | timeout 300 xargs -P "$JOBS" -I{} sh -c \
    'nvcc -std=c++20 -O3 -arch=sm_90 --expt-relaxed-constexpr -I"$0" ${2:+-I"$2"} -c "$0/{}" -o "$1/$(basename {}).o"' \
    "$ROOT" "$OBJ" "$CUPTI_INCLUDE"
  nvcc -arch=sm_90 "$OBJ"/*.o -lcublasLt "${CUPTI_LIBRARY:--lcupti}" -o "$BUILD_DIR/batchsim-calibrate"
  CALIBRATE=$BUILD_DIR/batchsim-calibrate
  BATCHSIM_BUILD_PID=""
fi
"$CALIBRATE" info

step "check: CUDA kernels vs the CPU reference"
if ! timeout 180 "$CALIBRATE" check; then
  failures+=("kernel check")  # keep going: the timings are still worth bringing back
fi

step "measure --quick (budget ${MEASURE_BUDGET_S} s)"
rm -rf "$MEAS" "$PROFILE" "$BUILD_DIR/validation.json"
if ! timeout $((MEASURE_BUDGET_S + 90)) "$CALIBRATE" measure --quick --out "$MEAS" \
      --time-budget-s "$MEASURE_BUDGET_S"; then
  failures+=("measure")
fi

step "fit"
BATCHSIM=$CMAKE_BUILD/experiments/batchsim
if [ -n "${BATCHSIM_BUILD_PID:-}" ]; then
  wait "$BATCHSIM_BUILD_PID" || echo "building batchsim failed: $(tail -5 "$BUILD_DIR/batchsim-build.log")"
fi
# ---- FIT: `batchsim calibrate fit MEAS_DIR --out PROFILE.yaml` (experiments/calibrate.cpp;
# the same command works on any CPU machine with meas.tar.gz). It writes the profile with its
# fit error per operator; `batchsim validate` then writes the full report as JSON.
VALIDATION=$BUILD_DIR/validation.json
if [ -x "$BATCHSIM" ] && "$BATCHSIM" calibrate fit --help > /dev/null 2>&1; then
  if ! timeout 120 "$BATCHSIM" calibrate fit "$MEAS" --out "$PROFILE" --fit-on llama-2-7b; then
    failures+=("fit")
  fi
else
  echo "'batchsim calibrate fit' is not available in this build."
fi
if [ -x "$BATCHSIM" ] && "$BATCHSIM" validate --help > /dev/null 2>&1; then
  profile_args=()
  [ -f "$PROFILE" ] || profile_args=(--profile-out "$PROFILE")
  if ! timeout 120 "$BATCHSIM" validate --measurements "$MEAS" --fit-on llama-2-7b \
        --out "$VALIDATION" ${profile_args[@]+"${profile_args[@]}"}; then
    failures+=("validate")
  fi
fi
if [ ! -f "$PROFILE" ]; then
  echo "No profile fitted here (no batchsim CLI in this build). On a CPU machine:"
  echo "  tar xzf meas.tar.gz && build/experiments/batchsim calibrate fit meas --out profile.yaml"
  echo "  (or: build/experiments/batchsim validate --measurements meas --fit-on llama-2-7b --profile-out profile.yaml)"
fi

step "copy results to $OUT"
copy_one() {  # copy_one NAME FILE: flat copy, if the file exists
  if [ -n "$2" ] && [ -f "$2" ]; then cp "$2" "$OUT/$1"; else echo "not produced: $1"; fi
}
if [ -d "$MEAS" ]; then
  tar -C "$BUILD_DIR" -czf "$OUT/meas.tar.gz" meas
  copy_one device.json "$MEAS/device.json"
  copy_one bandwidth.csv "$MEAS/bandwidth.csv"
  copy_one mlp.csv "$(find "$MEAS/compute" -name mlp.csv 2>/dev/null | head -1)"
  copy_one attention.csv "$(find "$MEAS/compute" -name attention.csv 2>/dev/null | head -1)"
fi
copy_one profile.yaml "$PROFILE"
copy_one validation.json "$VALIDATION"
ls -l "$OUT"

if [ ${#failures[@]} -gt 0 ]; then
  step "FAILED: ${failures[*]}"
  exit 1
fi
step "done"
