#!/usr/bin/env python3
"""gpt-mini in PyTorch — the peer of bench_gpt_mini: the same model (pre-LN GPT, tanh GELU,
learned positions, untied head), batch, AdamW and thread count. Prints one JSON line.
    python3 bench/torch_gpt_mini.py --threads N [--steps 6 --warmup 2] [--amp]
"""
import argparse, json, math, time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--amp", action="store_true", help="forward and loss under CPU autocast to bf16 (PyTorch's AMP on the CPU)")
p.add_argument("--define-only", action="store_true", help="define the model and stop (imported by the DDP peer)")
a = p.parse_args()
torch.set_num_threads(a.threads)
V, T, L, H, C, B = 4096, 256, 6, 6, 384, 8


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.qkv, s.proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.ln2, s.fc, s.out = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        s.mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # a constant, not a buffer DDP would broadcast

    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).split(C, 2)
        h = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
        q, k, v = h(q), h(k), h(v)
        att = (q @ k.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(s.mask, float("-inf")).softmax(-1)
        x = x + s.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, C), nn.Embedding(T, C)
        s.blocks = nn.ModuleList(Block() for _ in range(L))
        s.ln, s.head = nn.LayerNorm(C), nn.Linear(C, V)

    def forward(s, idx):
        x = s.tok(idx) + s.pos.weight[:T]
        for b in s.blocks:
            x = b(x)
        return s.head(s.ln(x))


def main():
    torch.manual_seed(0)
    m = Gpt()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    params = sum(p.numel() for p in m.parameters())
    times = []
    for s in range(a.warmup + a.steps):
        idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
            loss = F.cross_entropy(m(idx).view(-1, V), tgt.view(-1))
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tps = B * T / med
    flops = 6 * params + 12 * L * T * C
    print(json.dumps({"impl": f"torch {torch.__version__}" + (" autocast bf16" if a.amp else ""), "threads": a.threads, "params": params, "tokens_per_s": round(tps, 1),
                      "gflops": round(tps * flops / 1e9, 1), "step_s": round(med, 4), "loss": round(loss.item(), 4),
                      "blas": loaded_blas()}))


def loaded_blas():
    """The BLAS this process runs on, from the libraries it mapped: Debian's torch is built on the
    generic libblas.so.3 interface, and the package that provides it decides the speed; PyPI's is
    linked with MKL."""
    if torch.backends.mkl.is_available():
        return "mkl"
    libs = {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}
    for name in ("mkl", "openblas"):
        if any(name in lib for lib in libs):
            return name
    return "reference blas" if any("libblas" in lib for lib in libs) else "none seen"


if not a.define_only:
    main()
