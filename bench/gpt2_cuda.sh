#!/usr/bin/env bash
# GPT-2 124M training on one GPU: epl (bench_gpt2_cuda) against PyTorch eager and torch.compile
# (bench/gpt2_torch.py), in alternating rounds (epl, eager, compile, epl, ...), medians compared,
# and against the physical limit: the GPU's dense bf16 peak over the model's FLOPs per token.
# Prints a table and writes bench/results/gpt2_cuda.json.
#   EPL_GPT2_BIN=build/gpu/bench/bench_gpt2_cuda bench/gpt2_cuda.sh [rounds=3] [batch=16]
# tools/gpu_check.sh builds the binary and runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}; batch=${2:-16}
bin=${EPL_GPT2_BIN:-build/gpu/bench/bench_gpt2_cuda}
py=${EPL_PYTHON:-python3}
mkdir -p bench/results
log=bench/results/gpt2_cuda.log; : > "$log"
for r in $(seq "$rounds"); do
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
