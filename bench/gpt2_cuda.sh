#!/usr/bin/env bash
# GPT-2 124M training on one GPU: epl (bench_gpt2_cuda) against PyTorch eager and torch.compile
# (bench/gpt2_torch.py), in alternating rounds (epl, eager, compile, epl, ...), medians compared,
# and against the physical limit: the GPU's dense bf16 peak over the model's FLOPs per token.
# Prints a table and writes bench/results/gpt2_cuda.json.
#   EPL_GPT2_BIN=build/gpu/bench/bench_gpt2_cuda bench/gpt2_cuda.sh [rounds=3] [batch=16]
# tools/gpu_check.sh builds the binary and runs this.
#   EPL_GPT2_BASE=path   a second epl binary (an earlier commit's) joins the rounds as "base epl",
#                        for an A/B of a change in the same run
#   EPL_GPT2_PROFILE=1   then one step of epl's binary under Nsight Compute (ncu, where it runs):
#                        each kernel's share of the step's GPU time, the top 15 printed and all of
#                        them written to bench/results/gpt2_cuda_kernels.csv
set -euo pipefail
rel() { [ -z "$1" ] || realpath -m "$1"; }  # paths given are the caller's
bin=$(rel "${EPL_GPT2_BIN:-$(dirname "$0")/../build/gpu/bench/bench_gpt2_cuda}")
base=$(rel "${EPL_GPT2_BASE:-}")
cd "$(dirname "$0")/.."
rounds=${1:-3}; batch=${2:-16}
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$batch" =~ ^[1-9][0-9]*$ ]] || { echo "gpt2_cuda: rounds ($rounds) and batch ($batch) must be positive integers" >&2; exit 2; }
[ -x "$bin" ] || { echo "gpt2_cuda: no benchmark binary at $bin; build bench_gpt2_cuda or set EPL_GPT2_BIN" >&2; exit 2; }
[ -z "$base" ] || [ -x "$base" ] || { echo "gpt2_cuda: EPL_GPT2_BASE=$base is not an executable" >&2; exit 2; }
py=${EPL_PYTHON:-python3}
mkdir -p bench/results
log=bench/results/gpt2_cuda.log; : > "$log"
for r in $(seq "$rounds"); do
  [ -z "$base" ] || "$base" --batch="$batch" | sed 's/"impl": "epl/"impl": "base epl/' | tee -a "$log"
  "$bin" --batch="$batch" | tee -a "$log"
  "$py" bench/gpt2_torch.py --mode eager --batch "$batch" | tee -a "$log"
  "$py" bench/gpt2_torch.py --mode compile --batch "$batch" | tee -a "$log"
done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "an unknown GPU")
"$py" - "$log" "$gpu" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["impl"], []).append(r)
med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in by.items()}
gpu = sys.argv[2]
# FLOPs per token of a training step: 6 per parameter (forward and backward GEMMs) plus the
# attention's score and value products, 6 * layers * context * width (causal: half of 12).
L, T, C = 12, 1024, 768
params = rows[0]["params"]
flops = 6 * params + 6 * L * T * C
peak = 989e12 if "H100" in gpu else 989e12 if "H200" in gpu else float("nan")  # dense bf16, SXM
limit = peak / flops
epl = next(k for k in by if k.startswith("epl"))
print(f"\nGPT-2 124M training on {gpu}, batch {rows[0]['batch']} x {T} tokens, medians of {len(by[epl])} alternating rounds")
print(f"{'implementation':<32}{'tokens/s':>11}{'step ms':>9}{'of limit':>10}{'peak GiB':>10}{'epl / it':>10}")
for k, v in by.items():
    print(f"{k:<32}{med[k]:>11.0f}{statistics.median(x['step_ms'] for x in v):>9.1f}{100 * med[k] / limit:>9.1f}%"
          f"{max(x['peak_gib'] for x in v):>10.2f}{med[epl] / med[k]:>10.2f}")
print(f"{'physical limit (dense bf16 peak)':<32}{limit:>11.0f}   ({peak / 1e12:.0f} TFLOP/s over {flops / 1e9:.2f} GFLOP a token)")
json.dump({"gpu": gpu, "batch": rows[0]["batch"], "context": T, "flops_per_token": flops, "peak_flops": peak,
           "limit_tokens_per_s": limit, "median_tokens_per_s": med, "runs": rows}, open("bench/results/gpt2_cuda.json", "w"), indent=1)
PY

if [ -n "${EPL_GPT2_PROFILE:-}" ]; then
  if ! command -v ncu >/dev/null; then
    echo "gpt2_cuda: ncu (Nsight Compute) not found; no kernel profile" >&2
  else
    # one step (no warm-up: the kernels are the same), each kernel timed alone; the clocks left as found
    timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        "$bin" --batch="$batch" --steps=1 --warmup=0 > bench/results/gpt2_cuda_ncu.csv 2>/dev/null || true
    "$py" - bench/results/gpt2_cuda_ncu.csv <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, rows = rows[0], rows[1:]
name, value, metric = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Name")
by = collections.defaultdict(lambda: [0.0, 0])
for r in rows:
    if r[metric] == "gpu__time_duration.sum":
        k = r[name].split("(")[0][:90]
        by[k][0] += float(r[value].replace(",", "")) * 1e-6
        by[k][1] += 1
total = sum(v[0] for v in by.values())
print(f"\nepl's kernels in one step (Nsight Compute, each kernel alone): {total:.1f} ms of GPU time, {sum(v[1] for v in by.values())} launches")
print(f"{'kernel':<92}{'launches':>9}{'ms':>9}{'share':>8}")
for k, (ms, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:15]:
    print(f"{k:<92}{n:>9}{ms:>9.2f}{100 * ms / total:>7.1f}%")
with open("bench/results/gpt2_cuda_kernels.csv", "w") as f:
    f.write("kernel,launches,ms,share\n")
    for k, (ms, n) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        f.write(f'"{k}",{n},{ms:.4f},{ms / total:.4f}\n')
PY
  fi
fi
