#!/usr/bin/env bash
# The two commands of the README's quick start, for a fresh Debian 12 machine:
#   tools/quickstart.sh demo   install what is missing, build, train the flagship GPT example
#   tools/quickstart.sh test   install what is missing, build everything with g++ 12 and with
#                              clang 14, run the whole test suite with each
#   tools/quickstart.sh build TARGET...   install what is missing, build TARGETs in the cpu-release
#                              tree (the benchmark scripts in bench/ start with this)
#   tools/quickstart.sh deps   only install what a build needs (bench/run_ab.sh, compile_time.sh)
# Debian packages are installed with apt-get (as root, or through sudo) only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-demo}
demo_packages=(cmake ninja-build g++ libeigen3-dev libboost1.81-dev libopenmpi-dev openmpi-bin fortunes-min fortunes)
test_packages=("${demo_packages[@]}" doctest-dev clang libomp-dev python3-venv python3-numpy python3-torch)

# runs a step and says how long it took (CI's time is the sum of these: #38 keeps it under 25 minutes)
timed() {
  local t0=$SECONDS
  "$@"
  echo "epl: $* took $((SECONDS - t0)) s"
}

install_missing() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "epl: installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

case "$mode" in
  demo)
    install_missing "${demo_packages[@]}"
    cmake --preset cpu-release >/dev/null
    timed cmake --build --preset cpu-release --target gpt
    ./build/cpu-release/examples/gpt/gpt --steps=100
    ;;
  deps) install_missing "${demo_packages[@]}" ;;
  build)
    shift
    install_missing "${demo_packages[@]}"
    cmake --preset cpu-release >/dev/null
    cmake --build --preset cpu-release --target "$@" >/dev/null
    ;;
  test)
    install_missing "${test_packages[@]}"
    # Python's safetensors (PyPI; Debian 12 has no package) reads the weights a checkpoint exports,
    # and Debian's PyTorch (seen through --system-site-packages) loads them into a model of its own
    if ! build/pyenv/bin/python3 -c "import safetensors, numpy, torch" 2>/dev/null; then
      rm -rf build/pyenv
      /usr/bin/python3 -m venv --system-site-packages build/pyenv  # Debian's Python, with its numpy
      build/pyenv/bin/pip install --quiet --disable-pip-version-check safetensors
    fi
    python=-DEPL_TEST_PYTHON=$PWD/build/pyenv/bin/python3
    cuda=OFF frontend=
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
    export PATH=/usr/local/cuda/bin:$PATH
    if [ $cuda = ON ]; then
      # the cuDNN frontend's C++ headers, which fused attention on the GPU is built with: NVIDIA
      # ships them in PyPI's nvidia-cudnn-frontend wheel (Debian 12 has no package); only include/ is kept
      fe=build/deps/cudnn-frontend
      if [ ! -f $fe/include/cudnn_frontend.h ]; then
        build/pyenv/bin/pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d build/deps nvidia-cudnn-frontend==1.32.0
        build/pyenv/bin/python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' build/deps/nvidia_cudnn_frontend-1.32.0-*.whl $fe
      fi
      frontend=-DCUDNN_FRONTEND_ROOT=$PWD/$fe
    fi
    # g++ 12 (with the CUDA backend when nvcc is there), then clang 14: a header-only library is
    # compiled by its users' compilers, so the whole tree must build and pass with both.
    cmake --preset ci -DEPL_ENABLE_CUDA=$cuda -DEPL_ENABLE_NCCL=$cuda "$python" $frontend
    timed cmake --build --preset ci
    timed ctest --preset ci
    cmake --preset ci-clang "$python"
    timed cmake --build --preset ci-clang
    timed ctest --preset ci-clang
    ;;
  *) echo "usage: tools/quickstart.sh demo|test|deps|build TARGET..." >&2; exit 2 ;;
esac
