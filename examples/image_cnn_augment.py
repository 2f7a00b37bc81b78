"""An image CNN on Fashion-MNIST with crop, flip and color-jitter augmentation done by
stoke.Loader, trained in mixed precision.

    python3 examples/image_cnn_augment.py [--epochs 2] [--batch-size 256]

Precision, chosen as the GPU optimization guides do: on a GPU of compute capability 8.0 or
more (A100, H100, RTX 30/40) bf16; on older GPUs fp16 with a gradient scaler; on the CPU
bf16 autocast. The loader delivers its batches in that dtype (dtype="bf16"/"fp16"), already
on the device, so the step does no conversion or copy of its own.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import stoke

DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
MEAN, STD = 0.2860, 0.3530


def precision(device):
    if device == "cuda" and torch.cuda.get_device_capability()[0] < 8:
        return torch.float16
    return torch.bfloat16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=DATA)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", default="auto")
    args = p.parse_args()
    workers = args.workers if args.workers == "auto" else int(args.workers)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    amp_dtype = precision(device)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    dtype = "bf16" if amp_dtype == torch.bfloat16 else "fp16"
    print(f"device {device}, mixed precision {dtype}")

    train = stoke.Loader(stoke.Dataset(args.data), batch_size=args.batch_size, shuffle=True,
                         seed=0, drop_last=True, workers=workers, dtype=dtype, device=device,
                         transforms=[stoke.RandomCrop(28, pad=2), stoke.HFlip(),
                                     stoke.ColorJitter(0.2, 0.2),
                                     stoke.Normalize(mean=MEAN, std=STD)])
    test = stoke.Loader(stoke.Dataset(args.data, split="test"), batch_size=1000,
                        dtype=dtype, device=device,
                        transforms=[stoke.Normalize(mean=MEAN, std=STD)])

    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # fp16 needs loss scaling against gradient underflow; bf16 has fp32's range and not.
    scaler = torch.cuda.amp.GradScaler(enabled=amp_dtype == torch.float16)

    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        model.train()
        t0, seen, loss_sum = time.perf_counter(), 0, 0.0
        for x, y in train:
            with torch.autocast(device, dtype=amp_dtype):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.item() * len(y)
            seen += len(y)
        elapsed = time.perf_counter() - t0

        model.eval()
        correct = total = 0
        with torch.no_grad(), torch.autocast(device, dtype=amp_dtype):
            for x, y in test:
                correct += (model(x).argmax(1) == y).sum().item()
                total += len(y)
        s = train.stats()
        print(f"epoch {epoch}: {seen / elapsed:,.0f} samples/s, loss {loss_sum / seen:.4f}, "
              f"test acc {correct / total:.4f}, data wait {s['wait_avg_ms']:.2f} ms/batch "
              f"(p95 {s['wait_p95_ms']:.2f}) with {s['workers']} workers")


if __name__ == "__main__":
    main()
