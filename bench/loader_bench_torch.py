# loader_bench_torch.py IDX_DIR EPOCHS: PyTorch's side of bench/loader_bench.sh.
# Fashion-MNIST's training set held in memory; per sample the same work as stoke's:
# ToTensor (u8 -> float32 / 255), pad 2 + random 28x28 crop, random horizontal flip,
# normalize; batch 256, shuffled; DataLoader with 0, 1 and 2 persistent workers. Then
# the same with no transform (float32 samples as they are). torchvision is not in
# Debian's python3-torch, so the transforms are written with torch ops, as
# torchvision's tensor transforms do them. Prints "name samples_per_second" lines.
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

path, epochs = sys.argv[1], int(sys.argv[2])


def idx(name):
    with gzip.open(f"{path}/{name}", "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


images = torch.from_numpy(idx("train-images-idx3-ubyte.gz").copy())
labels = torch.from_numpy(idx("train-labels-idx1-ubyte.gz").astype(np.int64))
MEAN, STD = 0.2860, 0.3530


class Augmented(Dataset):
    def __len__(self):
        return len(images)

    def __getitem__(self, i):
        x = images[i].unsqueeze(0).float().div(255)  # ToTensor
        x = F.pad(x, (2, 2, 2, 2))  # RandomCrop(28, padding=2)
        top = int(torch.randint(0, 5, (1,)))
        left = int(torch.randint(0, 5, (1,)))
        x = x[:, top : top + 28, left : left + 28]
        if float(torch.rand(1)) < 0.5:  # RandomHorizontalFlip
            x = x.flip(-1)
        x = (x - MEAN) / STD  # Normalize
        return x, labels[i]


class Plain(Dataset):
    def __init__(self):
        self.x = images.unsqueeze(1).float().div(255)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], labels[i]


def measure(ds, workers):
    dl = DataLoader(ds, batch_size=256, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0)
    for _ in dl:  # warm-up epoch: workers started
        pass
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for x, _y in dl:
            n += x.shape[0]
    return n / (time.perf_counter() - t0)


torch.manual_seed(1)
for w in (0, 1, 2):
    print(f"torch_transform_w{w} {measure(Augmented(), w):.0f}", flush=True)
for w in (0, 1, 2):
    print(f"torch_plain_w{w} {measure(Plain(), w):.0f}", flush=True)
