#!/usr/bin/env bash
# calibration/nvcc-build.sh — build batchsim-calibrate with nvcc alone (no CMake, no project
# libraries), the way run-on-gpu.sh does on a GPU image that lacks them, or compile only some of
# its sources (the architecture check of tests/calibration/ compiles the .cu files per arch).
#
#   calibration/nvcc-build.sh ARCHS OBJ_DIR BINARY [SOURCE...]
#
# ARCHS    CUDA architectures, CMake style: "90", "80;90" (each gets SASS and PTX of its own:
#          -gencode arch=compute_XX,code=[sm_XX,compute_XX]).
# OBJ_DIR  where the objects go (created).
# BINARY   the executable to link, or "-" to compile only.
# SOURCE   files to compile (default: every calibration/*.cpp and *.cu, which is the binary:
#          calibration/CMakeLists.txt lists the same).
#
# Environment: NVCC (default nvcc), JOBS (parallel compiles, default nproc), NVCC_FLAGS (added
# to every compile), CUPTI_INCLUDE (a folder with cupti.h, when not in the toolkit's include/),
# CUPTI_LIBRARY (libcupti.so to link, default -lcupti), CUBLASLT_DIR (folder of
# libcublasLt.so), EXTRA_LIB_DIR (another -L folder, e.g. for a symlinked wheel library).
# Exit status: 0, or the first failing compile's or the link's (their errors are printed).
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,22p' "$0" >&2
  exit 2
fi
ARCHS=$1 OBJ=$2 BINARY=$3
shift 3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NVCC=${NVCC:-nvcc}
JOBS=${JOBS:-$(nproc)}
gencode=()
IFS=';' read -r -a arch_list <<< "$ARCHS"
for arch in "${arch_list[@]}"; do
  case "$arch" in
    ''|*[!0-9]*) echo "nvcc-build.sh: architecture '$arch' is not a number like 90 (ARCHS '$ARCHS')" >&2; exit 2 ;;
  esac
  gencode+=("-gencode=arch=compute_$arch,code=[sm_$arch,compute_$arch]")
done
if [ $# -eq 0 ]; then
  set -- "$ROOT"/calibration/*.cpp "$ROOT"/calibration/*.cu
fi
mkdir -p "$OBJ"
# The flags of calibration/CMakeLists.txt's CUDA target: C++20 by flag (CMake 3.25 cannot spell
# CUDA20, REFERENCE.md §4 pitfall 1), relaxed constexpr for std::span in device code.
flags=(-std=c++20 -O3 --expt-relaxed-constexpr "-I$ROOT" ${CUPTI_INCLUDE:+"-I$CUPTI_INCLUDE"} "${gencode[@]}")
# shellcheck disable=SC2206  # NVCC_FLAGS is a list of words by design
flags+=(${NVCC_FLAGS:-})
export NVCC
printf '%s\n' "$@" | xargs -P "$JOBS" -I{} bash -c '
  src=$1; obj=$2/$(basename "$src").o; shift 2
  "$NVCC" "$@" -c "$src" -o "$obj" || { echo "nvcc-build.sh: FAILED to compile $src" >&2; exit 255; }
' _ {} "$OBJ" "${flags[@]}"
if [ "$BINARY" = - ]; then
  exit 0
fi
"$NVCC" "${gencode[@]}" "$OBJ"/*.o ${CUBLASLT_DIR:+"-L$CUBLASLT_DIR"} ${EXTRA_LIB_DIR:+"-L$EXTRA_LIB_DIR"} \
    -lcublasLt "${CUPTI_LIBRARY:--lcupti}" -o "$BINARY"
