#!/usr/bin/env bash
# Pipeline benchmarks: (1) the bubble of each schedule against theory, with fixed-duration
# synthetic stages (bench_pipeline_bubble), and the four schedules' timelines drawn side by
# side (docs/img/pipeline_schedules.svg); (2) gpt-mini on 2 thread ranks (1 thread each) as a
# 2-stage pipeline against 2-way data parallel, same global batch (8), alternating runs,
# medians of tokens/s and peak memory per rank. Writes bench/results/pipeline*.json.
#   bench/run_pipeline.sh [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tools/quickstart.sh build bench_gpt_mini bench_pipeline_bubble
mkdir -p bench/results docs/img
./build/cpu-release/bench/bench_pipeline_bubble --forward_ms=20 --steps=6 --json=bench/results/pipeline_bubble.json \
  --trace_dir=bench/results
python3 tools/trace_svg.py docs/img/pipeline_schedules.svg --step 2 \
  "GPipe (PreferForward), p=4, m=8=bench/results/pipeline_PreferForward.json" \
  "1F1B (PreferBackward), p=4, m=8=bench/results/pipeline_PreferBackward.json" \
  "Interleaved 1F1B, v=2, p=4, m=8=bench/results/pipeline_Interleaved.json" \
  "ZB-H1 (ZeroBubble), p=4, m=8=bench/results/pipeline_ZeroBubble.json"
log=bench/results/pipeline_gpt_mini.log; : > "$log"
for r in $(seq "$rounds"); do
  ./build/cpu-release/bench/bench_gpt_mini --ranks=2 --threads=1 --steps=4 --warmup=1 | tee -a "$log"
  ./build/cpu-release/bench/bench_gpt_mini --ranks=2 --threads=1 --steps=4 --warmup=1 --stages=2 --micro=4 | tee -a "$log"
  ./build/cpu-release/bench/bench_gpt_mini --ranks=2 --threads=1 --steps=4 --warmup=1 --stages=2 --micro=8 | tee -a "$log"
done
python3 - "$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["impl"], []).append(r)
print(f"\ngpt-mini on 2 thread ranks x 1 thread, global batch 8, medians of {min(len(v) for v in by.values())} alternating runs")
print(f"{'run':<38}{'tokens/s':>10}{'peak MiB rank 0':>17}{'rank 1':>9}")
out = {}
for k, v in by.items():
    tps = statistics.median(x["tokens_per_s"] for x in v)
    peaks = [statistics.median(x["peak_mib_ranks"][i] for x in v) for i in range(2)]
    out[k] = {"tokens_per_s": tps, "peak_mib_ranks": peaks}
    print(f"{k:<38}{tps:>10.1f}{peaks[0]:>17.1f}{peaks[1]:>9.1f}")
json.dump({"medians": out, "runs": rows}, open("bench/results/pipeline_gpt_mini.json", "w"), indent=1)
PY
