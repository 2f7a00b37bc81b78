"""loader_torch.py DATA [--dry-run]: the GPU kit's loader step (scripts/kit/run.sh).
stoke.Loader(device="cuda") feeds a PyTorch training loop on the GPU: the MLP
784-512-512-10 on Fashion-MNIST (DATA, the IDX folder), batch 256, SGD momentum 0.9,
lr 0.05, two epochs, then the test accuracy with a second loader on the test split.
The batches arrive in device memory (DLPack, on the loader's stream); the script checks
they do, and prints samples/s, the share of the time spent waiting for a batch, the
last loss and the test accuracy.

Without PyTorch on a GPU (the dry run on stoke's CPU doubles) the loader is still built
with device="cuda", which opens its device path (pinned ring, copies on a stream), its
decision is printed, and the script exits 77: a skip, not a pass (so does --dry-run)."""
import sys
import time

import stoke

try:
    import torch
except ImportError:
    torch = None


def main():
    data = sys.argv[1]
    dry = "--dry-run" in sys.argv[2:]
    train = stoke.Dataset(data, split="train")
    test = stoke.Dataset(data, split="test")
    gpu = torch is not None and torch.cuda.is_available() and not dry
    out = "torch" if gpu else "numpy"
    loader = stoke.Loader(train, batch_size=256, shuffle=True, seed=1, drop_last=True,
                          transforms=[stoke.Normalize()], device="cuda", output=out)
    print(f"loader: {train!r}; workers {loader.workers}, prefetch {loader.prefetch} "
          f"({loader.decision['workers'].get('reason', '')})")
    if not gpu:
        loader.close()
        why = "the dry run" if dry else "PyTorch with a GPU is not installed here"
        print(f"skip: the PyTorch loop ({why}); stoke.Loader(device='cuda') opened its "
              "device path")
        return 77
    dev = torch.device("cuda:0")
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    seen, wait, loss = 0, 0.0, float("nan")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for epoch in range(2):
        loader.set_epoch(epoch)
        it = iter(loader)
        while True:
            w = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - w
            if x.device.type != "cuda" or y.device.type != "cuda":
                print(f"FAILED: a batch arrived on {x.device} / {y.device}, not the GPU")
                return 1
            opt.zero_grad(set_to_none=True)
            out_ = model(x)
            loss_t = torch.nn.functional.cross_entropy(out_, y)
            loss_t.backward()
            opt.step()
            seen += x.shape[0]
    loss = float(loss_t)  # waits for the GPU: the time below includes every step
    torch.cuda.synchronize()
    took = time.perf_counter() - t0
    correct = total = 0
    with torch.no_grad():
        norm = loader.decision["normalize"]["value"]  # the training set's statistics
        tl = stoke.Loader(test, batch_size=1000, device="cuda",
                          transforms=[stoke.Normalize(mean=norm["mean"], std=norm["std"])])
        for x, y in tl:
            correct += int((model(x).argmax(1) == y).sum())
            total += y.shape[0]
        tl.close()
    loader.close()
    print(f"loader: {seen / took:,.0f} samples/s over {seen} samples on {torch.cuda.get_device_name(0)}, "
          f"waiting for batches {100 * wait / took:.1f}% of {took:.2f} s; last loss {loss:.4f}; "
          f"test accuracy {100 * correct / max(total, 1):.2f}% ({total} images)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
