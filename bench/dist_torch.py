# dist_torch.py: PyTorch's side of bench/dist.sh, the peer of `mpirun -np N stoke train`.
#
#   dist_torch.py rate MODEL --ranks N --threads T --samples S [--batch B]
#
# The reference CNN or MLP of bench/train_torch.py (the same data, normalization, model,
# SGD momentum 0.9) trained by N processes (torch.multiprocessing.spawn; no torchrun
# needed) under DistributedDataParallel over gloo on 127.0.0.1 (its default bucket of
# 25 MiB, gradients all-reduced during backward), each rank at the per-rank batch B
# (default the model's: 128 or 256) on its own shard of a shuffled epoch, T compute
# threads a rank (torch's and OpenBLAS's; bench/dist.sh sets OPENBLAS_CORETYPE as
# bench/train_bench.sh does, so OpenBLAS runs its kernels for this CPU, not a fallback).
# N = 1 is the plain model, no DDP (what a user runs on one process).
# After 3 warm-up steps every rank trains on S/N samples; the slowest rank's time gives
# "rate SAMPLES_PER_S RANKS THREADS" (all ranks' samples over it).
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch import BATCH, LR, build, load, openblas, set_threads  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, out):
    # torch's threads and OpenBLAS's own pool (Debian's torch multiplies on it and it
    # ignores torch.set_num_threads) both at the rank's share
    set_threads(openblas(), args.threads, args.threads)
    n = args.ranks
    if n > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=n)
    x, y = load("train", args.model)
    torch.manual_seed(1)
    net = build(args.model)
    if n > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR[args.model], momentum=0.9)
    b = args.batch or BATCH[args.model]
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    shard = perm[rank::n]  # DistributedSampler's split of one shuffled epoch
    pos = 0

    def step():
        nonlocal pos
        if pos + b > len(shard):
            pos = 0
        j = shard[pos:pos + b]
        pos += b
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x[j]), y[j]).backward()
        opt.step()

    for _ in range(3):
        step()
    steps = max(1, args.samples // (n * b))
    if n > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    if n > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.destroy_process_group()
    if rank == 0:
        out.put(n * steps * b / t.item())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=("rate",))
    p.add_argument("model", choices=("cnn", "mlp"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--samples", type=int, default=6400)
    p.add_argument("--batch", type=int, default=0)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(worker, args=(args, free_port(), out), nprocs=args.ranks, join=True,
                       start_method="spawn")
    print(f"rate {out.get():.0f} {args.ranks} {args.threads}", flush=True)


if __name__ == "__main__":
    main()
