#!/usr/bin/env bash
# Tensor-parallel benchmarks, alternating runs (A B A B ..., medians):
#  (1) examples/classification, 100,000 classes, global batch 64: the classifier split over the
#      ranks (colocated with the replicated backbone) against the whole model data parallel, on
#      2 and 4 thread ranks: samples/s and peak memory per rank;
#  (2) examples/moe, 8 experts top-2 split over 1, 2 and 4 thread ranks: tokens/s and the bytes
#      each rank sends per step (all_to_all dispatch and combine, and the all-gathers).
# Writes bench/results/split.json.   bench/run_split.sh [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tools/quickstart.sh build classification moe
mkdir -p bench/results
log=bench/results/split.log; : > "$log"
ex=./build/cpu-release/examples
for r in $(seq "$rounds"); do
  for n in 2 4; do
    echo "### classification split $n" >> "$log"; $ex/classification/classification --ranks=$n --steps=8 2>/dev/null >> "$log"
    echo "### classification replicate $n" >> "$log"; $ex/classification/classification --ranks=$n --steps=8 --replicate 2>/dev/null >> "$log"
  done
  for n in 1 2 4; do
    echo "### moe $n" >> "$log"; $ex/moe/moe --ranks=$n --steps=8 --dim=128 --context=64 --batch=8 2>/dev/null >> "$log"
  done
done
python3 - "$log" <<'PY'
import json, re, statistics, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    if line.startswith("### "):
        cur = line[4:].strip(); runs.setdefault(cur, []).append([]); continue
    m = re.search(r"(?:sent +([0-9.]+) KiB +)?step +(\d+) +loss +([0-9.]+) +([0-9.]+) (\w+)/s +peak ([0-9.]+) MiB", line)
    if m and cur: runs[cur][-1].append({"step": int(m[2]), "sent_kib": float(m[1] or 0), "rate": float(m[4]), "peak": float(m[6])})
out = {}
print(f"{'run':<30}{'rate (median)':>15}{'peak MiB':>10}{'sent KiB/step':>15}")
for k, rs in runs.items():
    rates = [statistics.median(s["rate"] for s in r if s["step"] >= 3) for r in rs]
    peak = statistics.median(max(s["peak"] for s in r) for r in rs)
    sent = statistics.median(statistics.median(s["sent_kib"] for s in r) for r in rs)
    out[k] = {"rate_median": statistics.median(rates), "rates": rates, "peak_mib": peak, "sent_kib_per_step": sent}
    print(f"{k:<30}{statistics.median(rates):>15.1f}{peak:>10.1f}{sent:>15.1f}")
json.dump(out, open("bench/results/split.json", "w"), indent=1)
PY
