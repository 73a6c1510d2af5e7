# The PyTorch peers of the benchmarks, tuned to their best here; sourced by the run_*.sh scripts.
#   torch_peers THREADS   installs what a peer lacks, exports each peer's thread and kernel
#                         settings, and sets peers=(python ...)
# Debian's python3-torch runs on OpenBLAS (libopenblas0-openmp) forced to its AVX-512 kernels
# (AVX2's where the CPU has no AVX-512):
# without that package it falls to the reference BLAS (50 tokens/s, ~20x slower: a peer left slow
# by a bad setting proves nothing), and OpenBLAS does not recognise these CPUs and otherwise picks
# a ~3.5x slower kernel. PyPI's torch 2.x (MKL, oneDNN) lives in .venv-torch2, made here when
# missing. Huge pages are left off for both: torch 2.15 with THP_MEM_ALLOC_ENABLE=1 (its allocator's
# madvise for blocks of 2 MiB and more, what epl's does by default) or GLIBC_TUNABLES=glibc.malloc.hugetlb=1
# measured 10-15% slower on gpt-mini (5 alternating runs each, Intel Xeon, 2026-11-28): it does not
# cache host blocks, so each step faults fresh huge pages in.
torch_peers() {
  local missing=()
  for p in python3-torch libopenblas0-openmp; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "peers: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
  if [ ! -x .venv-torch2/bin/python ] || ! .venv-torch2/bin/python -c "import torch" 2>/dev/null; then
    echo "peers: installing PyPI's torch into .venv-torch2" >&2
    rm -rf .venv-torch2
    python3 -m venv .venv-torch2 && .venv-torch2/bin/pip install --quiet --disable-pip-version-check torch numpy >&2
  fi
  # the widest vectors this CPU runs: AVX-512 (Zen 4, Xeons), else AVX2 (Zen 3), where forcing
  # AVX-512 would stop the peer on an illegal instruction (#39: the scripts run on every CPU here)
  if grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512
  else
    export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
  fi
  export OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1
  peers=("/usr/bin/python3" ".venv-torch2/bin/python")
}
