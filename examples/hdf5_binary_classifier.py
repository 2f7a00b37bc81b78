"""A binary classifier trained from an HDF5 file, fed by stoke.Loader and watched by
stoke.Monitor: live stats every 10% of an epoch, an epoch summary, a diagnosis at the end.

    python3 examples/hdf5_binary_classifier.py                # generates binary.h5 first
    python3 examples/hdf5_binary_classifier.py --data my.h5   # datasets x, y, x_val, y_val

Runs on the GPU when torch sees one, else on the CPU; nothing else changes.
"""
import argparse
import os
import time

import h5py
import numpy as np
import torch
import torch.nn as nn

import stoke


def generate(path, n=200_000, features=32, seed=0):
    """A binary problem a linear model cannot fully solve: a hyperplane plus an interaction
    term, with label noise. Training and validation sets in one file."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(features)
    with h5py.File(path, "w") as f:
        for name, count in (("", n), ("_val", n // 10)):
            x = rng.standard_normal((count, features)).astype(np.float32)
            score = x @ w + 2.0 * x[:, 0] * x[:, 1] + 0.5 * rng.standard_normal(count)
            f[f"x{name}"] = x
            f[f"y{name}"] = (score > 0).astype(np.int64)
    print(f"generated {path}: {n} training and {n // 10} validation samples of {features} features")


def live(sample):
    """One line from mon.latest() (the keys of `stoke monitor --jsonl`), as seed 003 printed."""
    if not sample:  # None before the monitor's first sample
        return "(no sample yet)"
    gb = 1e9
    parts = []
    for g in sample.get("gpus", []):
        if "util_pct" in g:
            parts.append(f"GPU{g['index']} {g['util_pct']}%")
        if "mem_total_bytes" in g:
            parts.append(f"VRAM {g['mem_used_bytes'] / gb:.1f}/{g['mem_total_bytes'] / gb:.1f} GB")
    if "cpu_pct" in sample:
        parts.append(f"CPU {sample['cpu_pct']:.0f}%")
    if "mem_total_bytes" in sample:
        used, total = sample["mem_used_bytes"] / gb, sample["mem_total_bytes"] / gb
        parts.append(f"RAM {used:.1f}/{total:.1f} GB")
    if "wait_pct" in sample.get("pipeline", {}):
        parts.append(f"data wait {sample['pipeline']['wait_pct']:.0f}%")
    return " | ".join(parts)


def waited_s(stats):
    return stats["wait_avg_ms"] * stats["batches"] / 1000.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", help="HDF5 file with x, y, x_val, y_val (default: generate binary.h5)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--workers", default="auto")
    p.add_argument("--in-memory", action="store_true", help="read the file into memory first")
    p.add_argument("--jsonl", default="binary_run.jsonl", help="the monitor's samples")
    args = p.parse_args()
    workers = args.workers if args.workers == "auto" else int(args.workers)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.data is None:
        args.data = "binary.h5"
        if not os.path.exists(args.data):
            generate(args.data)

    data = stoke.Dataset(args.data, input="x", target="y", in_memory=args.in_memory)
    train = stoke.Loader(data, batch_size=args.batch_size, shuffle=True, seed=0, drop_last=True,
                         workers=workers, device=device)
    val = stoke.Loader(stoke.Dataset(args.data, input="x_val", target="y_val",
                                     in_memory=args.in_memory),
                       batch_size=4096, device=device)
    print(f"{data}\nloader: {train.workers} workers ({train.decision['workers']['reason']}), "
          f"{train.prefetch} batches in flight")

    with h5py.File(args.data, "r") as f:
        features = f["x"].shape[1]
    model = nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    steps = len(train)

    with stoke.Monitor(interval=0.5, jsonl=args.jsonl) as mon:
        for epoch in range(args.epochs):
            train.set_epoch(epoch)
            model.train()
            before, t0 = train.stats(), time.perf_counter()
            loss_sum = correct = seen = 0
            for i, (x, y) in enumerate(train, 1):
                y = y.float()
                logits = model(x).squeeze(1)
                loss = loss_fn(logits, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_sum += loss.item() * len(y)
                correct += ((logits > 0) == (y > 0.5)).sum().item()
                seen += len(y)
                if 10 * i // steps > 10 * (i - 1) // steps:  # each 10% of the epoch
                    print(f"  epoch {epoch} {10 * i // steps * 10:3d}%  "
                          f"loss {loss_sum / seen:.4f} | {live(mon.latest())}")
            elapsed = time.perf_counter() - t0
            wait_share = (waited_s(train.stats()) - waited_s(before)) / elapsed

            model.eval()
            val_correct = val_seen = 0
            with torch.no_grad():
                for x, y in val:
                    val_correct += ((model(x).squeeze(1) > 0) == (y > 0)).sum().item()
                    val_seen += len(y)
            print(f"epoch {epoch}: {seen / elapsed:,.0f} samples/s, loss {loss_sum / seen:.4f}, "
                  f"train acc {correct / seen:.4f}, val acc {val_correct / val_seen:.4f}, "
                  f"data wait {100 * wait_share:.1f}% of the epoch")

    s = train.stats()
    busy = ", ".join(f"{100 * b:.0f}%" for b in s["busy_frac"])
    print(f"\nloader: wait per batch avg {s['wait_avg_ms']:.2f} ms, p95 {s['wait_p95_ms']:.2f} ms; "
          f"{s['slots']} slots, {s['workers']} workers (busy {busy or '-'})")
    print(mon.diagnosis())


if __name__ == "__main__":
    main()
