"""image_pipeline_torch.py FOLDER SECONDS [WORKERS...] - torchvision's DataLoader on an
image folder as a new user writes it for an image classifier: ImageFolder +
RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize (ImageNet's
statistics), batch 64, shuffled, persistent workers, pin_memory off. For each worker
count (default 0 1 2): a warm-up (the workers' start and 2 batches), then SECONDS of
batches across epochs. Prints "torch_wN IMAGES_PER_S" and "torchcpu_wN
IMAGES_PER_CPU_S" (this process's and its workers' CPU seconds) per count. Debian's
python3-torchvision 0.14.1 goes with Debian's torch 1.13."""
import os
import sys
import time

import torch
import torchvision
from torchvision import datasets, transforms


def run(folder, seconds, workers):
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(folder, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0, pin_memory=False)
    it = iter(dl)

    def batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:  # the next epoch, on the same persistent workers
            it = iter(dl)
            return next(it)

    for _ in range(2):
        batch()
    images, t0, c0 = 0, time.perf_counter(), cpu_seconds(it)
    while time.perf_counter() - t0 < seconds:
        images += batch()[0].shape[0]
    wall, cpu = time.perf_counter() - t0, cpu_seconds(it) - c0
    return images / wall, images / cpu if cpu > 0 else 0.0


def cpu_seconds(it):
    """CPU seconds of this process and its DataLoader workers (persistent: the same
    processes across epochs), from /proc: the per-core rate on a shared machine."""
    tick = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for w in getattr(it, "_workers", []):
        with open(f"/proc/{w.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def main():
    folder, seconds = sys.argv[1], float(sys.argv[2])
    counts = [int(w) for w in sys.argv[3:]] or [0, 1, 2]
    print(f"# torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} intra-op threads", flush=True)
    for w in counts:
        wall, cpu = run(folder, seconds, w)
        print(f"torch_w{w} {wall:.1f}\ntorchcpu_w{w} {cpu:.1f}", flush=True)


if __name__ == "__main__":
    main()
