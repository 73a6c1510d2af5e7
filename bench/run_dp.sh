#!/usr/bin/env bash
# gpt-mini data parallel: epl on 2 thread ranks (1 thread each) against epl on 1 rank with 2
# threads and PyTorch DDP (gloo, 2 processes, 1 thread each) on the same model and global batch
# (8), alternating runs and comparing medians. Writes bench/results/dp.json.
#   bench/run_dp.sh [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tools/quickstart.sh build bench_gpt_mini
mkdir -p bench/results
source bench/peers.sh
torch_peers 1
log=bench/results/dp.log; : > "$log"
for r in $(seq "$rounds"); do
  ./build/cpu-release/bench/bench_gpt_mini --ranks=2 --threads=1 --steps=4 --warmup=1 | tee -a "$log"
  OMP_NUM_THREADS=2 ./build/cpu-release/bench/bench_gpt_mini --ranks=1 --threads=2 --steps=4 --warmup=1 | tee -a "$log"
  for py in "${peers[@]}"; do "$py" bench/torch_ddp_gpt_mini.py --ranks 2 --threads 1 --steps 4 --warmup 1 | tee -a "$log"; done
done
/usr/bin/python3 - "$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["impl"], []).append(r)
med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in by.items()}
dp = next(k for k in med if k.startswith("epl dp"))
print(f"\ngpt-mini, global batch 8, medians of {len(by[dp])} alternating runs")
print(f"{'implementation':<34}{'tokens/s':>10}{'epl dp / this':>15}   runs")
for k, v in by.items():
    print(f"{k:<34}{med[k]:>10.1f}{med[dp]/med[k]:>15.2f}   " + " ".join(f"{x['tokens_per_s']:.0f}" for x in v))
ov = statistics.median(x["overlap"] for x in by[dp])
print(f"all-reduce time hidden behind the backward pass (epl dp): {100*ov:.0f}%")
json.dump({"median_tokens_per_s": med, "overlap": ov, "runs": rows}, open("bench/results/dp.json", "w"), indent=1)
PY
