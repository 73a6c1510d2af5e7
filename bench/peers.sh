# The PyTorch peers of the benchmarks, tuned to their best here; sourced by the run_*.sh scripts.
#   torch_peers THREADS   exports each peer's thread and kernel settings, and sets peers=(python ...)
# Debian's python3-torch runs on OpenBLAS (libopenblas0-openmp) forced to its AVX-512 kernels:
# OpenBLAS does not recognise these CPUs and otherwise picks a ~3.5x slower one. PyPI's torch 2.x
# (MKL, oneDNN) joins from .venv-torch2 when it is there.
torch_peers() {
  export OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512 OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1
  peers=("/usr/bin/python3")
  if [ -x .venv-torch2/bin/python ]; then peers+=(".venv-torch2/bin/python"); fi
}
