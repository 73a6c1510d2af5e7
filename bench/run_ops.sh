#!/usr/bin/env bash
# The memory-bound ops (#39): epl's CPU kernels against a copy of as many bytes on the same core
# (bench_ops) and against tuned PyTorch's kernels for the same ops (bench/torch_ops.py, Debian's
# and PyPI's), alternating runs (A B A B ...) and comparing medians. Writes bench/results/ops.json.
#   bench/run_ops.sh [threads=1] [rounds=5]
# Peer settings: bench/peers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}; rounds=${2:-5}
tools/quickstart.sh build bench_ops
mkdir -p bench/results
source bench/peers.sh
torch_peers "$threads"
log=bench/results/ops.log; : > "$log"
for r in $(seq "$rounds"); do
  ./build/cpu-release/bench/bench_ops --threads="$threads" 2>/dev/null | tee -a "$log"
  for py in "${peers[@]}"; do "$py" bench/torch_ops.py --threads "$threads" | sed "s|^{|{\"python\": \"$py\", |" | tee -a "$log"; done
done
/usr/bin/python3 - "$log" "$threads" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
epl = [r for r in rows if r["bench"] == "ops"]
peers = {}
for r in rows:
    if r["bench"] == "torch_ops": peers.setdefault(f"torch {r['torch']}", []).append(r)
ops = [o["op"] for o in epl[0]["ops"]]
med = lambda xs: statistics.median(xs)
e_ms = {op: med([o["ms"] for r in epl for o in r["ops"] if o["op"] == op]) for op in ops}
gbs = {op: med([o["gb_s"] for r in epl for o in r["ops"] if o["op"] == op]) for op in ops}
copy = {op: med([o["copy_gb_s"] for r in epl for o in r["ops"] if o["op"] == op]) for op in ops}
p_ms = {k: {op: med([r["ms"][op] for r in v]) for op in ops} for k, v in peers.items()}
print(f"\nmemory-bound ops at gpt-mini's shapes, f32, {sys.argv[2]} thread(s), {epl[0]['cpu']}, medians of {len(epl)} alternating runs")
head = f"{'op':<26}{'epl ms':>9}{'GB/s':>7}{'of copy':>9}" + "".join(f"{k + ' ms':>22}" for k in p_ms) + f"{'best peer/epl':>15}"
print(head)
for op in ops:
    best = min(p[op] for p in p_ms.values())
    print(f"{op:<26}{e_ms[op]:>9.3f}{gbs[op]:>7.1f}{100*gbs[op]/copy[op]:>8.0f}%" + "".join(f"{p[op]:>22.3f}" for p in p_ms.values()) + f"{best/e_ms[op]:>14.2f}x")
print("peer AdamW paths: " + ", ".join(f"{k}: {v[0]['adamw']}" for k, v in peers.items()))
json.dump({"threads": int(sys.argv[2]), "cpu": epl[0]["cpu"], "epl_ms": e_ms, "epl_gb_s": gbs, "copy_gb_s": copy, "peers_ms": p_ms,
           "runs": rows}, open("bench/results/ops.json", "w"), indent=1)
PY
