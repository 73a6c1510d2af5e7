#!/usr/bin/env bash
# The one command for a machine with an NVIDIA GPU:
#   tools/gpu_check.sh [tests|bench|all]   (all by default)
# builds epl with CUDA and NCCL on every core, runs every CUDA and NCCL test (among them the
# multi-rank matrix: every strategy and policy on 2 and 4 thread ranks sharing the GPU, equal to
# one GPU and the CPU, printed as a table; and the device's unit tests once more under
# compute-sanitizer memcheck), and runs the GPT-2 124M benchmark against
# PyTorch eager and torch.compile in the same run (bench/gpt2_cuda.sh), which prints a table and
# writes bench/results/gpt2_cuda.json.
#
# What it needs and where it looks:
#   nvcc, cuBLAS      /usr/local/cuda (or CUDACXX / CUDAToolkit_ROOT)
#   cuDNN, NCCL       /usr/local/cuda, else the nvidia-cudnn / nvidia-nccl wheels beside PyTorch
#   Eigen, Boost.PFR, doctest   /usr/include; where missing, apt-get installs libeigen3-dev,
#                     libboost1.81-dev and doctest-dev (as root), or, on a machine with no network,
#                     the .deb files of those packages in $EPL_DEBS (default: .debs/ in the
#                     checkout) are unpacked into a private prefix
#   python3 with torch   the benchmark's peer
# EPL_GPT2_ROUNDS (3) and EPL_GPT2_BATCH (16) set the benchmark's alternating rounds and batch.
#
# EPL_GPU_PREBUILT=1 skips the dependencies and the build: the binaries in $EPL_GPU_BUILD were
# built on another machine (nvcc there, for sm_90: a GPU machine's time is short), and the CUDA
# libraries they load come from PyTorch's wheels here (site-packages/nvidia/*/lib).
set -euo pipefail
build=$(realpath -m "${EPL_GPU_BUILD:-$(dirname "$0")/../build/gpu}")  # a relative path is the caller's
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-all}
case "$mode" in tests|bench|all) ;; *) echo "gpu_check: unknown mode '$mode'; use tests, bench or all" >&2; exit 2 ;; esac
jobs=$(nproc)
say() { printf '\n== gpu_check: %s\n' "$*"; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

if [ -n "${EPL_GPU_PREBUILT:-}" ]; then
  need=(test/epl_test_cuda test/epl_test_nccl)
  [ "$mode" = tests ] || need+=(bench/bench_gpt2_cuda)
  for b in "${need[@]}"; do
    [ -x "$build/$b" ] || { echo "gpu_check: EPL_GPU_PREBUILT: $build/$b is missing; build it first (EPL_GPU_BUILD names the build folder)" >&2; exit 2; }
  done
  site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
  libs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | paste -sd: || true)
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "prebuilt binaries in $build; libraries from $site/nvidia"
else
# ---- the header-only dependencies ----------------------------------------------------------------
prefix_args=()
if [ ! -f /usr/include/eigen3/Eigen/Core ] || [ ! -f /usr/include/boost/pfr.hpp ] || [ ! -f /usr/include/doctest/doctest.h ]; then
  debs=${EPL_DEBS:-$root/.debs}
  if ls "$debs"/*.deb >/dev/null 2>&1; then
    prefix=/tmp/epl-deps
    for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
    prefix_args=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DEigen3_DIR="$prefix/usr/share/eigen3/cmake"
                 -DBoost_INCLUDE_DIR="$prefix/usr/include" -Ddoctest_DIR="$prefix/usr/lib/cmake/doctest")
    say "Eigen, Boost and doctest unpacked from $debs into $prefix"
  elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libeigen3-dev libboost1.81-dev doctest-dev
  else
    echo "gpu_check: Eigen 3.4, Boost 1.81 headers and doctest are missing: install libeigen3-dev libboost1.81-dev doctest-dev," \
         "or put their .deb files in \$EPL_DEBS" >&2
    exit 1
  fi
fi

# ---- cuDNN and NCCL: the CUDA toolkit's, else PyTorch's wheels --------------------------------------
libdir=/tmp/epl-gpu-libs
mkdir -p "$libdir/include" "$libdir/lib"
find_lib() {  # $1 header, $2 library name: link both into $libdir when the toolkit lacks them
  [ -f /usr/local/cuda/include/$1 ] && return 0
  local site h l
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  h=$(find $site -path '*nvidia*' -name "$1" 2>/dev/null | head -1 || true)  # (head closes the pipe early)
  l=$(find $site -path '*nvidia*' -name "lib$2.so*" 2>/dev/null | sort | head -1 || true)
  if [ -z "$h" ] || [ -z "$l" ]; then echo "gpu_check: no $1 / lib$2 in /usr/local/cuda or PyTorch's wheels" >&2; exit 1; fi
  ln -sf "$(dirname "$h")"/*.h "$libdir/include/"
  ln -sf "$l" "$libdir/lib/lib$2.so"
  export LD_LIBRARY_PATH="$(dirname "$l")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
find_lib cudnn_version.h cudnn
find_lib nccl.h nccl
export CPATH="$libdir/include${CPATH:+:$CPATH}" LIBRARY_PATH="$libdir/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"

# ---- build ------------------------------------------------------------------------------------------
say "configure ($build)"
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPL_ENABLE_CUDA=ON -DEPL_ENABLE_NCCL=ON -DEPL_BUILD_EXAMPLES=OFF \
      -DCUDNN_INCLUDE_DIR="$libdir/include" -DCUDNN_LIBRARY="$libdir/lib/libcudnn.so" \
      -DNCCL_INCLUDE_DIR="$libdir/include" -DNCCL_LIBRARY="$libdir/lib/libnccl.so" "${prefix_args[@]}" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
grep -E "epl:|CUDA" "$build/configure.log" || true
targets=(epl_test_cuda epl_test_nccl)
[ "$mode" = tests ] || targets+=(bench_gpt2_cuda)
say "build ${targets[*]} on $jobs cores"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
fi

# ---- tests ------------------------------------------------------------------------------------------
status=0
if [ "$mode" != bench ]; then
  say "CUDA and NCCL tests"
  "$build/test/epl_test_cuda" || status=1
  "$build/test/epl_test_nccl" || status=1
  if command -v compute-sanitizer >/dev/null; then
    say "the device's unit tests under compute-sanitizer memcheck"
    compute-sanitizer --tool memcheck --error-exitcode 9 "$build/test/epl_test_cuda" --test-case-exclude='*trainer*,*thread ranks*' || status=1
  else
    echo "gpu_check: compute-sanitizer not found; memcheck skipped" >&2
    status=1
  fi
fi
if [ "$mode" != tests ]; then
  say "GPT-2 124M: epl against PyTorch"
  EPL_GPT2_BIN="$build/bench/bench_gpt2_cuda" bash bench/gpt2_cuda.sh "${EPL_GPT2_ROUNDS:-3}" "${EPL_GPT2_BATCH:-16}" || status=1
fi
[ $status -eq 0 ] && say "passed" || say "FAILED"
exit $status
