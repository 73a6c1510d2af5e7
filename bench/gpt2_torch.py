#!/usr/bin/env python3
"""GPT-2 124M in PyTorch on one GPU — the peer of bench_gpt2_cuda: the same model (pre-LN GPT-2,
tanh GELU, learned positions, untied head), batch, context and AdamW, on random tokens, tuned to
its best: bf16 autocast, scaled_dot_product_attention (flash, causal), fused AdamW, TF32 allowed
for what stays f32. Prints one JSON line.
    python3 bench/gpt2_torch.py --mode eager|compile [--batch 16 --steps 10 --warmup 3] [--text FILE]
--text trains on a file's bytes (vocabulary 256; step s takes the consecutive windows s B .. s B +
B - 1, as bench_gpt2_cuda --text does) from the first step, and prints every step's loss.
"""
import argparse, json, math, time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["eager", "compile"], default="eager")
p.add_argument("--batch", type=int, default=16)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--device", default="cuda")
p.add_argument("--tiny", action="store_true", help="a small shape, to check the script on a CPU")
p.add_argument("--text", help="train on this file's bytes, printing every step's loss")
a = p.parse_args()
V, T, L, H, C = (50257, 1024, 12, 12, 768) if not a.tiny else (97, 32, 2, 2, 32)
if a.text:
    try:
        raw = open(a.text, "rb").read()
    except OSError as e:
        raise SystemExit(f"gpt2_torch: --text {a.text} cannot be read ({e.strerror}); give a text file's path")
    if len(raw) <= 2 * T + 2:
        raise SystemExit(f"gpt2_torch: --text {a.text} has {len(raw)} bytes; it needs more than {2 * T + 2}")
    text = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
    V, a.warmup = 256, 0
B = a.batch
torch.set_float32_matmul_precision("high")


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.qkv, s.proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.ln2, s.fc, s.out = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).split(C, 2)
        h = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(h(q), h(k), h(v), is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, C), nn.Embedding(T, C)
        s.blocks = nn.ModuleList(Block() for _ in range(L))
        s.ln, s.lm = nn.LayerNorm(C), nn.Linear(C, V)

    def forward(s, idx, targets):
        x = s.tok(idx) + s.pos.weight[:T]
        for b in s.blocks:
            x = b(x)
        return F.cross_entropy(s.lm(s.ln(x)).view(-1, V).float(), targets.view(-1))


dev = torch.device(a.device)
model = Gpt().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, **({"fused": True} if dev.type == "cuda" else {}))
step_fn = model if a.mode == "eager" else torch.compile(model)
g = torch.Generator().manual_seed(7)
secs, loss, losses = [], 0.0, []
for s in range(a.warmup + a.steps):
    if a.text:  # consecutive windows, wrapping around
        starts = [((s * B + i) * T) % (len(text) - T - 1) for i in range(B)]
        x = torch.stack([text[b:b + T] for b in starts]).to(dev)
        y = torch.stack([text[b + 1:b + T + 1] for b in starts]).to(dev)
    else:
        x = torch.randint(0, V, (B, T), generator=g).to(dev)
        y = torch.randint(0, V, (B, T), generator=g).to(dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        l = step_fn(x, y)
    l.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss = l.item()  # waits for the step
    losses.append(loss)
    if s >= a.warmup:
        secs.append(time.perf_counter() - t0)
secs.sort()
step = secs[len(secs) // 2]
peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0
print(json.dumps({"impl": f"torch {torch.__version__} {a.mode}", "batch": B, "context": T,
                  "params": sum(q.numel() for q in model.parameters()), "step_ms": round(step * 1e3, 2),
                  "tokens_per_s": round(B * T / step), "peak_gib": round(peak, 2), "loss": round(loss, 4),
                  **({"text": a.text, "losses": losses} if a.text else {})}))
