#!/usr/bin/env bash
# The memory policies alone and combined (AMP too), alternating runs (each configuration once per round,
# medians over rounds): examples/gpt at gpt-mini size and a deeper gpt (12 blocks), on 1 rank and
# 2 data-parallel thread ranks: tokens/s, the step's peak of rank 0's device account, and the
# parameter, gradient and optimizer bytes rank 0 holds on the device and in its host pool after
# the last step. Writes bench/results/policies.json.   bench/run_policies.sh [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tools/quickstart.sh build gpt
mkdir -p bench/results
log=bench/results/policies.log; : > "$log"
gpt=./build/cpu-release/examples/gpt/gpt
# a constant learning rate: the tables' last losses (docs/benchmarks.md) were measured before
# examples/gpt warmed up and decayed its rate by default, and stay comparable with it
declare -A model=([mini]="--layers=4 --dim=128 --heads=4 --context=64 --batch=8 --lr.schedule=constant" [deep]="--layers=12 --dim=128 --heads=4 --context=64 --batch=8 --lr.schedule=constant")
policies=("none|"
          "zero_v2|--zero.level=v2"
          "ckpt_auto|--gradient_checkpoint.type=auto"
          "ckpt_collection|--gradient_checkpoint.type=collection"
          "offload|--offload.level=v0"
          "zero_v1+ckpt_auto|--zero.level=v1 --gradient_checkpoint.type=auto"
          "offload+ckpt_auto|--offload.level=v0 --gradient_checkpoint.type=auto"
          "amp|--amp.level=O1"
          "amp+offload+ckpt_auto|--amp.level=O1 --offload.level=v0 --gradient_checkpoint.type=auto")
for r in $(seq "$rounds"); do
  for m in mini deep; do
    for n in 1 2; do
      for p in "${policies[@]}"; do
        name=${p%%|*}; flags=${p#*|}
        echo "### $m ranks=$n $name" >> "$log"
        # shellcheck disable=SC2086
        $gpt --steps=8 --ranks=$n ${model[$m]} $flags 2>/dev/null >> "$log"
      done
    done
  done
done
python3 - "$log" <<'PY'
import json, re, statistics, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    if line.startswith("### "):
        cur = line[4:].strip(); runs.setdefault(cur, []).append({"steps": [], "host": (0.0, 0.0, 0.0)}); continue
    m = re.search(r"step +(\d+) +loss +([0-9.]+) +([0-9.]+) tokens/s +peak ([0-9.]+) MiB", line)
    if m and cur: runs[cur][-1]["steps"].append({"step": int(m[1]), "loss": float(m[2]), "rate": float(m[3]), "peak": float(m[4])})
    m = re.search(r"^rank 0 holds parameters ([0-9.]+) MiB, gradients ([0-9.]+) MiB, optimizer state ([0-9.]+) MiB", line)
    if m and cur: runs[cur][-1]["device"] = (float(m[1]), float(m[2]), float(m[3]))
    m = re.search(r"host pool parameters ([0-9.]+) MiB, gradients ([0-9.]+) MiB, optimizer state ([0-9.]+) MiB", line)
    if m and cur: runs[cur][-1]["host"] = (float(m[1]), float(m[2]), float(m[3]))
out = {}
fmt = lambda t: "/".join(f"{x:.2f}" for x in t)
print(f"{'run':<32}{'tokens/s':>10}{'step peak MiB':>15}{'device p/g/o MiB':>20}{'host p/g/o MiB':>20}{'last loss':>11}")
for k, rs in runs.items():
    rates = [statistics.median(s["rate"] for s in r["steps"] if s["step"] >= 3) for r in rs]
    peak = statistics.median(max(s["peak"] for s in r["steps"]) for r in rs)
    out[k] = {"tokens_per_s_median": statistics.median(rates), "tokens_per_s": rates, "step_peak_mib": peak,
              "device_mib": rs[0]["device"], "host_mib": rs[0]["host"], "last_loss": rs[0]["steps"][-1]["loss"]}
    print(f"{k:<32}{statistics.median(rates):>10.0f}{peak:>15.2f}{fmt(rs[0]['device']):>20}{fmt(rs[0]['host']):>20}"
          f"{rs[0]['steps'][-1]['loss']:>11.4f}")
json.dump(out, open("bench/results/policies.json", "w"), indent=1)
PY
