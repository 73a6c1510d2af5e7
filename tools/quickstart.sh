#!/usr/bin/env bash
# The two commands of the README's quick start, for a fresh Debian 12 machine:
#   tools/quickstart.sh demo   install what is missing, build, train the flagship GPT example
#   tools/quickstart.sh test   install what is missing, build everything, run the whole test suite
# Debian packages are installed with apt-get (as root, or through sudo) only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-demo}
packages=(cmake ninja-build g++ libeigen3-dev libboost1.81-dev doctest-dev libopenmpi-dev openmpi-bin fortunes-min fortunes)

missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "epl: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

case "$mode" in
  demo)
    cmake --preset cpu-release >/dev/null
    cmake --build --preset cpu-release --target gpt
    ./build/cpu-release/examples/gpt/gpt --steps=100
    ;;
  test)
    cuda=OFF; command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] && cuda=ON
    export PATH=/usr/local/cuda/bin:$PATH
    cmake --preset ci -DEPL_ENABLE_CUDA=$cuda -DEPL_ENABLE_NCCL=$cuda
    cmake --build --preset ci
    ctest --preset ci
    ;;
  *) echo "usage: tools/quickstart.sh demo|test" >&2; exit 2 ;;
esac
