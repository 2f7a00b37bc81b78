"""Datasets, transforms and the loader (docs/python.md).

The loader is stoke's C loader: worker threads read and transform samples into a ring
of batch buffers without the GIL, and each batch reaches Python as a tensor over that
buffer (DLPack, no copy). The buffer goes back to the loader only when the last tensor
viewing it is freed."""
import os
import sys
import warnings

from . import _stoke
from ._stoke import ArgumentError, UnavailableError

__all__ = ["Dataset", "Loader", "Resize", "RandomCrop", "RandomResizedCrop", "ResizeShorter",
           "CenterCrop", "HFlip",
           "ColorJitter", "Normalize"]

try:  # torch is optional: without it batches are NumPy arrays
    import torch
except ImportError:  # pragma: no cover - exercised where torch is absent
    torch = None


class Dataset:
    """A dataset in a format `stoke data` reads: an IDX directory or file, NPY, HDF5,
    a folder of images per class, or stoke packed records (docs/data.md).

    input, target: HDF5 dataset names; split: "train"/"test" for IDX directories, a
    subdirectory for image folders; targets_path: the NPY targets file; image_size:
    (height, width) every image is resized to; channels: 1 or 3; regression: float
    targets are values, not classes; in_memory: read every sample into memory once."""

    def __init__(self, path, input=None, target=None, split=None, targets_path=None,
                 image_size=None, channels=None, regression=False, in_memory=False):
        h = w = 0
        if image_size is not None:
            if isinstance(image_size, int):
                h = w = image_size
            else:
                try:
                    h, w = (int(v) for v in image_size)
                except (TypeError, ValueError):
                    raise ArgumentError(f"image_size={image_size!r}: give (height, width)")
            if h < 1 or w < 1:
                raise ArgumentError(f"image_size={image_size!r}: both must be at least 1")
        if channels not in (None, 1, 3):
            raise ArgumentError(f"channels={channels!r}: 1 or 3")
        self.path = os.fspath(path)
        self.in_memory = bool(in_memory)
        self._d = _stoke.Dataset(self.path, input=input, target=target, split=split,
                                 targets_path=targets_path, height=h, width=w,
                                 channels=channels or 0, regression=bool(regression),
                                 in_memory=bool(in_memory))
        self.info = self._d.info
        if self.info["skipped"]:
            warnings.warn(f"{self.path}: {self.info['skipped']} entries left out, e.g. "
                          f"{self.info['skipped_example']} (docs/formats.md#image-folders)",
                          stacklevel=2)

    def __len__(self):
        return self.info["count"]

    def __repr__(self):
        i = self.info
        return (f"stoke.Dataset({self.path!r}: {i['format']}, {i['count']} samples of "
                f"{i['input_shape']} {i['input_dtype']}, targets {i['target_kind']})")

    def read(self, i):
        """Sample i as stored: (input bytes, target bytes or None)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} of a dataset of {len(self)}")
        return self._d.read(i % len(self))

    def class_counts(self):
        """Samples per class (class targets only)."""
        return self._d.class_counts()


# ---- transforms: each is one op of stoke's fused pipeline (docs/loader.md) ----------

def _size(size, name):
    if isinstance(size, int):
        size = (size, size)
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ArgumentError(f"{name}: size {size!r}: an int or (height, width)")
    if h < 1 or w < 1:
        raise ArgumentError(f"{name}: size {size!r}: both at least 1")
    return h, w


class _Op:
    def op(self, dataset):  # pragma: no cover - every op overrides it
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"stoke.{type(self).__name__}({args})"


class Resize(_Op):
    """Bilinear resize to (height, width) (align_corners=False, no antialias)."""

    def __init__(self, size):
        self.size = _size(size, "Resize")

    def op(self, dataset):
        return {"kind": "resize", "height": self.size[0], "width": self.size[1]}


class RandomCrop(_Op):
    """torchvision's RandomCrop(size, padding=pad): zero padding, then a random crop."""

    def __init__(self, size, pad=0):
        self.size = _size(size, "RandomCrop")
        if int(pad) < 0:
            raise ArgumentError(f"RandomCrop: pad={pad!r} is negative")
        self.pad = int(pad)

    def op(self, dataset):
        return {"kind": "crop", "height": self.size[0], "width": self.size[1], "pad": self.pad}


class RandomResizedCrop(_Op):
    """torchvision's RandomResizedCrop(size, scale, ratio): a window of random area
    (fraction uniform in scale) and aspect (log-uniform in ratio), with its fallback to a
    centre crop, resized to (height, width) with Pillow's filter on uint8 images. Put it
    first: it resamples the image as read."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        self.size = _size(size, "RandomResizedCrop")
        for name, r in (("scale", scale), ("ratio", ratio)):
            if len(r) != 2 or not 0 < float(r[0]) <= float(r[1]):
                raise ArgumentError(f"RandomResizedCrop: {name}={r!r}: (lo, hi), 0 < lo <= hi")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))

    def op(self, dataset):
        return {"kind": "random_resized_crop", "height": self.size[0], "width": self.size[1],
                "scale": list(self.scale), "ratio": list(self.ratio)}


class ResizeShorter(_Op):
    """torchvision's Resize(int): the shorter side to `size`, the aspect kept (Pillow's
    filter on uint8 images when first); CenterCrop after it for evaluation."""

    def __init__(self, size):
        if int(size) < 1:
            raise ArgumentError(f"ResizeShorter: size={size!r} must be at least 1")
        self.size = int(size)

    def op(self, dataset):
        return {"kind": "resize_shorter", "height": self.size}


class CenterCrop(_Op):
    """The centre (height, width) crop (for evaluation)."""

    def __init__(self, size):
        self.size = _size(size, "CenterCrop")

    def op(self, dataset):
        return {"kind": "crop", "height": self.size[0], "width": self.size[1], "center": True}


class HFlip(_Op):
    """Mirror left-right with probability p (torchvision's RandomHorizontalFlip)."""

    def __init__(self, p=0.5):
        if not 0 <= p <= 1:
            raise ArgumentError(f"HFlip: p={p!r} is not a probability")
        self.p = float(p)

    def op(self, dataset):
        # A flip that never happens is no op at all (stoke's op reads p = 0 as 0.5).
        return {"kind": "hflip", "p": self.p} if self.p > 0 else None


class ColorJitter(_Op):
    """torchvision's ColorJitter(brightness, contrast, saturation, hue), in a random order
    per sample as torchvision applies it."""

    def __init__(self, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0):
        for name, v in (("brightness", brightness), ("contrast", contrast),
                        ("saturation", saturation)):
            if v < 0:
                raise ArgumentError(f"ColorJitter: {name}={v!r} is negative")
        if not 0 <= hue <= 0.5:
            raise ArgumentError(f"ColorJitter: hue={hue!r} is outside [0, 0.5]")
        self.brightness, self.contrast = float(brightness), float(contrast)
        self.saturation, self.hue = float(saturation), float(hue)

    def op(self, dataset):
        return {"kind": "color_jitter", "brightness": self.brightness,
                "contrast": self.contrast, "saturation": self.saturation, "hue": self.hue,
                "random_order": True}


class Normalize(_Op):
    """(x - mean) / std per channel, on values in [0, 1]. Without mean and std they are
    measured on the dataset (up to `samples` samples spread over it) when the loader
    starts, and the loader's `decision` says what was found."""

    def __init__(self, mean=None, std=None, samples=10000):
        if (mean is None) != (std is None):
            raise ArgumentError("Normalize: give both mean and std, or neither")
        if std is not None and any(float(s) <= 0 for s in _seq(std)):
            raise ArgumentError(f"Normalize: std={std!r} must be positive")
        self.mean = None if mean is None else [float(m) for m in _seq(mean)]
        self.std = None if std is None else [float(s) for s in _seq(std)]
        self.samples = int(samples)

    def op(self, dataset):
        mean, std = self.mean, self.std
        if mean is None:
            mean, std = dataset._d.channel_stats(self.samples)
        return {"kind": "normalize", "mean": mean, "std": std}


def _seq(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


# ---- the loader ---------------------------------------------------------------------

_DTYPES = {"f32": "f32", "float32": "f32", "fp32": "f32", "bf16": "bf16",
           "bfloat16": "bf16", "fp16": "fp16", "f16": "fp16", "float16": "fp16",
           "u8": "u8", "uint8": "u8"}


def _count(v, name, auto_ok=True):
    if auto_ok and v == "auto":
        return -1
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ArgumentError(f"{name}={v!r}: a count >= 0" + (' or "auto"' if auto_ok else ""))
    return v


def _device(device):
    if device in (None, "cpu"):
        return -1
    s = str(device)
    if s == "cuda":
        return 0
    if s.startswith("cuda:") and s[5:].isdigit():
        return int(s[5:])
    raise ArgumentError(f'device={device!r}: "cpu", "cuda" or "cuda:N"')


class Loader:
    """Batches of a dataset, prefetched by worker threads, as torch tensors (or NumPy
    arrays with output="numpy") over the loader's own memory.

    A pass (`for x, y in loader`) runs one epoch, from its start, and the next pass
    runs the following epoch: set_epoch(e) chooses it, load_state_dict() resumes a
    saved position mid-epoch. The order of an epoch depends on (seed, epoch) only, and
    a batch's bytes on (seed, epoch, sample) only: never on the number of workers."""

    def __init__(self, data, batch_size=64, shuffle=False, seed=0, drop_last=False,
                 transforms=None, workers="auto", prefetch="auto", dtype="f32",
                 layout="NCHW", device="cpu", rank=0, world_size=1, output=None):
        self.dataset = data if isinstance(data, Dataset) else Dataset(data)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ArgumentError(f"batch_size={batch_size!r}: an int >= 1")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64:
            raise ArgumentError(f"seed={seed!r}: an int in [0, 2**64)")
        if not isinstance(world_size, int) or world_size < 1:
            raise ArgumentError(f"world_size={world_size!r}: an int >= 1")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ArgumentError(f"rank={rank!r}: 0 <= rank < world_size ({world_size})")
        if dtype not in _DTYPES:
            raise ArgumentError(f'dtype={dtype!r}: "f32", "bf16", "fp16" or "u8"')
        if layout not in ("NCHW", "NHWC"):
            raise ArgumentError(f'layout={layout!r}: "NCHW" or "NHWC"')
        if output is None:
            output = "torch" if torch is not None else "numpy"
        if output not in ("torch", "numpy"):
            raise ArgumentError(f'output={output!r}: "torch" or "numpy"')
        if output == "torch" and torch is None:
            raise ArgumentError('output="torch" but torch is not installed')
        self._workers = _count(workers, "workers")
        self._prefetch = _count(prefetch, "prefetch")
        if self._prefetch == 0:
            raise ArgumentError("prefetch=0: at least 1 batch in flight, or \"auto\"")
        self._device = _device(device)
        transforms = list(transforms or [])
        for t in transforms:
            if not isinstance(t, _Op):
                raise ArgumentError(f"transforms: {t!r} is not a stoke transform")
        self.transforms = transforms
        self.batch_size, self.shuffle, self.seed = batch_size, bool(shuffle), seed
        self.drop_last, self.rank, self.world_size = bool(drop_last), rank, world_size
        self.dtype, self.layout, self.output = _DTYPES[dtype], layout, output
        if output == "numpy" and self.dtype == "bf16" and transforms:
            raise ArgumentError('dtype="bf16" with output="numpy": NumPy has no bfloat16')
        info = self.dataset.info
        self._sampler = {"batch_size": batch_size, "shuffle": self.shuffle, "seed": seed,
                         "drop_last": self.drop_last, "rank": rank, "world_size": world_size}
        self._len = _stoke.epoch_batches(info["count"], self._sampler)
        ops = [t.op(self.dataset) for t in transforms]
        self._transform = ({"ops": [o for o in ops if o is not None], "dtype": self.dtype,
                            "layout": layout} if transforms else None)
        # What runs: the tuner decides what was left "auto" (the rules `stoke probe`
        # prints), each value with its source and reason. Whether the transform is one
        # cheap pass per sample is the library's rule, the one `stoke train` asks.
        self._cheap = _stoke.transform_one_pass(self.dataset._d, self._transform)
        self.decision = {}
        self._decide()
        for t, o in zip(transforms, ops):
            if isinstance(t, Normalize) and t.mean is None:
                self.decision["normalize"] = {
                    "value": {"mean": o["mean"], "std": o["std"]}, "source": "measured",
                    "reason": f"mean and std of up to {t.samples} samples of the dataset"}
        self._epoch, self._resume = 0, 0
        self._decided = True  # the first pass runs the decision just made
        self._core = None
        self._event = None
        self._pid = os.getpid()
        # Started now: a bad transform or a missing GPU is said here, not at the first
        # batch, and the workers fill the ring while the script builds its model.
        self._open(0, 0)

    # -- the tuner's decision -------------------------------------------------------------

    def _host_threads(self):
        """The threads the script computes on beside the loader, and where that count
        came from: torch's intra-op threads when torch is imported (never imported here
        for it) and batches stay on the CPU; one thread without torch; 0 (unknown: the
        rules, whose GPU machine keeps one CPU for the training loop) when batches go to
        a GPU, which computes."""
        if self._device >= 0:
            return 0, None
        t = sys.modules.get("torch")
        if t is not None and hasattr(t, "get_num_threads"):
            return t.get_num_threads(), "torch.get_num_threads()"
        return 1, "torch not imported: one assumed"

    def _decide(self):
        """Asks the tuner for what was left "auto" (the rules `stoke probe` prints, and
        for workers what the script's threads and the other processes leave of the
        available CPUs), each value with its source and reason. True when the workers
        or the prefetch changed."""
        host, host_from = self._host_threads()
        d = _stoke.decide(self._workers, self._prefetch if self._prefetch > 0 else 0,
                          self.batch_size, self.dataset.in_memory, self._cheap, host, host_from)
        changed = (getattr(self, "workers", None), getattr(self, "prefetch", None)) != (
            d["workers"], d["prefetch"])
        self.workers, self.prefetch = d["workers"], d["prefetch"]
        self.decision.update({"workers": {"value": d["workers"], **d["workers_why"]},
                              "prefetch": {"value": d["prefetch"], **d["prefetch_why"]}})
        return changed

    # -- the C loader behind a pass --------------------------------------------------

    def _open(self, epoch, index):
        self.close()
        opts = dict(self._sampler, start_epoch=epoch, start_index=index,
                    workers=self.workers, prefetch=self.prefetch, device=self._device,
                    transform=self._transform)
        core = _stoke.LoaderCore(self.dataset._d, opts)
        on_device, reason = core.device()
        if self._device >= 0 and not on_device:
            core.close()
            raise UnavailableError(f"stoke.Loader(device='cuda:{self._device}'): {reason}")
        if on_device and torch is not None and torch.cuda.is_available():
            # Before a device buffer given back is copied into again, the copy waits
            # for the kernels the script had queued on its stream by then.
            self._event = torch.cuda.Event()
            core.set_consumer_event(self._event.cuda_event)
        self._core = core

    def close(self):
        """Stops the workers now (they also stop when the loader is garbage). Batches
        still held stay valid."""
        if self._core is not None and self._pid == os.getpid():
            self._core.close()
            self._core = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return self._len

    @property
    def epoch(self):
        """The epoch the next pass runs."""
        return self._epoch

    def set_epoch(self, epoch):
        """The next pass runs this epoch from its start (as DistributedSampler.set_epoch)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ArgumentError(f"set_epoch({epoch!r}): an int >= 0")
        if epoch != self._epoch:
            self._epoch, self._resume = epoch, 0

    def __iter__(self):
        start = (self._epoch, self._resume)
        if self._pid != os.getpid():
            # fork()ed: the loader's threads stayed in the parent. The child starts its
            # own, where this pass begins (the inherited copy is left untouched).
            self._core, self._pid = None, os.getpid()
        # workers="auto" follows what the script leaves: decided again at each pass
        # but the first (decided at construction); a new count starts a new C loader at
        # this pass's start, so the batches and their order are the same.
        redo = not self._decided and self._workers < 0 and self._decide()
        self._decided = False
        if redo or self._core is None or self._core.state() != start:
            self._open(*start)
        self._resume = 0
        return self._pass(self._core, self._epoch)

    def _pass(self, core, epoch):
        while True:
            if self._core is not core:
                raise ArgumentError("stoke.Loader: a newer pass of this loader started (iter() "
                                    "was called again): one pass at a time per loader")
            if self._event is not None:
                self._event.record()
            r = core.next()
            if r is None:  # the epoch's end
                if self._core is core:
                    self._epoch = epoch + 1
                return
            _, _, x, y, _ = r
            yield self._convert(x, y)

    def _convert(self, x, y):
        info = self.dataset.info
        if self.output == "torch":
            x = torch.from_dlpack(x)
            if y is not None:
                y = torch.from_dlpack(y)
                if info["target_kind"] == "class" and y.dtype != torch.int64:
                    y = y.long()  # what CrossEntropyLoss takes; a few bytes per batch
        else:
            import numpy as np
            x = np.from_dlpack(x)
            if y is not None:
                y = np.from_dlpack(y)
                if info["target_kind"] == "class" and y.dtype != np.int64:
                    y = y.astype(np.int64)
        return (x, y) if y is not None else x

    # -- resume -------------------------------------------------------------------------

    def state_dict(self):
        """Where the stream of batches is: after the last batch handed out (mid-epoch),
        or at the start of the next pass. Give it to load_state_dict of a loader with
        the same dataset, batch size, seed, shuffle and shard to go on from there."""
        if self._core is not None and self._resume == 0:
            epoch, index = self._core.state()
        else:
            epoch, index = self._epoch, self._resume
        return {"epoch": epoch, "index": index, "count": len(self.dataset),
                **{k: self._sampler[k] for k in ("batch_size", "seed", "shuffle",
                                                  "drop_last", "rank", "world_size")}}

    def load_state_dict(self, state):
        for k in ("count", "batch_size", "seed", "shuffle", "drop_last", "rank",
                  "world_size"):
            mine = len(self.dataset) if k == "count" else self._sampler[k]
            if k not in state:
                raise ArgumentError(f"load_state_dict: no '{k}' in the state")
            if state[k] != mine:
                raise ArgumentError(f"load_state_dict: the state has {k}={state[k]!r}, "
                                    f"this loader {k}={mine!r}")
        epoch, index = state.get("epoch"), state.get("index")
        if not isinstance(epoch, int) or not isinstance(index, int) or epoch < 0 or index < 0:
            raise ArgumentError(f"load_state_dict: epoch={epoch!r}, index={index!r}")
        self._epoch, self._resume = epoch, index
        self.close()

    # -- measurements ---------------------------------------------------------------

    def stats(self):
        """The loader's measurements since its current pass's loader started: batches,
        waits (avg, p95, max ms), ring fill, worker busy fractions, held batches."""
        if self._core is None:
            return {"batches": 0, "samples": 0, "workers": self.workers,
                    "slots": self.prefetch, "held": 0}
        return self._core.stats()

    def __repr__(self):
        return (f"stoke.Loader({self.dataset!r}, batch_size={self.batch_size}, "
                f"workers={self.workers}, prefetch={self.prefetch})")

