#!/usr/bin/env python3
"""gpt-mini under PyTorch DistributedDataParallel (gloo, one process per rank), the peer of
`bench_gpt_mini --ranks=R`: the same model as bench/torch_gpt_mini.py, global batch 8 divided
among the ranks, AdamW, N threads per rank. Prints one JSON line.
    python3 bench/torch_ddp_gpt_mini.py --ranks 2 --threads 1
"""
import argparse, json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))


def worker(rank, a, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    import importlib.util
    spec = importlib.util.spec_from_file_location("gm", os.path.join(os.path.dirname(__file__), "torch_gpt_mini.py"))
    sys.argv = ["x", "--threads", str(a.threads), "--steps", "0", "--warmup", "0", "--define-only"]
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    torch.manual_seed(0)
    gm.B = 8 // a.ranks
    model = torch.nn.parallel.DistributedDataParallel(gm.Gpt())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for s in range(a.warmup + a.steps):
        idx, tgt = torch.randint(0, gm.V, (gm.B, gm.T)), torch.randint(0, gm.V, (gm.B, gm.T))
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(idx).view(-1, gm.V), tgt.view(-1))
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--port", type=int, default=29533)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, q)) for r in range(a.ranks)]
    for pr in procs:
        pr.start()
    step = q.get()
    for pr in procs:
        pr.join()
    print(json.dumps({"impl": f"torch {torch.__version__} DDP {a.ranks}x{a.threads}", "threads": a.threads, "ranks": a.ranks,
                      "tokens_per_s": round(8 * 256 / step, 1), "step_s": round(step, 4)}))
