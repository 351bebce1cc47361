#!/usr/bin/env bash
# Installs the Debian 12 packages batchsim needs to build, test and plot. Idempotent:
# packages already present are skipped by apt. Run as root (or with sudo). The Python module
# (python/) needs python3-dev and pybind11-dev to build, numpy and pandas to run, pytest to test,
# and venv, setuptools and wheel for `pip install .` and its test.
# slurm-wlm and munge are for the test that runs experiments/data/slurm/ on a real one-node Slurm
# cluster (tests/slurm/array_sweep_test.sh); that test starts private daemons of its own, so
# the system's munge and Slurm services are kept from starting while apt installs them.
#   --fuzz   also clang and its libFuzzer runtime, for scripts/fuzz.sh
set -euo pipefail
packages=(
  build-essential cmake ninja-build clang-format
  libboost-program-options-dev libeigen3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev libmimalloc-dev
  python3 python3-matplotlib
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pandas python3-pytest
  python3-venv python3-setuptools python3-wheel
  slurm-wlm munge
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
# Debian starts a package's services as it installs them (munge at once, with a fresh key;
# slurmctld and slurmd once a /etc/slurm/slurm.conf exists). Nothing here needs them, so a
# policy-rc.d (invoke-rc.d's and deb-systemd-invoke's veto, exit 101) keeps them stopped during
# this install; it is only added where the machine has none (a container's own one, which
# vetoes every service, is left as it is) and removed afterwards.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '%s\n' '#!/bin/sh' '# written by batchsim scripts/setup-debian.sh while it runs' \
    'for a in "$@"; do case "$a" in munge|slurmctld|slurmd|slurmdbd) exit 101;; esac; done' 'exit 0' |
    $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
