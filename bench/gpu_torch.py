# gpu_torch.py: PyTorch's side of bench/gpu.sh (the peer `stoke train --device cuda` is
# measured against), on the same GPU.
#
# The models, data and optimizer of bench/train_torch.py: Fashion-MNIST from the gzip IDX
# files, normalized by the training set's mean and standard deviation; the reference CNN
# (batch 128) and the MLP 784-512-512-10 (batch 256); SGD momentum 0.9, lr 0.05,
# cross-entropy, seed 1. On the GPU: torch.backends.cuda.matmul.allow_tf32 and
# torch.backends.cudnn.allow_tf32 on (stoke runs fp32 on TF32 from compute capability
# 8.0 too), cudnn.benchmark on. Precision: fp32, bf16 (torch.autocast bfloat16) or fp16
# (torch.autocast float16 + GradScaler). Commands:
#
#   gpu_torch.py check --device D
#       "torch_version ...", "torch_cuda ...", "torch_cudnn ...", "torch_device_name ...",
#       "torch_device_cc M.m" lines; exit 1 with the reason on stderr when D is cuda and
#       torch has no CUDA device (a CPU-only build, no driver).
#   gpu_torch.py speed MODEL --precision P --feed resident|loader [--workers 0,2,4]
#                     [--steps N] [--repeats R] [--warmup W] [--batch B] [--limit L]
#       training samples/s: W warm-up steps, then R windows of N steps with
#       torch.cuda.synchronize() before and after each, the best window. Feeds:
#         resident: the whole training set as one normalized float32 tensor on the GPU,
#           batches gathered there (x[perm[i:i+B]]): the fastest a user can feed it;
#           for the CNN both NCHW and channels_last are tried, the faster is printed.
#         loader: DataLoader(TensorDataset(the same tensors on the CPU), shuffle=True,
#           pin_memory=True, persistent workers) with non_blocking copies to the GPU,
#           each of --workers tried, the best printed: what the seeds' users run.
#       Prints "speed SAMPLES_PER_S" and "config TEXT".
#   gpu_torch.py to-target MODEL --precision P [--max-epochs E] [--target A] [--batch B]
#                         [--limit L] [--val-limit V] [--channels-last]
#       resident data; from a seeded initialization, evaluates on the test images
#       (10,000 unless --val-limit) after every epoch, batch 1000; prints each epoch's
#       wall time since the first step (training + evaluation) and test accuracy
#       ("epoch E seconds S test_accuracy A"), then "to_target_seconds S" at the first
#       evaluation with accuracy >= A, or "to_target_seconds nan".
#
# --device cpu runs all of it on the CPU (bench/gpu.sh --dry-run: the code paths, not a
# measurement); fp16 needs a GPU there (CPU autocast is bfloat16 only on older torch).
import argparse
import contextlib
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# the data reader, the models and their batches are train_torch.py's (the CPU bench's peer)
from train_torch import BATCH, build, idx

LR = 0.05


def load(split, model, limit=0):
    """(x, y) on the CPU: float32 normalized by the training set's mean and standard
    deviation, as stoke train does ((N, 784) for the MLP, (N, 1, 28, 28) for the CNN);
    the first `limit` samples when limit > 0 (stoke's --limit / --val-limit)."""
    train = idx("train-images-idx3-ubyte.gz")
    if split == "train" and limit > 0:
        train = train[:limit]  # stoke normalizes by the samples it uses
    train = train.astype(np.float64) / 255.0
    mean, std = train.mean(), train.std()
    img = idx(f"{split}-images-idx3-ubyte.gz")
    lab = idx(f"{split}-labels-idx1-ubyte.gz")
    if limit > 0:
        img, lab = img[:limit], lab[:limit]
    x = torch.from_numpy(img.astype(np.float32) / 255.0)
    x = (x - mean) / std
    x = x.reshape(-1, 784) if model == "mlp" else x.unsqueeze(1)
    return x.float().contiguous(), torch.from_numpy(lab.astype(np.int64))


def setup(device):
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        torch.cuda.set_device(dev)
    return dev


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def grad_scaler(dev, enabled):
    """A GradScaler for fp16 (torch.amp.GradScaler from torch 2.3, else torch.cuda.amp's);
    a disabled one otherwise (its calls pass the loss and step through)."""
    if enabled and dev.type != "cuda":
        raise SystemExit("fp16 with GradScaler needs a CUDA device")
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(dev.type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Trainer:
    """A model, its optimizer and the training step at one precision."""

    def __init__(self, model, precision, dev, channels_last=False, seed=1):
        torch.manual_seed(seed)
        self.dev = dev
        self.net = build(model).to(dev)
        self.cl = channels_last
        if channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=LR, momentum=0.9)
        self.dtype = AUTOCAST[precision]
        self.scaler = grad_scaler(dev, precision == "fp16")

    def autocast(self):
        if self.dtype is None:  # fp32 (TF32 on the GPU): no autocast at all
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.dev.type, dtype=self.dtype)

    def prep(self, xb):
        return xb.contiguous(memory_format=torch.channels_last) if self.cl else xb

    def step(self, xb, yb):
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss = F.cross_entropy(self.net(self.prep(xb)), yb)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()

    def accuracy(self, x, y):
        self.net.eval()
        correct = torch.zeros((), dtype=torch.int64, device=self.dev)
        with torch.no_grad(), self.autocast():
            for i in range(0, len(x), 1000):
                correct += (self.net(self.prep(x[i:i + 1000])).argmax(1) == y[i:i + 1000]).sum()
        self.net.train()
        return correct.item() / len(x)  # .item() waits for the GPU


def timed_windows(dev, run, warmup, steps, repeats, batch):
    """The best of `repeats` windows of `steps` steps, in samples/s, after `warmup`."""
    run(warmup)
    best = 0.0
    for _ in range(repeats):
        sync(dev)
        t0 = time.perf_counter()
        run(steps)
        sync(dev)
        best = max(best, steps * batch / (time.perf_counter() - t0))
    return best


def speed_resident(args, dev, b):
    x, y = load("train", args.model, args.limit)
    x, y = x.to(dev), y.to(dev)
    g = torch.Generator(device=dev).manual_seed(1)
    results = []
    for cl in ((False, True) if args.model == "cnn" else (False,)):
        tr = Trainer(args.model, args.precision, dev, cl)
        state = {"perm": torch.randperm(len(x), generator=g, device=dev), "pos": 0}

        def run(n):
            for _ in range(n):
                if state["pos"] + b > len(x):  # a new epoch's order (full batches only)
                    state["perm"] = torch.randperm(len(x), generator=g, device=dev)
                    state["pos"] = 0
                j = state["perm"][state["pos"]:state["pos"] + b]
                tr.step(x[j], y[j])
                state["pos"] += b
        rate = timed_windows(dev, run, args.warmup, args.steps, args.repeats, b)
        results.append((rate, "data resident on the device" + (", channels_last" if cl else "")))
        del tr
    return max(results)


def speed_loader(args, dev, b):
    x, y = load("train", args.model, args.limit)
    pin = dev.type == "cuda"
    results = []
    for workers in (int(w) for w in args.workers.split(",")):
        tr = Trainer(args.model, args.precision, dev)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x, y), batch_size=b, shuffle=True, drop_last=True,
            pin_memory=pin, num_workers=workers, persistent_workers=workers > 0,
            generator=torch.Generator().manual_seed(1))
        state = {"it": iter(loader)}

        def run(n):
            for _ in range(n):
                try:
                    xb, yb = next(state["it"])
                except StopIteration:
                    state["it"] = iter(loader)
                    xb, yb = next(state["it"])
                tr.step(xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True))
        rate = timed_windows(dev, run, args.warmup, args.steps, args.repeats, b)
        results.append((rate, f"DataLoader(TensorDataset on the CPU, num_workers={workers}"
                              f"{', pin_memory=True' if pin else ''}), non_blocking copies"))
        del state, loader, tr
    return max(results)


def speed(args, dev):
    b = args.batch or BATCH[args.model]
    rate, cfg = (speed_resident if args.feed == "resident" else speed_loader)(args, dev, b)
    print(f"speed {rate:.1f}")
    print(f"config {cfg}")


def to_target(args, dev):
    b = args.batch or BATCH[args.model]
    x, y = load("train", args.model, args.limit)
    tx, ty = load("t10k", args.model, args.val_limit)
    x, y, tx, ty = x.to(dev), y.to(dev), tx.to(dev), ty.to(dev)
    tr = Trainer(args.model, args.precision, dev, args.channels_last, args.seed)
    g = torch.Generator(device=dev).manual_seed(args.seed)
    reached = math.nan
    sync(dev)
    t0 = time.perf_counter()
    for epoch in range(1, args.max_epochs + 1):
        perm = torch.randperm(len(x), generator=g, device=dev)
        for i in range(0, len(x), b):  # the last batch is smaller (no drop_last), as stoke's
            j = perm[i:i + b]
            tr.step(x[j], y[j])
        acc = tr.accuracy(tx, ty)
        t = time.perf_counter() - t0
        print(f"epoch {epoch} seconds {t:.3f} test_accuracy {acc:.4f}", flush=True)
        if acc >= args.target:
            reached = t
            break
    print(f"to_target_seconds {reached:.3f}")


def check(args, dev):
    print(f"torch_version {torch.__version__}")
    print(f"torch_cuda {torch.version.cuda or 'none (a CPU-only build)'}")
    if dev.type != "cuda":
        print("torch_device_name CPU (" + (_cpu_name() or "?") + ")")
        return
    if not torch.cuda.is_available():
        print(f"torch {torch.__version__} has no CUDA device (torch.version.cuda = "
              f"{torch.version.cuda}; torch.cuda.is_available() is False)", file=sys.stderr)
        sys.exit(1)
    p = torch.cuda.get_device_properties(dev)
    print(f"torch_cudnn {torch.backends.cudnn.version()}")
    print(f"torch_device_name {p.name}")
    print(f"torch_device_cc {p.major}.{p.minor}")
    print(f"torch_device_sms {p.multi_processor_count}")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=("check", "speed", "to-target"))
    p.add_argument("model", nargs="?", choices=("cnn", "mlp"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--feed", choices=("resident", "loader"), default="resident")
    p.add_argument("--workers", default="0,2,4", help="DataLoader num_workers to try")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=0, help="default: the model's (128, 256)")
    p.add_argument("--limit", type=int, default=0, help="first N training samples")
    p.add_argument("--val-limit", type=int, default=0, help="first N test samples")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-epochs", type=int, default=6)
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU runs)")
    args = p.parse_args()
    if args.command != "check" and args.model is None:
        p.error("MODEL (cnn or mlp) is required")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = setup(args.device) if args.command != "check" else torch.device(args.device)
    {"check": check, "speed": speed, "to-target": to_target}[args.command](args, dev)


if __name__ == "__main__":
    main()
