#!/usr/bin/env bash
# The loss curve of GPT-2 124M's body (byte-level: vocabulary 256) trained on real text on one GPU:
# epl with bf16 AMP against the same run in f32 (same initial weights and batches: the curves must
# agree within 1%), and against PyTorch's bf16 autocast run on the same batches (its own initial
# weights: the curves must agree within 1% once past the first steps). Prints a table and writes
# bench/results/gpt2_curve.json.
#   EPL_GPT2_BIN=build/gpu/bench/bench_gpt2_cuda bench/gpt2_curve.sh TEXT [steps=200] [batch=16]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/gpt2_curve.sh TEXT [steps=200] [batch=16]" >&2; exit 2; }
text=$(realpath -m "$1"); steps=${2:-200}; batch=${3:-16}  # paths given are the caller's
bin=$(realpath -m "${EPL_GPT2_BIN:-$(dirname "$0")/../build/gpu/bench/bench_gpt2_cuda}")
cd "$(dirname "$0")/.."
[[ "$steps" =~ ^[1-9][0-9]*$ && "$batch" =~ ^[1-9][0-9]*$ ]] || { echo "gpt2_curve: steps ($steps) and batch ($batch) must be positive integers" >&2; exit 2; }
[ -x "$bin" ] || { echo "gpt2_curve: no benchmark binary at $bin; build bench_gpt2_cuda or set EPL_GPT2_BIN" >&2; exit 2; }
py=${EPL_PYTHON:-python3}
mkdir -p bench/results
log=bench/results/gpt2_curve.log; : > "$log"
"$bin" --batch="$batch" --steps="$steps" --text="$text" | tee -a "$log" | cut -c1-200
"$bin" --batch="$batch" --steps="$steps" --text="$text" --f32 | tee -a "$log" | cut -c1-200
"$py" bench/gpt2_torch.py --mode eager --batch "$batch" --steps "$steps" --text "$text" | tee -a "$log" | cut -c1-200
"$py" - "$log" <<'PY'
import json, statistics, sys
rows = {r["impl"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
amp, f32 = rows["epl amp bf16"], rows["epl f32"]
torch = next(r for k, r in rows.items() if k.startswith("torch"))
def tail(r, n=20): return statistics.mean(r["losses"][-n:])
steps = len(amp["losses"])
worst = max(abs(a - b) / b for a, b in zip(amp["losses"], f32["losses"]))
print(f"\nloss curves, {steps} steps on {amp['text']} (byte level), batch {amp['batch']} x {amp['context']}")
print(f"{'run':<30}{'first':>8}{'step 50':>9}{'step 100':>9}{'last 20':>9}{'tokens/s':>10}")
for r in (amp, f32, torch):
    l = r["losses"]
    print(f"{r['impl']:<30}{l[0]:>8.4f}{l[min(49, steps - 1)]:>9.4f}{l[min(99, steps - 1)]:>9.4f}{tail(r):>9.4f}{r['tokens_per_s']:>10.0f}")
d_f32 = abs(tail(amp) - tail(f32)) / tail(f32)
d_torch = abs(tail(amp) - tail(torch)) / tail(torch)
print(f"epl amp against epl f32: last 20 steps' mean {100 * d_f32:.2f}% apart, the worst step {100 * worst:.2f}%")
print(f"epl amp against {torch['impl']}: last 20 steps' mean {100 * d_torch:.2f}% apart")
json.dump({"steps": steps, "runs": list(rows.values()), "amp_vs_f32_tail": d_f32, "amp_vs_f32_worst_step": worst,
           "amp_vs_torch_tail": d_torch}, open("bench/results/gpt2_curve.json", "w"), indent=1)
ok = d_f32 < 0.01 and d_torch < 0.01
print("within 1%: " + ("yes" if ok else "NO"))
sys.exit(0 if ok else 1)
PY
