#!/usr/bin/env bash
# ZeRO benchmark, alternating runs (each configuration once per round, medians over rounds):
# examples/gpt at gpt-mini size and a deeper gpt (12 blocks), on 1 rank and 2 and 4 data-parallel
# thread ranks, without ZeRO and with zero.level v0 (stage 1), v1 (stage 2), v2 (stage 3):
# tokens/s, the step's peak memory on rank 0, and the parameter, gradient and optimizer bytes
# rank 0 holds after the last step (the ZeRO formulas: 4+4+8/N, 4+12/N, 16/N bytes a parameter).
# Writes bench/results/zero.json.   bench/run_zero.sh [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tools/quickstart.sh build gpt
mkdir -p bench/results
log=bench/results/zero.log; : > "$log"
gpt=./build/cpu-release/examples/gpt/gpt
# a constant learning rate: the tables' last losses (docs/benchmarks.md) were measured before
# examples/gpt warmed up and decayed its rate by default, and stay comparable with it
declare -A model=([mini]="--layers=4 --dim=128 --heads=4 --context=64 --batch=8 --lr.schedule=constant" [deep]="--layers=12 --dim=128 --heads=4 --context=64 --batch=8 --lr.schedule=constant")
for r in $(seq "$rounds"); do
  for m in mini deep; do
    for n in 1 2 4; do
      for level in none v0 v1 v2; do
        args="--steps=8 --ranks=$n ${model[$m]}"
        [ "$level" != none ] && args="$args --zero.level=$level"
        echo "### $m ranks=$n zero=$level" >> "$log"
        # shellcheck disable=SC2086
        $gpt $args 2>/dev/null >> "$log"
      done
    done
  done
done
python3 - "$log" <<'PY'
import json, re, statistics, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    if line.startswith("### "):
        cur = line[4:].strip(); runs.setdefault(cur, []).append({"steps": []}); continue
    m = re.search(r"step +(\d+) +loss +([0-9.]+) +([0-9.]+) tokens/s +peak ([0-9.]+) MiB", line)
    if m and cur: runs[cur][-1]["steps"].append({"step": int(m[1]), "loss": float(m[2]), "rate": float(m[3]), "peak": float(m[4])})
    m = re.search(r"parameters ([0-9.]+) MiB, gradients ([0-9.]+) MiB, optimizer state ([0-9.]+) MiB", line)
    if m and cur: runs[cur][-1].update(params=float(m[1]), grads=float(m[2]), state=float(m[3]))
out = {}
print(f"{'run':<26}{'tokens/s':>10}{'step peak MiB':>15}{'params':>9}{'grads':>9}{'optim':>9}{'last loss':>11}")
for k, rs in runs.items():
    rates = [statistics.median(s["rate"] for s in r["steps"] if s["step"] >= 3) for r in rs]
    peak = statistics.median(max(s["peak"] for s in r["steps"]) for r in rs)
    out[k] = {"tokens_per_s_median": statistics.median(rates), "tokens_per_s": rates, "step_peak_mib": peak,
              "params_mib": rs[0]["params"], "grads_mib": rs[0]["grads"], "optimizer_mib": rs[0]["state"],
              "last_loss": rs[0]["steps"][-1]["loss"]}
    print(f"{k:<26}{statistics.median(rates):>10.0f}{peak:>15.2f}{rs[0]['params']:>9.2f}{rs[0]['grads']:>9.2f}{rs[0]['state']:>9.2f}"
          f"{rs[0]['steps'][-1]['loss']:>11.4f}")
json.dump(out, open("bench/results/zero.json", "w"), indent=1)
PY
