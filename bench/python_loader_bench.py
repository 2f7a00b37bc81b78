# python_loader_bench.py: stoke.Loader against torch.utils.data.DataLoader inside a real
# PyTorch training loop, in the same run (bench/python_loader_bench.sh runs it).
#
# The reference CNN (conv 3x3 32, ReLU, pool, conv 3x3 64, ReLU, pool, 3136->128->10) on
# Fashion-MNIST's 60,000 training images held in memory, SGD momentum 0.9; per sample the
# same augmentation on both sides: ToTensor, RandomCrop(28, padding=2),
# RandomHorizontalFlip, Normalize; batches of --batch-size (256), shuffled, drop_last.
#   DataLoader: num_workers 0, 1, 2; persistent workers, prefetch_factor 4 and pin_memory
#     as the seeds set them. torchvision when installed, else the same
#     transforms written with torch ops as torchvision's tensor transforms do them.
#   stoke.Loader: workers "auto", 0, 1, 2.
# Each configuration: a fresh loader and a fresh model from the same seed, --warmup steps
# (worker start-up, first allocations) not timed, then --steps timed steps. Measured:
# samples/s, and the data-wait share (time blocked in next() / wall time of the steps).
# --rounds (3) times, the configurations in turn; the median round is reported with the
# spread of the rounds. A second table iterates each loader alone (no model; at least
# --steps batches and 2 s): the loader's own throughput, without the model competing for
# the cores.
#
# The model and the loader's workers share the machine's cores: the header prints
# torch.get_num_threads() (--threads sets it) and OpenBLAS's core, which Debian's torch
# uses for its matrix multiplies with its own thread pool.
import argparse
import ctypes
import gzip
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import stoke

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's training set, in the [0, 1] scale

try:
    import torchvision.transforms as T
except ImportError:
    T = None


def idx(path, name):
    with gzip.open(os.path.join(path, name), "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Augmented(Dataset):
    """Fashion-MNIST with the augmentation applied per sample, as users write it."""

    def __init__(self, path):
        self.images = torch.from_numpy(idx(path, "train-images-idx3-ubyte.gz").copy())
        self.labels = torch.from_numpy(idx(path, "train-labels-idx1-ubyte.gz").astype(np.int64))
        if T is not None:
            self.tf = T.Compose([T.RandomCrop(28, padding=2), T.RandomHorizontalFlip(),
                                 T.Normalize((MEAN,), (STD,))])

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i].unsqueeze(0).float().div(255)  # ToTensor
        if T is not None:
            return self.tf(x), self.labels[i]
        x = F.pad(x, (2, 2, 2, 2))  # RandomCrop(28, padding=2)
        top, left = torch.randint(0, 5, (2,)).tolist()
        x = x[:, top:top + 28, left:left + 28]
        if torch.rand(1).item() < 0.5:  # RandomHorizontalFlip
            x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[i]  # Normalize


def torch_loader(ds, args, workers):
    # The seeds' settings; pin_memory is a no-op without CUDA.
    extra = dict(persistent_workers=True, prefetch_factor=4) if workers > 0 else {}
    return DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True,
                      num_workers=workers, pin_memory=True, **extra)


def stoke_loader(args, workers):
    return stoke.Loader(stoke.Dataset(args.data), batch_size=args.batch_size, shuffle=True,
                        seed=0, drop_last=True, workers=workers,
                        transforms=[stoke.RandomCrop(28, pad=2), stoke.HFlip(),
                                    stoke.Normalize(mean=MEAN, std=STD)],
                        device=args.device)


def batches(loader):
    """Endless batches, epoch after epoch, as a training loop takes them."""
    epoch = 0
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def cnn():
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def train(loader, args):
    """(samples/s, data-wait share) over args.steps timed steps."""
    dev = args.device
    net = cnn().to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    it = batches(loader)
    wait = n = 0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            t0, wait, n = time.perf_counter(), 0.0, 0
        tw = time.perf_counter()
        x, y = next(it)
        wait += time.perf_counter() - tw
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
        n += x.shape[0]
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return n / wall, wait / wall


def alone(loader, args):
    """samples/s of the loader iterated without a model: at least args.steps batches and
    2 seconds, so a fast loader is timed over more than a few milliseconds."""
    it = batches(loader)
    for _ in range(args.warmup):
        next(it)
    n, steps, t0 = 0, 0, time.perf_counter()
    while steps < args.steps or time.perf_counter() - t0 < 2.0:
        n += next(it)[0].shape[0]
        steps += 1
    return n / (time.perf_counter() - t0)


def openblas_core():
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "libopenblas" in line})
    if not paths:
        return "none"
    lib = ctypes.CDLL(paths[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def cpu_model():
    """/proc/cpuinfo's model name, with family and model (a VM may say only "AMD EPYC")."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                info.setdefault(k, v)
    name = info.get("model name", platform.processor() or "unknown")
    return f"{name} (family {info.get('cpu family', '?')} model {info.get('model', '?')})"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--steps", type=int, default=150, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=3,
                   help="each configuration this many times, in turn")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"# torch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}, "
          f"OpenBLAS core {openblas_core()} (OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', 'unset')}), device {args.device}, "
          f"transforms by {'torchvision' if T is not None else 'torch ops (no torchvision)'}")
    print(f"# batch {args.batch_size}, {args.warmup} warm-up steps, {args.steps} timed steps "
          f"per configuration and round, {args.rounds} rounds", flush=True)

    ds = Augmented(args.data)
    configs = [(f"DataLoader num_workers={w}", lambda w=w: torch_loader(ds, args, w))
               for w in (0, 1, 2)]
    configs += [(f"stoke.Loader workers={w!r}", lambda w=w: stoke_loader(args, w))
                for w in ("auto", 0, 1, 2)]

    # Rounds: every configuration once per round, in turn, so the other jobs of a shared
    # machine slow all of them alike. Each reports its median round, with the spread of
    # its rounds beside it: the best round would favour whichever configuration happened
    # to run before the machine got busier.
    runs = {name: [] for name, _ in configs}
    notes = {}
    for r in range(args.rounds):
        for name, make in configs:
            loader = make()
            sps, share = train(loader, args)
            runs[name].append((sps, share))
            if isinstance(loader, stoke.Loader):
                notes[name] = f"workers={loader.workers}"
            print(f"  round {r + 1}: {name:34} {sps:6.0f} samples/s, data wait "
                  f"{100 * share:4.1f}%", file=sys.stderr, flush=True)
            del loader
    alone_runs = {name: [] for name, _ in configs}
    for r in range(args.rounds):
        for name, make in configs:
            loader = make()
            alone_runs[name].append(alone(loader, args))
            del loader

    def median(rs):  # the middle round (the upper middle for an even count)
        return sorted(rs)[len(rs) // 2]

    def ratio(v):
        t = max((n for n in v if n.startswith("DataLoader")), key=v.get)
        s = max((n for n in v if n.startswith("stoke")), key=v.get)
        print(f"{'stoke best / DataLoader best':34} {v[s] / v[t]:10.2f}x  ({s} / {t})")

    print(f"\nTraining the reference CNN (forward, backward, SGD step), batch {args.batch_size}, "
          f"median of {args.rounds} rounds")
    print(f"{'loader':34} {'samples/s':>10} {'rounds':>13} {'data wait':>10}")
    mid = {}
    for name, rs in runs.items():
        sps, share = median(rs)
        mid[name] = sps
        spread = f"{min(rs)[0]:.0f}-{max(rs)[0]:.0f}"
        print(f"{name:34} {sps:10.0f} {spread:>13} {100 * share:9.1f}%  {notes.get(name, '')}")
    ratio(mid)

    print(f"\nThe loader alone (no model), batch {args.batch_size}, median of {args.rounds} rounds")
    print(f"{'loader':34} {'samples/s':>10} {'rounds':>17}")
    mid = {}
    for name, rs in alone_runs.items():
        mid[name] = median(rs)
        print(f"{name:34} {mid[name]:10.0f} {f'{min(rs):.0f}-{max(rs):.0f}':>17}")
    ratio(mid)

if __name__ == "__main__":
    main()
