#!/usr/bin/env bash
# Installs the Debian 12 packages batchsim needs to build, test and plot. Idempotent:
# packages already present are skipped by apt. Run as root (or with sudo). The Python module
# (python/) needs python3-dev and pybind11-dev to build, numpy and pandas to run, pytest to test,
# and venv, setuptools and wheel for `pip install .` and its test.
#   --fuzz   also clang and its libFuzzer runtime, for scripts/fuzz.sh
set -euo pipefail
packages=(
  build-essential cmake ninja-build
  libboost-program-options-dev libeigen3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev
  python3 python3-matplotlib
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pandas python3-pytest
  python3-venv python3-setuptools python3-wheel
)
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang libclang-rt-dev)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
