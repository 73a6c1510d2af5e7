#!/usr/bin/env python3
"""PyTorch's gloo all_reduce on 2 processes (the peer of bench_comm_threads), 4 KiB to 256 MiB.
Prints one JSON line.   python3 bench/gloo_allreduce.py [--ranks 2]"""
import argparse, json, os, statistics, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, port, out):
    # Its best settings here: one intra-op thread per process (2 processes on 2 cores), and the
    # loopback interface (TCP round trip on this VM: ~60 us).
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    size = 4096
    while size <= 256 << 20:
        x = torch.ones(size // 4)
        dist.all_reduce(x)
        its = max(5, min(200, (1 << 30) // size))
        times = []
        for _ in range(its):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t0)
        t = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        a = size / t.item() / 1e9
        rows.append({"bytes": size, "algbw_gbs": round(a, 3), "busbw_gbs": round(a * 2 * (world - 1) / world, 3)})
        size *= 4
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, a.ranks, 29517, q)) for r in range(a.ranks)]
    for pr in procs:
        pr.start()
    rows = q.get()
    for pr in procs:
        pr.join()
    print(json.dumps({"impl": f"gloo (torch {torch.__version__})", "ranks": a.ranks, "rows": rows}))
