#!/usr/bin/env bash
# gpt-mini, epl against tuned PyTorch, alternating runs (A B A B ...) and comparing medians;
# plus SGEMM against the measured peak. Writes bench/results/gpt_mini.json.
#   bench/run_gpt_mini.sh [threads=1] [rounds=5]
# Peer settings: bench/peers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}; rounds=${2:-5}
steps="--steps=4 --warmup=1"; pysteps="--steps 4 --warmup 1"  # 5 steps a run, 4 timed
tools/quickstart.sh build bench_gpt_mini bench_gpt_mini_eigen bench_gemm
mkdir -p bench/results
source bench/peers.sh
torch_peers "$threads"
log=bench/results/gpt_mini.log; : > "$log"
for r in $(seq "$rounds"); do
  ./build/cpu-release/bench/bench_gpt_mini --threads="$threads" $steps | tee -a "$log"
  ./build/cpu-release/bench/bench_gpt_mini_eigen --threads="$threads" $steps | tee -a "$log"
  for py in "${peers[@]}"; do "$py" bench/torch_gpt_mini.py --threads "$threads" $pysteps | tee -a "$log"; done
done
./build/cpu-release/bench/bench_gemm --threads="$threads" 2>/dev/null > bench/results/gemm.json
# Debian's torch reports its BLAS as "generic": libblas.so.3, which the alternatives system points at.
export DEBIAN_LIBBLAS=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo none)
/usr/bin/python3 - "$log" "$threads" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["impl"], []).append(r)
med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in by.items()}
best_peer = max((v for k, v in med.items() if not k.startswith("epl")), default=float("nan"))
gemm = json.load(open("bench/results/gemm.json"))
print(f"\ngpt-mini training, {sys.argv[2]} thread(s), medians of {len(by['epl'])} alternating runs")
print(f"{'implementation':<24}{'tokens/s':>10}{'GFLOP/s':>10}{'vs epl':>8}   runs (tokens/s)")
for k, v in by.items():
    print(f"{k:<24}{med[k]:>10.1f}{statistics.median(x['gflops'] for x in v):>10.1f}{med['epl']/med[k]:>8.2f}   " + " ".join(f"{x['tokens_per_s']:.0f}" for x in v))
print(f"epl / fastest peer: {med['epl']/best_peer:.2f}")
# the physical limit: the least GEMM work a token needs at the FMA peak, timed before and after each epl run
limit = statistics.median(x["limit_tokens_per_s"] for x in by["epl"])
print(f"physical limit (the GEMMs alone at the FMA peak, all else free): {limit:.0f} tokens/s; epl at {med['epl']/limit:.0%} of it"
      + ("; no peer ran" if best_peer != best_peer else
         f", the fastest peer at {best_peer/limit:.0%}; #39's 1.5x the fastest peer = {1.5*best_peer:.0f} tokens/s = {1.5*best_peer/limit:.0%} of the limit"
         + (" (past it: not reachable on this CPU)" if 1.5 * best_peer > limit else "")))
import os
print("peer settings: " + " ".join(f"{k}={os.environ.get(k, '')}" for k in
      ("OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DEBIAN_LIBBLAS")) +
      "; BLAS: " + ", ".join(f"{k}: {v[0].get('blas', '?')}" for k, v in by.items() if not k.startswith("epl")))
print(f"\nSGEMM in one process, medians of 7 alternations with an FMA loop (peak, median {gemm['peak_gflops']['fma']:.0f} GFLOP/s; epl's f32 kernel: {gemm.get('f32_kernel', '?')}):")
print(f"  {'case':<32}{'epl GFLOP/s':>12}{'of peak':>9}{'Eigen':>8}{'of peak':>9}")
for c in gemm["cases"]:
    print(f"  {c['case']:<32}{c['gflops']:>12.1f}{100*c['of_peak']:>8.1f}%{c['eigen_gflops']:>8.1f}{100*c['eigen_of_peak']:>8.1f}%")
json.dump({"threads": int(sys.argv[2]), "median_tokens_per_s": med, "ratio_vs_fastest_peer": med["epl"]/best_peer,
           "limit_tokens_per_s": limit, "target_of_limit": 1.5 * best_peer / limit,
           "runs": rows, "gemm": gemm}, open("bench/results/gpt_mini.json", "w"), indent=1)
PY
