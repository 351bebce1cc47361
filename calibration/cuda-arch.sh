#!/usr/bin/env bash
# calibration/cuda-arch.sh — the CUDA architectures to build batchsim-calibrate for on THIS
# machine, from the GPUs nvidia-smi lists (their compute capability: "9.0" -> 90, "10.0" -> 100,
# "8.9" -> 89). Prints them CMake style ("90", or "80;90" on a mixed machine) on stdout; says
# why not on stderr and exits non-zero when it cannot:
#   3  no NVIDIA GPU: nvidia-smi is missing (an AMD or Intel GPU, or none), fails (no driver),
#      or lists no GPU
#   4  no supported GPU: every one is below compute capability 8.0 (the kernels need BF16
#      tensor cores), or this nvcc cannot compile for it (e.g. sm_100 needs CUDA 12.8)
#
# Environment: CUDA_ARCH (skip the detection: use this list, e.g. 90 or "80;90"; it is still
# checked), NVIDIA_SMI (default nvidia-smi), NVCC (default nvcc; when it exists, each
# architecture must be in its `--list-gpu-code`).
# For a build on a machine without a GPU, calibration/CMakeLists.txt has a documented default
# list (BATCHSIM_CUDA_DEFAULT_ARCHITECTURES); this script is for the machine that measures.
set -uo pipefail
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
NVCC=${NVCC:-nvcc}
MIN_ARCH=80
say() { echo "cuda-arch.sh: $*" >&2; }

if [ -n "${CUDA_ARCH:-}" ]; then
  archs=$(tr ';, ' '\n' <<< "$CUDA_ARCH" | grep -v '^$' || true)
  names=""
else
  if ! command -v "$NVIDIA_SMI" > /dev/null 2>&1; then
    other=""
    if command -v rocm-smi > /dev/null 2>&1 || [ -e /dev/kfd ]; then other=" (this machine has an AMD GPU: ROCm)"; fi
    if [ -z "$other" ] && [ -d /dev/dri ] && ! [ -e /dev/nvidiactl ]; then other=" (no NVIDIA driver devices here)"; fi
    say "no NVIDIA GPU: $NVIDIA_SMI is not installed$other. batchsim-calibrate needs an NVIDIA GPU and CUDA; everything else in batchsim runs on the CPU."
    exit 3
  fi
  # (a driver that hangs must not hold the GPU machine: 30 s)
  if ! out=$(timeout 30 "$NVIDIA_SMI" --query-gpu=name,compute_cap --format=csv,noheader 2>&1); then
    if grep -qi 'compute_cap' <<< "$out"; then
      say "this driver's nvidia-smi cannot report compute_cap (drivers before R510): set CUDA_ARCH to the GPU's architecture, e.g. CUDA_ARCH=90 for an H100 ($out)"
    else
      say "no usable NVIDIA GPU: $NVIDIA_SMI failed: $out"
    fi
    exit 3
  fi
  out=$(grep -v '^[[:space:]]*$' <<< "$out" || true)
  if [ -z "$out" ]; then
    say "no NVIDIA GPU: $NVIDIA_SMI lists none"
    exit 3
  fi
  archs="" names=""
  while IFS= read -r line; do
    name=${line%,*} cap=${line##*,}
    cap=${cap//[[:space:]]/}
    name=$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' <<< "$name")
    if ! [[ "$cap" =~ ^[0-9]+\.[0-9]+$ ]]; then
      say "cannot read the compute capability of '$name' from nvidia-smi ('$cap'): set CUDA_ARCH, e.g. CUDA_ARCH=90"
      exit 3
    fi
    archs+="${cap%.*}${cap#*.}"$'\n'
    names+="$name (compute capability $cap)"$'\n'
  done <<< "$out"
fi

supported="" refused=""
while IFS= read -r arch; do
  [ -n "$arch" ] || continue
  if ! [[ "$arch" =~ ^[0-9]+$ ]]; then
    say "'$arch' is not an architecture number like 90 (CUDA_ARCH='${CUDA_ARCH:-}')"
    exit 4
  fi
  if [ "$arch" -lt "$MIN_ARCH" ]; then
    refused+=" sm_$arch"
    continue
  fi
  case ";$supported;" in *";$arch;"*) continue ;; esac
  supported+="${supported:+;}$arch"
done <<< "$archs"
if [ -z "$supported" ]; then
  say "unsupported GPU:${refused} is below sm_$MIN_ARCH (compute capability 8.0). batchsim-calibrate's kernels need BF16 tensor cores: A100, A10/A40, L4/L40S, H100/H200, B200 or newer.${names:+ Found: $(paste -sd';' <<< "${names%$'\n'}")}"
  exit 4
fi
if [ -n "$refused" ]; then
  say "leaving out${refused} (below sm_$MIN_ARCH); building for $supported"
fi
if command -v "$NVCC" > /dev/null 2>&1 && known=$("$NVCC" --list-gpu-code 2>/dev/null) && [ -n "$known" ]; then
  IFS=';' read -r -a list <<< "$supported"
  for arch in "${list[@]}"; do
    if ! grep -qx "sm_$arch" <<< "$known"; then
      say "this nvcc ($("$NVCC" --version | grep -o 'release [0-9.]*' || echo '?')) cannot compile for sm_$arch (it knows: $(paste -sd' ' <<< "$known")); use a newer CUDA toolkit (sm_100 needs 12.8, sm_120 12.8)"
      exit 4
    fi
  done
fi
echo "$supported"
