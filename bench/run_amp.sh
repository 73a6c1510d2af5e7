#!/usr/bin/env bash
# gpt-mini, one device, fp32 against mixed precision (amp.level O1, bf16 operands), epl and
# PyTorch (CPU autocast to bf16), alternating runs (A B C D A B C D ...), medians.
# Writes bench/results/amp.json.
#   bench/run_amp.sh [threads=1] [rounds=5] [torch_steps=4]
# PyTorch's autocast bf16 is slow where the CPU has no AVX512-BF16 (45 s a step on Zen 3):
# torch_steps=0 leaves PyTorch out.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}; rounds=${2:-5}; tsteps=${3:-4}
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target bench_gpt_mini >/dev/null
mkdir -p bench/results
export OMP_NUM_THREADS=$threads ATEN_CPU_CAPABILITY=avx512
py=/usr/bin/python3; [ -x .venv-torch2/bin/python ] && py=.venv-torch2/bin/python
log=bench/results/amp.log; : > "$log"
for r in $(seq "$rounds"); do
  ./build/cpu-release/bench/bench_gpt_mini --threads="$threads" --steps=4 --warmup=1 | tee -a "$log"
  ./build/cpu-release/bench/bench_gpt_mini --threads="$threads" --steps=4 --warmup=1 --amp | tee -a "$log"
  if [ "$tsteps" -gt 0 ]; then
    "$py" bench/torch_gpt_mini.py --threads "$threads" --steps "$tsteps" --warmup 1 2>/dev/null | tee -a "$log"
    "$py" bench/torch_gpt_mini.py --threads "$threads" --steps "$tsteps" --warmup 1 --amp 2>/dev/null | tee -a "$log"
  fi
done
/usr/bin/python3 - "$log" "$threads" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["impl"], []).append(r)
print(f"\ngpt-mini, {sys.argv[2]} thread(s), medians of alternating runs")
print(f"{'implementation':<34}{'tokens/s':>10}{'peak MiB':>10}   runs (tokens/s)")
for k, v in by.items():
    peak = statistics.median(x.get("peak_mib", float("nan")) for x in v)
    print(f"{k:<34}{statistics.median(x['tokens_per_s'] for x in v):>10.1f}{peak:>10.1f}   " + " ".join(f"{x['tokens_per_s']:.0f}" for x in v))
json.dump({"threads": int(sys.argv[2]), "median_tokens_per_s": {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in by.items()},
           "runs": rows}, open("bench/results/amp.json", "w"), indent=1)
PY
