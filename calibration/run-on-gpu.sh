#!/usr/bin/env bash
# calibration/run-on-gpu.sh — the one prepared GPU run of issue 6 (item 8).
#
# Builds batchsim-calibrate for the GPU it runs on (its compute capability from nvidia-smi:
# calibration/cuda-arch.sh), checks the CUDA kernels against the CPU reference, runs
# `measure --quick`, fits a hardware profile when the fit command exists, and copies the
# results to $OUT — within about 8 minutes on one H100 or H200. Run from anywhere:
#
#   OUT=/some/dir calibration/run-on-gpu.sh
#   OUT=/some/dir SHAPES=deepseek-v3-tp8-ep8.csv calibration/run-on-gpu.sh   # + a model's own GEMMs
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
# Environment: OUT (default ./build-gpu-out), BUILD_DIR (default ./build-gpu),
# MODEL (a model batchsim-calibrate has built in, measured besides llama-2-7b; for any other
# model `batchsim run --model` accepts, its shape file, made here when BATCHSIM_BIN is given or
# else on a CPU machine: batchsim calibrate shapes --model M --tp N [--ep N] --out FILE), TP / EP
# (the layout of that shape file: default 1), SHAPES (a shape file to measure besides
# llama-2-7b), CUDA_ARCH (skip the detection, e.g. 90), NVIDIA_SMI (default nvidia-smi),
# BASE_GPU (the datasheet GPU the fit starts from; default: from the measured device's name),
# SCRIPT_BUDGET_S (default 450: the whole script ends within this many seconds, results
# copied; give the device call's timeout some margin above it), MEASURE_BUDGET_S (default
# 240, and never more than what SCRIPT_BUDGET_S leaves: measuring stops after that, keeping
# the rows so far), CALIBRATE_BUILD (auto | nvcc: skip the CMake attempt), CALIBRATE_BIN /
# BATCHSIM_BIN (use these already-built binaries instead of building: a rerun on a warm
# machine, or a dry run of the later steps with stand-ins).
#
# Whatever fails, the script copies what it has to $OUT before it exits (an EXIT trap), and
# its last line says "done" or "FAILED: <steps>" (exit 0 / 1). Bad input fails with the reason
# in run.log: no NVIDIA GPU (no nvidia-smi, no driver), a compute capability below 8.0, a model
# batchsim-calibrate does not know without its shape file, a shape file it cannot read, and
# shapes whose buffers the GPU cannot hold (measure exits 4 after measuring what fits).
# tests/calibration/run_on_gpu_script_test.cpp runs every step after the build with stand-in
# binaries (CALIBRATE_BIN, BATCHSIM_BIN, NVIDIA_SMI), so that a GPU run cannot fail on a typo.
set -euo pipefail

START_S=$SECONDS
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# A shape file named relative to where the script was started from, before the cd.
if [ -n "${SHAPES:-}" ]; then SHAPES=$(realpath -m -- "$SHAPES"); fi
cd "$ROOT"
OUT=${OUT:-$ROOT/build-gpu-out}  # build*/ is git-ignored
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
SCRIPT_BUDGET_S=${SCRIPT_BUDGET_S:-450}
MEASURE_BUDGET_S=${MEASURE_BUDGET_S:-240}
MEAS=$BUILD_DIR/meas
FIT_ON=llama-2-7b  # the model whose rows the fit uses (quick runs always measure it)
PROFILE=$BUILD_DIR/profile.yaml
VALIDATION=$BUILD_DIR/validation.json
JOBS=$(nproc)
mkdir -p "$OUT" "$BUILD_DIR"
exec > >(tee "$OUT/run.log") 2>&1
TEE_PID=$!

failures=()
step() { printf '\n== %s  +%ds  %s\n' "$(date -u +%H:%M:%S)" "$((SECONDS - START_S))" "$*"; }
# Seconds left before SCRIPT_BUDGET_S, minus a reserve for the steps after the caller's.
left() { local r=$((SCRIPT_BUDGET_S - (SECONDS - START_S) - ${1:-0})); echo $((r > 1 ? r : 1)); }

copied=""
copy_results() {  # idempotent: runs at the end, or from the EXIT trap after a failure
  [ -z "$copied" ] || return 0
  copied=1
  step "copy results to $OUT"
  copy_one() {  # copy_one NAME FILE: flat copy, if the file exists
    if [ -n "$2" ] && [ -f "$2" ]; then cp "$2" "$OUT/$1"; else echo "not produced: $1"; fi
  }
  if [ -d "$MEAS" ]; then
    tar -C "$BUILD_DIR" -czf "$OUT/meas.tar.gz" meas || echo "tar of $MEAS failed"
    copy_one device.json "$MEAS/device.json"
    copy_one bandwidth.csv "$MEAS/bandwidth.csv"
    copy_one mlp.csv "$(find "$MEAS/compute" -name mlp.csv 2>/dev/null | head -1)"
    copy_one attention.csv "$(find "$MEAS/compute" -name attention.csv 2>/dev/null | head -1)"
  else
    echo "no measurement directory ($MEAS)"
  fi
  copy_one profile.yaml "$PROFILE"
  copy_one validation.json "$VALIDATION"
  ls -l "$OUT"
}
on_exit() {
  local rc=$?
  trap - EXIT
  set +e
  if [ -n "${BATCHSIM_BUILD_PID:-}" ]; then kill "$BATCHSIM_BUILD_PID" 2> /dev/null; fi
  copy_results
  local status=0
  if [ "$rc" -ne 0 ] || [ ${#failures[@]} -gt 0 ]; then
    step "FAILED: ${failures[*]:-} (exit status $rc)"
    status=1
  else
    step "done"
  fi
  # Let tee finish run.log before the caller collects $OUT.
  exec > /dev/null 2>&1
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$TEE_PID" 2> /dev/null || break; sleep 0.5; done
  exit "$status"
}
trap on_exit EXIT
die() { failures+=("$1"); echo "ERROR: $1${2:+: $2}"; exit 1; }

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
# cuBLASLt: the toolkit's, else a pip wheel's (nvidia/cublas).
CUBLASLT_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  if [ -z "$CUBLASLT_DIR" ] && ls "$d"/libcublasLt.so* > /dev/null 2>&1; then CUBLASLT_DIR=$d; fi
done
if [ -z "$CUBLASLT_DIR" ]; then
  wheel=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__))' 2>/dev/null || true)
  if [ -n "$wheel" ] && ls "$wheel"/lib/libcublasLt.so* > /dev/null 2>&1; then
    CUBLASLT_DIR=$wheel/lib
    # A wheel ships only libcublasLt.so.N: give the linker an unversioned name beside our objects.
    mkdir -p "$BUILD_DIR/lib"
    ln -sf "$(ls "$CUBLASLT_DIR"/libcublasLt.so.* | head -1)" "$BUILD_DIR/lib/libcublasLt.so"
  fi
fi
echo "cuBLASLt: ${CUBLASLT_DIR:-? (linking with -lcublasLt and hoping)}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib ${CUPTI_LIBRARY:+"$(dirname "$CUPTI_LIBRARY")"} ${CUBLASLT_DIR:+"$CUBLASLT_DIR"}; do
  if [ -d "$d" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
done

step "device"
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
timeout 30 "$NVIDIA_SMI" --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version,compute_cap \
  --format=csv 2>&1 || true
if command -v nvcc > /dev/null 2>&1; then nvcc --version | tail -2; else echo "nvcc: not found"; fi
# The architectures to build for: the GPU's own (refuses a non-NVIDIA machine and compute
# capabilities below 8.0, with the reason).
ARCHS=$(NVIDIA_SMI=$NVIDIA_SMI "$ROOT/calibration/cuda-arch.sh") || die "device" "no supported NVIDIA GPU (the reason is above)"
echo "building for CUDA architectures: $ARCHS"
# Inputs that need no binary to check: fail now, not after the build.
if [ -n "${SHAPES:-}" ] && [ ! -f "$SHAPES" ]; then die "input" "SHAPES=$SHAPES: no such file"; fi

step "build batchsim-calibrate (CMake, whole project configured)"
CMAKE_BUILD=$BUILD_DIR/cmake
CALIBRATE=""
BATCHSIM_BUILD_PID=""
# The CMake path needs the project's CPU libraries; without them configure fails in seconds.
if [ -n "${CALIBRATE_BIN:-}" ]; then
  echo "using the prebuilt $CALIBRATE_BIN"
  CALIBRATE=$CALIBRATE_BIN
elif [ "${CALIBRATE_BUILD:-auto}" != nvcc ] && timeout 90 cmake -S "$ROOT" -B "$CMAKE_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" -DBATCHSIM_BUILD_TESTS=OFF -DBATCHSIM_BUILD_BENCH=OFF \
    && timeout 240 cmake --build "$CMAKE_BUILD" --target batchsim-calibrate -j "$JOBS"; then
  CALIBRATE=$CMAKE_BUILD/calibration/batchsim-calibrate
  # The fit needs the `batchsim` CLI (all of the project): build it while the GPU measures,
  # but never past the point where the fit and the copy must start.
  timeout "$(left 60)" cmake --build "$CMAKE_BUILD" --target batchsim -j "$((JOBS > 4 ? JOBS - 2 : JOBS))" \
      > "$BUILD_DIR/batchsim-build.log" 2>&1 &
  BATCHSIM_BUILD_PID=$!
else
  step "building batchsim-calibrate with nvcc alone (CMake skipped or failed above)"
  # calibration/nvcc-build.sh compiles every source of calibration/ (what the CMake target
  # lists) with the CMake target's flags, for $ARCHS, and links the binary.
  timeout 300 env JOBS="$JOBS" CUPTI_INCLUDE="$CUPTI_INCLUDE" CUPTI_LIBRARY="$CUPTI_LIBRARY" \
      CUBLASLT_DIR="$CUBLASLT_DIR" EXTRA_LIB_DIR="$BUILD_DIR/lib" \
      "$ROOT/calibration/nvcc-build.sh" "$ARCHS" "$BUILD_DIR/nvcc-obj" "$BUILD_DIR/batchsim-calibrate" \
    || die "nvcc build of batchsim-calibrate" "compiler or linker errors above"
  CALIBRATE=$BUILD_DIR/batchsim-calibrate
fi
step "input: what to measure"
BATCHSIM=${BATCHSIM_BIN:-$CMAKE_BUILD/experiments/batchsim}
measure_args=(--quick --model "$FIT_ON")
if [ -n "${MODEL:-}" ] && [ "$MODEL" != "$FIT_ON" ]; then
  if "$CALIBRATE" shapes --model "$MODEL" > /dev/null 2>&1; then
    measure_args+=("$MODEL")  # built into batchsim-calibrate: its layer GEMMs and attention
  elif [ -z "${SHAPES:-}" ]; then
    # Any other model: its shape file, from the batchsim CLI (hwmodel's model reader).
    if [ -n "${BATCHSIM_BIN:-}" ] && [ -x "$BATCHSIM_BIN" ]; then
      SHAPES=$BUILD_DIR/shapes.csv
      "$BATCHSIM_BIN" calibrate shapes --model "$MODEL" --tp "${TP:-1}" --ep "${EP:-1}" --out "$SHAPES" \
        || die "input" "batchsim calibrate shapes --model $MODEL failed (above)"
    else
      die "input" "MODEL=$MODEL is not built into batchsim-calibrate. Write its GEMM shapes on a CPU machine, \
build/experiments/batchsim calibrate shapes --model $MODEL --tp ${TP:-1} --ep ${EP:-1} --out shapes.csv, and run with SHAPES=shapes.csv \
(or give BATCHSIM_BIN)"
    fi
  fi
fi
if [ -n "${SHAPES:-}" ]; then measure_args+=(--shapes "$SHAPES"); fi
# `shapes` reads the options as `measure` will, without the GPU: a bad model or shape file
# stops here with its reason (exit 2).
"$CALIBRATE" shapes "${measure_args[@]}" > "$BUILD_DIR/shapes-to-measure.csv" \
  || die "input" "batchsim-calibrate rejected the measurement's options (above): ${measure_args[*]}"
echo "measure ${measure_args[*]}: $(grep -vc '^op,\|^#' "$BUILD_DIR/shapes-to-measure.csv") GEMMs per token count"

"$CALIBRATE" info || die "batchsim-calibrate info" "no usable CUDA device (exit 3) or the binary does not start"

step "check: CUDA kernels vs the CPU reference"
if ! timeout -k 10 120 "$CALIBRATE" check; then
  failures+=("kernel check")  # keep going: the timings are still worth bringing back
fi

# CUPTI has never run on these machines. A measure run with no time for any point does only
# the setup — CUDA context, CUPTI enable and its self-test (a timed copy kernel) — so a CUPTI
# that fails or hangs costs a minute at most here instead of the whole measurement.
step "probe: timer setup and CUPTI self-test (a measure run with no points)"
timer_args=()
if timeout -k 10 60 "$CALIBRATE" measure --quick --out "$BUILD_DIR/probe" --time-budget-s 0.001 > "$BUILD_DIR/probe.log" 2>&1; then
  grep -E '^timer' "$BUILD_DIR/probe.log" || true
else
  cat "$BUILD_DIR/probe.log"
  echo "the probe failed or hung: measuring with --timer event (CUDA events)"
  timer_args=(--timer event)
fi

# Measure for what is left, keeping ~75 s for the rest of the point in flight, the fit and
# the copy (measure stops starting new points at its budget; a --quick point is capped at
# 0.25 s of sampling plus its setup).
budget=$(left 75)
budget=$((budget < MEASURE_BUDGET_S ? budget : MEASURE_BUDGET_S))
step "measure ${measure_args[*]} ${timer_args[*]:-} (budget ${budget} s)"
rm -rf "$MEAS" "$PROFILE" "$VALIDATION"
measure_status=0
timeout -k 10 $((budget + 45)) "$CALIBRATE" measure "${measure_args[@]}" --out "$MEAS" --time-budget-s "$budget" \
    ${timer_args[@]+"${timer_args[@]}"} || measure_status=$?
case $measure_status in
  0) ;;
  4) failures+=("measure (some shapes did not fit in the GPU's memory; the rest is measured)") ;;
  124|137) failures+=("measure (killed at its time limit; the rows so far are kept)") ;;
  *) failures+=("measure (exit status $measure_status)") ;;
esac

step "fit"
# The datasheet GPU whose ceilings the fit starts from: BASE_GPU, else the measured device's
# (hwmodel/fit's datasheet_gpu_for_device knows only short slugs such as "h200"; nvidia's names
# such as "NVIDIA H100 80GB HBM3" are mapped here). Empty: the fit's own choice, or its error.
base_gpu_for() {
  case "$(tr '[:upper:]' '[:lower:]' <<< "$1")" in
    *h100*pcie*|*h100*nvl*) echo "" ;;  # no datasheet profile of these: the fit says so
    *h200*) echo h200 ;;
    *h100*|*h800*) echo h100-sxm ;;
    *a100*40gb*) echo a100-40gb ;;
    *a100*) echo a100-80gb ;;
    *b200*) echo b200 ;;
    *l40s*) echo l40s ;;
    *a40*) echo a40 ;;
    *) echo "" ;;
  esac
}
device_name=$(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$MEAS/device.json" 2>/dev/null | head -1)
BASE_GPU=${BASE_GPU:-$(base_gpu_for "$device_name")}
base_args=()
if [ -n "$BASE_GPU" ]; then
  base_args=(--base-gpu "$BASE_GPU")
  echo "measured on ${device_name:-?}: fitting onto the ceilings of $BASE_GPU"
else
  echo "measured on ${device_name:-?}: no datasheet GPU known for it here (set BASE_GPU=NAME: batchsim list gpus)"
fi
if [ -n "$BATCHSIM_BUILD_PID" ]; then
  wait "$BATCHSIM_BUILD_PID" || echo "building batchsim failed or ran out of time: $(tail -5 "$BUILD_DIR/batchsim-build.log")"
  BATCHSIM_BUILD_PID=""
fi
# ---- FIT: `batchsim calibrate fit MEAS_DIR --out PROFILE.yaml` (experiments/fidelity/calibrate.cpp;
# the same command works on any CPU machine with meas.tar.gz). It writes the profile with its
# fit error per operator; `batchsim validate` then writes the full report as JSON.
if [ -x "$BATCHSIM" ] && "$BATCHSIM" calibrate fit --help > /dev/null 2>&1; then
  if ! timeout "$(left 15)" "$BATCHSIM" calibrate fit "$MEAS" --out "$PROFILE" --fit-on "$FIT_ON" \
      ${base_args[@]+"${base_args[@]}"}; then
    failures+=("fit")
  fi
else
  echo "'batchsim calibrate fit' is not available in this build."
fi
if [ -x "$BATCHSIM" ] && "$BATCHSIM" validate --help > /dev/null 2>&1; then
  profile_args=()
  [ -f "$PROFILE" ] || profile_args=(--profile-out "$PROFILE")
  if ! timeout "$(left 10)" "$BATCHSIM" validate --measurements "$MEAS" --fit-on "$FIT_ON" \
        --out "$VALIDATION" ${base_args[@]+"${base_args[@]}"} ${profile_args[@]+"${profile_args[@]}"}; then
    failures+=("validate")
  fi
fi
if [ ! -f "$PROFILE" ]; then
  echo "No profile fitted here (no batchsim CLI in this build). On a CPU machine:"
  echo "  tar xzf meas.tar.gz && build/experiments/batchsim calibrate fit meas --out profile.yaml --fit-on $FIT_ON ${base_args[*]:-}"
  echo "  (or: build/experiments/batchsim validate --measurements meas --fit-on $FIT_ON ${base_args[*]:-} --profile-out profile.yaml)"
fi
# on_exit copies the results and prints "done" or "FAILED: ...".
