#!/usr/bin/env bash
# gpt-mini, one device, fp32 against mixed precision (amp.level O1, bf16 operands; epl on the
# kernel it chooses for this CPU and on its rounded-f32 fall-back), epl and PyTorch (CPU autocast
# to bf16), alternating runs (A B C D A B C D ...), medians; then the
# flagship example's 100-step loss curve under --amp.level=O1 beside f32's.
# Writes bench/results/amp.json.
#   bench/run_amp.sh [threads=1] [rounds=5] [torch_steps=4]
# PyTorch's autocast bf16 is slow where the CPU has no AVX512-BF16 (45 s a step on Zen 3):
# torch_steps=0 leaves PyTorch out.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}; rounds=${2:-5}; tsteps=${3:-4}
tools/quickstart.sh build bench_gpt_mini gpt
mkdir -p bench/results
source bench/peers.sh
torch_peers "$threads"
log=bench/results/amp.log; : > "$log"
for r in $(seq "$rounds"); do
  ./build/cpu-release/bench/bench_gpt_mini --threads="$threads" --steps=4 --warmup=1 | tee -a "$log"
  ./build/cpu-release/bench/bench_gpt_mini --threads="$threads" --steps=4 --warmup=1 --amp | tee -a "$log"
  # the fall-back a CPU without a faster bf16 product gets: f32 FMA on operands rounded as packed
  ./build/cpu-release/bench/bench_gpt_mini --threads="$threads" --steps=4 --warmup=1 --amp --bf16_kernel=rounded-f32 | tee -a "$log"
  if [ "$tsteps" -gt 0 ]; then
    for py in "${peers[@]}"; do
      "$py" bench/torch_gpt_mini.py --threads "$threads" --steps "$tsteps" --warmup 1 2>/dev/null | tee -a "$log"
      "$py" bench/torch_gpt_mini.py --threads "$threads" --steps "$tsteps" --warmup 1 --amp 2>/dev/null | tee -a "$log"
    done
  fi
done
./build/cpu-release/examples/gpt/gpt --steps=100 --threads="$threads" > bench/results/amp_curve_f32.log
./build/cpu-release/examples/gpt/gpt --steps=100 --threads="$threads" --amp.level=O1 > bench/results/amp_curve_O1.log
/usr/bin/python3 - "$log" "$threads" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["impl"], []).append(r)
print(f"\ngpt-mini, {sys.argv[2]} thread(s), medians of alternating runs")
# epl's rows also give their physical limit: the least GEMM work a token needs at the peak of the
# instruction the run multiplied with (FMA, VDPBF16PS or AMX tiles), timed before and after each run
print(f"{'implementation':<34}{'tokens/s':>10}{'peak MiB':>10}{'limit':>8}{'of it':>7}   runs (tokens/s)")
med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in by.items()}
limit = {k: statistics.median(x["limit_tokens_per_s"] for x in v) for k, v in by.items() if "limit_tokens_per_s" in v[0]}
for k, v in by.items():
    peak = statistics.median(x.get("peak_mib", float("nan")) for x in v)
    lim = f"{limit[k]:>8.0f}{med[k] / limit[k]:>7.0%}" if k in limit else " " * 15
    print(f"{k:<34}{med[k]:>10.1f}{peak:>10.1f}{lim}   " + " ".join(f"{x['tokens_per_s']:.0f}" for x in v))
amp_rows = [k for k in limit if " amp " in k and "rounded-f32" not in k] or [k for k in limit if " amp " in k]
peer_amp = [med[k] for k in med if not k.startswith("epl") and "bf16" in k]
if amp_rows and peer_amp:
    k, best = amp_rows[0], max(peer_amp)
    print(f"#39's 1.5x the fastest peer's autocast = {1.5 * best:.0f} tokens/s = {1.5 * best / limit[k]:.0%} of {k}'s limit"
          + (" (past it: not reachable on this CPU)" if 1.5 * best > limit[k] else ""))
curve = {k: [float(x) for x in re.findall(r"^step +\d+ +loss +([0-9.]+)", open(f"bench/results/amp_curve_{k}.log").read(), re.M)]
         for k in ("f32", "O1")}
rel = [abs(b - a) / a for a, b in zip(curve["f32"], curve["O1"])]
print(f"\nexamples/gpt, 100 steps: loss f32 / O1 (bf16)")
for s in (1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100):
    print(f"step {s:>3}  {curve['f32'][s - 1]:.4f}  {curve['O1'][s - 1]:.4f}")
print(f"largest relative difference over the 100 steps: {max(rel):.4f} (step {rel.index(max(rel)) + 1}); "
      f"mean of the last 10: f32 {statistics.mean(curve['f32'][-10:]):.4f}, O1 {statistics.mean(curve['O1'][-10:]):.4f}")
json.dump({"threads": int(sys.argv[2]), "median_tokens_per_s": med, "limit_tokens_per_s": limit,
           "runs": rows, "gpt_loss_curve": curve, "gpt_loss_max_rel_diff": max(rel)}, open("bench/results/amp.json", "w"), indent=1)
PY
