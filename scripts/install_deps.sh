#!/usr/bin/env bash
# Installs what sft-dp needs from Debian's packages, only what is missing. Idempotent; run as root
# (or with sudo available). Used by scripts/test.sh and .ci/run; scripts/demo.sh passes --demo:
# only what building sft_train/sft_prepare/sft_generate and running the demo need (55 Debian
# packages, 29 MB, on a fresh machine of the 2-core kind, where the whole list is 283 and 227 MB).
set -euo pipefail
PKGS=(cmake g++ make openmpi-bin libopenmpi-dev libpmix-dev libhdf5-dev hdf5-tools libopenblas-dev
      libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
      python3 python3-numpy python3-h5py python3-yaml python3-torch python3-pytest
      python3-venv python3-pip python3-matplotlib
      clang libclang-rt-14-dev libomp-dev libboost-context-dev)
if [ "${1:-}" = --demo ]; then
  PKGS=(cmake g++ make openmpi-bin libopenmpi-dev libpmix-dev libhdf5-dev libopenblas-dev
        libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev python3 python3-yaml)
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
