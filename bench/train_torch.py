# train_torch.py: PyTorch's side of bench/train_bench.sh (the peer stoke is measured against).
#
# Fashion-MNIST from the gzip IDX files, held in memory as normalized float32 tensors;
# the reference CNN (conv 3x3 32 pad 1, ReLU, max-pool 2, conv 3x3 64 pad 1, ReLU,
# max-pool 2, flatten, linear 3136->128, ReLU, linear 128->10; batch 128) and the MLP
# 784-512-512-10 (ReLU; batch 256); SGD momentum 0.9, cross-entropy. Commands:
#
#   train_torch.py sgemm [--repeats R]
#       torch.mm at 1024^3 with OpenBLAS on 1 and 2 threads: "sgemm_t1 GFLOP/s" lines.
#   train_torch.py speed MODEL [--steps N] [--repeats R] [--bf16]
#       training samples/s of MODEL (cnn or mlp) for each configuration a user would try:
#       torch.set_num_threads 1 or 2, OpenBLAS's own pool at 1 thread or its default (it
#       ignores torch.set_num_threads: Debian's torch links libopenblas0-pthread), and for
#       the CNN NCHW or channels_last. Warm-up steps, then R windows of N steps; the best
#       window is printed ("speed_cnn_t2_b2_cl1 samples/s").
#   train_torch.py rate MODEL --threads T|0 --samples N [--bf16]
#       what a training script gets at a thread count under the load of the moment
#       (bench/contention.sh): 3 warm-up steps, then N samples timed as one window (not
#       the best of several, which would hide a collapse); T = 0 leaves torch at its
#       default thread count. "rate samples/s threads" is printed.
#   train_torch.py blas
#       the OpenBLAS core torch loaded and whether it is a fallback far below this CPU:
#       "peer_openblas CORE FIT [OPENBLAS_CORETYPE=...]" (FIT as `stoke probe` judges it).
#   train_torch.py to90 MODEL --threads T --blas-threads B [--channels-last] [--lr LR]
#                        [--max-epochs E] [--target A]
#       trains from a seeded initialization, evaluates on the 10,000 test images after
#       every epoch and prints each epoch's wall time since the first step (training +
#       evaluation) and test accuracy, then "to90_seconds S" at the first evaluation with
#       accuracy >= A (default 0.90), or "to90_seconds nan" if E epochs never reach it.
#
# OPENBLAS_CORETYPE is read by OpenBLAS when it loads, so bench/train_bench.sh runs this
# script once with the machine's value and once without it. Debian's OpenBLAS picks its
# kernels by CPU model and falls back to SSE3 ones (Prescott) on models it does not
# know, which would make this peer several times slower than it can be: every command
# first prints the core and its fit (`stoke probe --json`, run in the same environment,
# judges it; --stoke names the binary, default out/release/stoke) and warns on stderr
# when the core is a fallback.
import argparse
import ctypes
import gzip
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = os.environ.get("STOKE_BENCH_DATA", "/usr/share/datasets/fashion-mnist")
BATCH = {"cnn": 128, "mlp": 256}
LR = {"cnn": 0.05, "mlp": 0.05}


def idx(name):
    with gzip.open(f"{DATA}/{name}", "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, model):
    # Normalized by the training set's mean and standard deviation, as stoke train does.
    train = idx("train-images-idx3-ubyte.gz").astype(np.float64) / 255.0
    mean, std = train.mean(), train.std()
    x = torch.from_numpy(idx(f"{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    x = (x - mean) / std
    x = x.reshape(-1, 784) if model == "mlp" else x.unsqueeze(1)  # (N, 784) or (N, 1, 28, 28)
    y = torch.from_numpy(idx(f"{split}-labels-idx1-ubyte.gz").astype(np.int64))
    return x.contiguous(), y


def build(model):
    if model == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def forward_flops(model):
    """FLOPs of one sample's forward pass: 2 per multiply-add of the convolutions and
    linear layers, counted from the shapes (bias, ReLU, pooling, loss not counted)."""
    if model == "cnn":
        macs = 28 * 28 * 32 * (1 * 3 * 3) + 14 * 14 * 64 * (32 * 3 * 3) + 3136 * 128 + 128 * 10
    else:
        macs = 784 * 512 + 512 * 512 + 512 * 10
    return 2 * macs


def first_layer_flops(model):
    """FLOPs of the first layer's forward product: its input gradient, which would cost
    as much, is never computed (the input is data), so a training step is 3 x forward
    less this (stoke_graph_step_flops counts the same way)."""
    return 2 * (28 * 28 * 32 * (1 * 3 * 3) if model == "cnn" else 784 * 512)


def openblas():
    """The OpenBLAS that torch loaded (same instance, so its thread count is torch's)."""
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libopenblas" in line}
    # NumPy's wheels bundle an OpenBLAS whose symbols carry a suffix (64_), and PyTorch's
    # PyPI wheels compute on MKL: only a library with the plain API is torch's.
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib
    return None


def core_fit(core, stoke):
    """(fit, advice, reason) of the OpenBLAS core torch loaded, as `stoke probe` judges
    it: stoke links the same library, so in the same environment it loads the same core
    (checked: a different core is reported as unjudged rather than guessed)."""
    try:
        out = subprocess.run([stoke, "probe", "--json"], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        o = json.loads(out).get("openblas", {})
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return "unknown", "", f"no `{stoke} probe --json` to judge it ({e.__class__.__name__})"
    if o.get("core") != core:
        return "unknown", "", f"stoke's OpenBLAS loaded {o.get('core')}, torch's {core}"
    advice = f"OPENBLAS_CORETYPE={o['coretype']}" if o.get("coretype") else ""
    return o.get("fit", "unknown"), advice, o.get("reason", "")


def set_threads(blas, threads, blas_threads):
    torch.set_num_threads(threads)
    if blas is not None:
        blas.openblas_set_num_threads(blas_threads)


def make_step(net, opt, bf16):
    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def new_model(model, channels_last, lr, seed=1):
    torch.manual_seed(seed)
    net = build(model)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    return net, opt


def batch(x, y, perm, i, b, channels_last):
    j = perm[i:i + b]
    xb = x[j]
    if channels_last:
        xb = xb.contiguous(memory_format=torch.channels_last)
    return xb, y[j]


def stepper(x, y, perm, b, channels_last, step):
    """run(n): n training steps on the next batches of perm, wrapping around."""
    pos = 0

    def run(n):
        nonlocal pos
        for _ in range(n):
            if pos + b > len(x):
                pos = 0
            xb, yb = batch(x, y, perm, pos, b, channels_last)
            step(xb, yb)
            pos += b
    return run


def speed(args, blas):
    x, y = load("train", args.model)
    b = BATCH[args.model]
    configs = []
    for threads, blas_threads in ((1, 1), (1, 2), (2, 2)):
        for cl in ((False, True) if args.model == "cnn" else (False,)):
            configs.append((threads, blas_threads, cl))
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(len(x), generator=g)
    per_window = args.steps * b
    for threads, blas_threads, cl in configs:
        set_threads(blas, threads, blas_threads)
        net, opt = new_model(args.model, cl, LR[args.model])
        run = stepper(x, y, perm, b, cl, make_step(net, opt, args.bf16))
        run(args.warmup)
        best = 0.0
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            run(args.steps)
            best = max(best, per_window / (time.perf_counter() - t0))
        tag = f"{args.model}_t{threads}_b{blas_threads}_cl{int(cl)}{'_bf16' if args.bf16 else ''}"
        print(f"speed_{tag} {best:.0f}", flush=True)
    print(f"flops_fwd_{args.model} {forward_flops(args.model)}")
    print(f"flops_first_{args.model} {first_layer_flops(args.model)}")


def rate(args, blas):
    x, y = load("train", args.model)
    b = BATCH[args.model]
    if args.threads > 0:
        set_threads(blas, args.threads, args.threads)
    net, opt = new_model(args.model, False, LR[args.model])
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    run = stepper(x, y, perm, b, False, make_step(net, opt, args.bf16))
    run(3)
    steps = max(1, args.samples // b)
    t0 = time.perf_counter()
    run(steps)
    print(f"rate {steps * b / (time.perf_counter() - t0):.0f} {torch.get_num_threads()}",
          flush=True)


def evaluate(net, x, y, channels_last):
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            xb = x[i:i + 1000]
            if channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            correct += (net(xb).argmax(1) == y[i:i + 1000]).sum().item()
    return correct / len(x)


def to90(args, blas):
    x, y = load("train", args.model)
    tx, ty = load("t10k", args.model)
    b = BATCH[args.model]
    set_threads(blas, args.threads, args.blas_threads)
    net, opt = new_model(args.model, args.channels_last, args.lr or LR[args.model], args.seed)
    step = make_step(net, opt, args.bf16)
    g = torch.Generator().manual_seed(args.seed)
    reached = math.nan
    t0 = time.perf_counter()
    for epoch in range(1, args.max_epochs + 1):
        net.train()
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), b):  # the last batch is smaller (no drop_last)
            step(*batch(x, y, perm, i, b, args.channels_last))
        net.eval()
        acc = evaluate(net, tx, ty, args.channels_last)
        t = time.perf_counter() - t0
        print(f"epoch {epoch} seconds {t:.2f} test_accuracy {acc:.4f}", flush=True)
        if acc >= args.target:
            reached = t
            break
    print(f"to90_seconds {reached:.2f}")


def sgemm(args, blas):
    n = 1024
    a, b_ = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    for threads in (1, 2):
        set_threads(blas, threads, threads)
        for _ in range(5):
            torch.mm(a, b_, out=c)
        best = 0.0
        for _ in range(args.repeats):
            k = 20
            t0 = time.perf_counter()
            for _ in range(k):
                torch.mm(a, b_, out=c)
            best = max(best, 2 * n ** 3 * k / (time.perf_counter() - t0) / 1e9)
        print(f"sgemm_t{threads} {best:.1f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=("sgemm", "speed", "to90", "blas", "rate"))
    p.add_argument("model", nargs="?", choices=("cnn", "mlp"))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--samples", type=int, default=12800)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--blas-threads", type=int, default=2)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--bf16", action="store_true", help="torch.autocast(cpu, bfloat16)")
    p.add_argument("--lr", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-epochs", type=int, default=10)
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--stoke", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "out", "release", "stoke"),
                   help="the stoke binary whose probe judges OpenBLAS's core")
    args = p.parse_args()
    if args.command not in ("sgemm", "blas") and args.model is None:
        p.error("MODEL (cnn or mlp) is required")
    blas = openblas()
    core = blas.openblas_get_corename().decode() if blas is not None else "none"
    fit, advice, why = core_fit(core, args.stoke) if blas is not None else ("unknown", "", "")
    print(f"# torch {torch.__version__}, OpenBLAS core {core} ({fit}), "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    if fit == "fallback":
        print(f"warning: this PyTorch runs on a fallback OpenBLAS core, far below its best: "
              f"{why}", file=sys.stderr, flush=True)
    if args.command == "blas":
        print(f"peer_openblas {core} {fit} {advice}".rstrip())
        return
    {"sgemm": sgemm, "speed": speed, "to90": to90, "rate": rate}[args.command](args, blas)


if __name__ == "__main__":
    main()
