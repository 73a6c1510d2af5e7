#!/usr/bin/env python3
"""The peer of bench_ops: PyTorch's kernels for the same memory-bound operations at gpt-mini's
shapes (batch 8, context 256, width 384, 6 heads, vocabulary 4096), f32, timed the same way
(a warm-up round, then the median of alternating rounds). Each op is ATen's own kernel, called
directly (no autograd bookkeeping); the causal softmax is what gpt-mini's peer runs (scale, mask
the upper triangle with -inf, softmax); cross_entropy_backward is log_softmax's and nll's
backward; AdamW is torch.optim.AdamW's fastest CPU path here (fused, else foreach). Prints one
JSON line.
    python3 bench/torch_ops.py --threads N [--rounds 7]
"""
import argparse, json, statistics, time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--rounds", type=int, default=7)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
B, T, C, H, V = 8, 256, 384, 6, 4096
R, maps = B * T, B * H
aten = torch.ops.aten

x, dy = torch.randn(R, C), torch.randn(R, C)
w, b = torch.rand(C) + 0.5, torch.randn(C) * 0.1
h, dgh = torch.randn(R, 4 * C), torch.randn(R, 4 * C)
s, dp = torch.randn(maps, T, T) * 2, torch.randn(maps, T, T)
mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
logits = torch.randn(R, V) * 2
targets = torch.randint(0, V, (R,))
y, mean, rstd = aten.native_layer_norm(x, [C], w, b, 1e-5)
prob = (s * 0.125).masked_fill(mask, float("-inf")).softmax(-1)
logp = torch.log_softmax(logits, 1)
n_params = 14 << 20
param = torch.nn.Parameter(torch.randn(n_params) * 0.1)
param.grad = torch.randn(n_params) * 1e-3


def adamw():
    for kw in ({"fused": True}, {"foreach": True}):
        try:
            opt = torch.optim.AdamW([param], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)
            opt.step()
            return opt, next(iter(kw))
        except (RuntimeError, TypeError):
            continue
    opt = torch.optim.AdamW([param], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    return opt, "single_tensor"


opt, adamw_path = adamw()
ops = {
    "layer_norm": lambda: aten.native_layer_norm(x, [C], w, b, 1e-5),
    "layer_norm_backward": lambda: aten.native_layer_norm_backward(dy, x, [C], mean, rstd, w, b, [True, True, True]),
    "gelu": lambda: aten.gelu(h, approximate="tanh"),
    "gelu_backward": lambda: aten.gelu_backward(dgh, h, approximate="tanh"),
    "softmax_causal": lambda: (s * 0.125).masked_fill(mask, float("-inf")).softmax(-1),
    "softmax_causal_backward": lambda: aten._softmax_backward_data(dp, prob, -1, torch.float32) * 0.125,
    "cross_entropy": lambda: F.cross_entropy(logits, targets),
    "cross_entropy_backward": lambda: aten._log_softmax_backward_data(
        aten.nll_loss_backward(torch.tensor(1.0 / R), logp, targets, None, 1, -100, torch.tensor(0.0)), logp, 1, torch.float32),
    "adamw_update": opt.step,
}
times = {k: [] for k in ops}
with torch.no_grad():
    for r in range(a.rounds + 1):
        for k, fn in ops.items():
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            if r:
                times[k].append(dt)
print(json.dumps({"bench": "torch_ops", "torch": torch.__version__, "threads": a.threads, "adamw": adamw_path,
                  "ms": {k: 1e3 * statistics.median(v) for k, v in times.items()}}))
