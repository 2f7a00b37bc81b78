"""stoke.Loader from Python: the same bytes as the C library's parts give, whatever the
workers; tensors that never change under the user; resume, shards, epochs; errors."""
import gc
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import stoke
from stoke import _stoke

torch = pytest.importorskip("torch")

AUG = [stoke.RandomCrop((16, 16), pad=2), stoke.HFlip(), stoke.ColorJitter(0.3, 0.3, 0.3, 0.1),
       stoke.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])]


def reference_batches(ds, loader, epoch, nbatches):
    """Batches of `epoch` built from the library's parts alone: the sampler's order,
    each sample read and put through the transform by itself."""
    order = _stoke.epoch_order(len(ds), loader._sampler, epoch)
    out = []
    for idx in order[:nbatches]:
        xs, ys = [], []
        for i in idx:
            raw, tgt = ds.read(i)
            xs.append(_stoke.transform_apply(ds._d, loader._transform, raw, loader.seed,
                                             epoch, i) if loader._transform else raw)
            ys.append(tgt)
        out.append((b"".join(xs), b"".join(ys)))
    return out


@pytest.mark.parametrize("workers", [0, 3])
def test_random_resized_crop_is_the_libraries_bytes(rgb_npy, workers):
    """RandomResizedCrop (first, on the uint8 images) + flip, and the evaluation pair
    ResizeShorter + CenterCrop: the batches are the library's per-sample transform."""
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    for tf in ([stoke.RandomResizedCrop((12, 10)), stoke.HFlip()],
               [stoke.RandomResizedCrop(8, scale=(0.5, 1.0), ratio=(0.5, 2.0))],
               [stoke.ResizeShorter(20), stoke.CenterCrop(16)]):
        loader = stoke.Loader(ds, batch_size=16, shuffle=True, seed=3, transforms=tf,
                              workers=workers, prefetch=2)
        want = reference_batches(ds, loader, 0, 3)
        for k, (x, y) in enumerate(loader):
            if k == 3:
                break
            assert x.contiguous().numpy().tobytes() == want[k][0]
    with pytest.raises(stoke.ArgumentError, match="scale"):
        stoke.RandomResizedCrop(8, scale=(0.9, 0.1))


def digest(loader, passes=1):
    h = hashlib.sha256()
    for _ in range(passes):
        for x, y in loader:
            h.update(x.contiguous().view(torch.uint8).numpy().tobytes())
            h.update(y.numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_batches_are_the_libraries_bytes(rgb_npy, workers):
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    for dtype, tdtype in (("f32", torch.float32), ("bf16", torch.bfloat16),
                          ("fp16", torch.float16)):
        loader = stoke.Loader(ds, batch_size=48, shuffle=True, seed=5, transforms=AUG,
                              workers=workers, prefetch=2, dtype=dtype)
        for epoch in (0, 1):
            want = reference_batches(ds, loader, epoch, 4)
            got = []
            for k, (x, y) in enumerate(loader):
                if k < 4:
                    assert x.dtype == tdtype and x.shape == (48, 3, 16, 16)
                    got.append((x.view(torch.uint8).numpy().tobytes(),
                                y.numpy().tobytes()))
            assert loader.epoch == epoch + 1
            assert len(got) == 4
            for (gx, gy), (wx, wy) in zip(got, want):
                assert gx == wx
                assert gy == np.frombuffer(wy, np.int64).tobytes()


def test_identical_across_workers_and_layouts(rgb_npy):
    path, x, _ = rgb_npy
    ds = stoke.Dataset(path, in_memory=True)
    digests = {w: digest(stoke.Loader(ds, batch_size=32, shuffle=True, seed=9, transforms=AUG,
                                      workers=w), passes=2) for w in (0, 1, 2, 4)}
    assert len(set(digests.values())) == 1, digests
    # NHWC is NCHW transposed, sample for sample.
    a = stoke.Loader(ds, batch_size=32, shuffle=True, seed=9, transforms=AUG, workers=2)
    b = stoke.Loader(ds, batch_size=32, shuffle=True, seed=9, transforms=AUG, workers=2,
                     layout="NHWC")
    for (xa, _), (xb, _) in zip(a, b):
        assert torch.equal(xa, xb.permute(0, 3, 1, 2))
    # No transform: the stored bytes, in order.
    plain = stoke.Loader(ds, batch_size=100, workers=2)
    xs = torch.cat([xb for xb, _ in plain])
    assert np.array_equal(xs.numpy(), x)


def test_zero_copy_and_lifetime(rgb_npy):
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    loader = stoke.Loader(ds, batch_size=50, shuffle=True, transforms=AUG, workers=2,
                          prefetch=2)
    it = iter(loader)
    first_x, first_y = next(it)
    keep_x, keep_y = first_x.clone(), first_y.clone()
    ptr = first_x.data_ptr()
    # The ring has 2 slots: these passes go round it many times while batch 0 is held.
    for _ in range(3):
        for x, y in loader:
            assert x.data_ptr() != ptr
    assert torch.equal(first_x, keep_x) and torch.equal(first_y, keep_y)
    assert loader.stats()["held"] >= 1
    # A view outlives the tensor it came from, and keeps the batch.
    view = first_x[3:5]
    del first_x, first_y, x, y, it
    gc.collect()
    assert torch.equal(view, keep_x[3:5])
    del view
    gc.collect()
    assert loader.stats()["held"] == 0


def test_no_leak_over_many_epochs(rgb_npy):
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path, in_memory=True)
    loader = stoke.Loader(ds, batch_size=64, shuffle=True, transforms=AUG, workers=2)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    for _ in range(5):
        for x, y in loader:
            pass
    before = rss()
    for _ in range(60):
        for x, y in loader:
            pass
    grown = rss() - before
    st = loader.stats()
    # Dropping each batch before the next leaves a bounded set of buffers: the ring's
    # plus the one or two the loop variables hold at a hand-out.
    assert st["buffers"] <= 3, st
    assert st["held"] <= 1, st
    # 60 epochs hand out about 32 MB of batches; a leak of them would show here.
    assert grown < 8 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over 60 epochs"


def test_numpy_output(rgb_npy):
    path, x, y = rgb_npy
    ds = stoke.Dataset(path)
    n = stoke.Loader(ds, batch_size=40, shuffle=True, seed=3, transforms=AUG, workers=1,
                     output="numpy")
    t = stoke.Loader(ds, batch_size=40, shuffle=True, seed=3, transforms=AUG, workers=1)
    for (xn, yn), (xt, yt) in zip(n, t):
        assert isinstance(xn, np.ndarray) and xn.dtype == np.float32
        assert yn.dtype == np.int64
        assert np.array_equal(xn, xt.numpy()) and np.array_equal(yn, yt.numpy())
    with pytest.raises(stoke.ArgumentError, match="bfloat16"):
        stoke.Loader(ds, transforms=AUG, dtype="bf16", output="numpy")


def test_uint8_output(rgb_npy):
    """dtype="u8": the float32 batch's [0, 1] as 0..255, a quarter of the bytes; a
    normalize is refused (it belongs where the batch is consumed)."""
    path, x, y = rgb_npy
    ds = stoke.Dataset(path)
    aug = [stoke.RandomCrop((16, 16), pad=2), stoke.HFlip()]
    kw = dict(batch_size=40, shuffle=True, seed=3, transforms=aug, workers=2, layout="NHWC",
              output="numpy")
    for (xu, _), (xf, _) in zip(stoke.Loader(ds, dtype="u8", **kw),
                                stoke.Loader(ds, dtype="f32", **kw)):
        assert xu.dtype == np.uint8 and xu.shape == xf.shape
        assert np.array_equal(xu, np.rint(xf * 255).astype(np.uint8))
    with pytest.raises(Exception, match="uint8 output"):
        next(iter(stoke.Loader(ds, transforms=[stoke.Normalize([.5] * 3, [.2] * 3)],
                               dtype="u8")))


def test_resume_mid_epoch(rgb_npy):
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    kw = dict(batch_size=32, shuffle=True, seed=11, transforms=AUG, workers=2)
    whole = stoke.Loader(ds, **kw)
    whole.set_epoch(2)
    want = [(x.clone(), y.clone()) for x, y in whole]
    first = stoke.Loader(ds, **kw)
    first.set_epoch(2)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    assert state["epoch"] == 2 and state["index"] == 5 * 32
    resumed = stoke.Loader(ds, **dict(kw, workers=0))  # another worker count
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(want) - 5
    for (x, y), (wx, wy) in zip(rest, want[5:]):
        assert torch.equal(x, wx) and torch.equal(y, wy)
    assert resumed.epoch == 3  # and the pass after it is epoch 3, from its start
    # A state from another configuration is refused, naming the field.
    with pytest.raises(stoke.ArgumentError, match="seed"):
        stoke.Loader(ds, **dict(kw, seed=12)).load_state_dict(state)
    with pytest.raises(stoke.ArgumentError, match="batch_size"):
        stoke.Loader(ds, **dict(kw, batch_size=16)).load_state_dict(state)


def test_seed_is_unsigned_64_bits(rgb_npy):
    """Issue 26 (9): the extension reads a seed as unsigned: a negative one is refused
    (it was cast to 2**64 - 5), and the top half of the range loader.py allows works
    (it overflowed a signed read)."""
    ds = stoke.Dataset(rgb_npy[0])
    top = stoke.Loader(ds, batch_size=50, shuffle=True, seed=2**64 - 1, workers=0,
                       output="numpy")
    assert sum(1 for _ in top) == 10
    sampler = dict(top._sampler)
    assert len(_stoke.epoch_order(len(ds), sampler, 0)) == 10
    for bad in (-5, -1):
        with pytest.raises(OverflowError):
            _stoke.epoch_order(len(ds), dict(sampler, seed=bad), 0)
    loader = stoke.Loader(ds, batch_size=50, transforms=AUG[:1], workers=0)
    raw, _ = ds.read(0)
    _stoke.transform_apply(ds._d, loader._transform, raw, 2**64 - 1, 0, 0)
    with pytest.raises(OverflowError):
        _stoke.transform_apply(ds._d, loader._transform, raw, -5, 0, 0)


def test_epochs_len_and_shards(rgb_npy):
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    assert len(stoke.Loader(ds, batch_size=64)) == 8
    assert len(stoke.Loader(ds, batch_size=64, drop_last=True)) == 7
    loader = stoke.Loader(ds, batch_size=100, shuffle=True, seed=1, workers=1)
    e0 = torch.cat([y for _, y in loader])
    e1 = torch.cat([y for _, y in loader])
    assert loader.epoch == 2
    assert not torch.equal(e0, e1)  # a new order each pass
    loader.set_epoch(0)
    assert torch.equal(torch.cat([y for _, y in loader]), e0)
    # Breaking out of a pass: the next pass starts that epoch again, as DataLoader does.
    loader.set_epoch(1)
    for k, _ in enumerate(loader):
        if k == 1:
            break
    assert loader.epoch == 1
    assert torch.equal(torch.cat([y for _, y in loader]), e1)
    # Two ranks of a shard see every sample once between them (500 = 2 x 250).
    seen = []
    for rank in range(2):
        sh = stoke.Loader(ds, batch_size=64, shuffle=True, seed=4, rank=rank, world_size=2)
        assert len(sh) == 4
        xs = torch.cat([x.reshape(len(x), -1) for x, _ in sh])
        seen.append(xs)
    allx = torch.cat(seen)
    assert allx.shape[0] == 500
    assert torch.unique(allx, dim=0).shape[0] == 500


def test_decision_and_measured_normalize(rgb_npy):
    path, x, _ = rgb_npy
    ds = stoke.Dataset(path)
    loader = stoke.Loader(ds, batch_size=32, transforms=[stoke.Normalize()])
    d = loader.decision
    assert d["workers"]["source"] == "rule" and d["workers"]["reason"]
    assert d["prefetch"]["value"] >= 2
    mean = d["normalize"]["value"]["mean"]
    assert np.allclose(mean, (x / 255.0).reshape(-1, 3).mean(axis=0), atol=1e-6)
    xb, _ = next(iter(loader))
    # Normalized by the dataset's own statistics: about zero mean, unit spread.
    assert abs(float(xb.mean())) < 0.1 and 0.8 < float(xb.std()) < 1.2
    given = stoke.Loader(ds, batch_size=32, workers=3, prefetch=5)
    assert given.workers == 3 and given.prefetch == 5
    assert given.decision["workers"]["source"] == "flag"


def test_errors_name_the_file_and_the_argument(tmp_path, rgb_npy):
    path, _, _ = rgb_npy
    missing = tmp_path / "nope.h5"
    with pytest.raises(FileNotFoundError, match="nope.h5") as e:
        stoke.Dataset(missing)
    assert isinstance(e.value, stoke.Error) and e.value.status == "notfound"
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': garbage")
    with pytest.raises(stoke.FormatError, match="bad.npy"):
        stoke.Dataset(bad)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(stoke.Error, match="fifo"):
        stoke.Dataset(fifo)  # refused, never a hang
    ds = stoke.Dataset(path)
    for kw, word in ((dict(batch_size=0), "batch_size"), (dict(batch_size=2.5), "batch_size"),
                     (dict(workers=-1), "workers"), (dict(workers="many"), "workers"),
                     (dict(prefetch=0), "prefetch"), (dict(dtype="int8"), "dtype"),
                     (dict(layout="CHWN"), "layout"), (dict(device="tpu"), "device"),
                     (dict(rank=2, world_size=2), "rank"), (dict(seed=-1), "seed"),
                     (dict(transforms=[object()]), "transforms"),
                     (dict(output="jax"), "output")):
        with pytest.raises(stoke.ArgumentError, match=word):
            stoke.Loader(ds, **kw)
    for make, word in ((lambda: stoke.Normalize(mean=[0.5]), "both"),
                       (lambda: stoke.Normalize([0.5], [0]), "positive"),
                       (lambda: stoke.RandomCrop(0), "RandomCrop"),
                       (lambda: stoke.ColorJitter(hue=0.7), "hue"),
                       (lambda: stoke.HFlip(2), "probability")):
        with pytest.raises(stoke.ArgumentError, match=word):
            make()
    # The C library's checks reach Python with its message: a crop larger than the
    # padded image.
    with pytest.raises(stoke.ArgumentError, match="crop"):
        stoke.Loader(ds, transforms=[stoke.RandomCrop(64)])
    with pytest.raises(stoke.Error, match="workers"):
        stoke.Loader(ds, workers=100000)
    with pytest.raises(stoke.OutOfMemoryError, match="lower the prefetch or the batch"):
        stoke.Loader(ds, batch_size=10**12)  # refused with the numbers, not OOM-killed
    with pytest.raises(stoke.UnavailableError, match="cuda"):
        stoke.Loader(ds, device="cuda")  # no GPU here: the reason, not a CPU fallback


def test_random_resized_crop_on_originals(tmp_path, monkeypatch):
    """An image folder's RandomResizedCrop reads the originals: the info says the
    dataset has them, the tuner is told each sample decodes an image (not the cheap
    work of a flip on held pixels), and a held copy (in_memory) has none."""
    from PIL import Image
    d = tmp_path / "imgs"
    for c in ("a", "b"):
        (d / c).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.full((30, 40, 3), i * 30, np.uint8)).save(d / c / f"{i}.jpg")
    ds = stoke.Dataset(d, image_size=16)
    assert ds.info["originals"] is True
    seen, real = [], _stoke.decide
    monkeypatch.setattr(_stoke, "decide", lambda *a: seen.append(a[4]) or real(*a))
    loader = stoke.Loader(ds, batch_size=4, transforms=[stoke.RandomResizedCrop(8)])
    stoke.Loader(ds, batch_size=4, transforms=[stoke.HFlip()])
    stoke.Loader(ds, batch_size=4, transforms=[stoke.ResizeShorter(18), stoke.CenterCrop(16)])
    assert seen == [False, True, False]  # cheap_transform as given to the tuner
    x, _ = next(iter(loader))
    assert tuple(x.shape) == (4, 3, 8, 8)
    assert stoke.Dataset(d, image_size=16, in_memory=True).info["originals"] is False


def test_image_folder_symlinks_are_left_out_and_said(tmp_path):
    """A link loop and a link out of its class: each image once, in its own class; what
    was left out is in .info and a warning (docs/formats.md#image-folders)."""
    from PIL import Image
    d = tmp_path / "fan"
    for c in ("a", "b"):
        (d / c).mkdir(parents=True)
        Image.fromarray(np.full((8, 8, 3), 50, np.uint8)).save(d / c / "0.png")
    for i in range(3):
        os.symlink(".", d / "a" / f"s{i}")
    os.symlink("..", d / "b" / "up")
    with pytest.warns(UserWarning, match="4 entries left out"):
        ds = stoke.Dataset(d, image_size=8)
    assert len(ds) == 2 and list(ds.class_counts()) == [1, 1]
    assert ds.info["skipped"] == 4
    assert ds.info["skipped_example"].startswith(f"{d}/a/s0: a folder walked already")


def test_read_error_mid_epoch_is_an_exception(tmp_path):
    """A sample that cannot be read mid-epoch: an exception naming the file and the
    sample, after the batches before it; never a crash."""
    d = tmp_path / "imgs"
    from PIL import Image
    for c in ("a", "b"):
        (d / c).mkdir(parents=True)
        for i in range(20):
            Image.fromarray(np.full((8, 8, 3), i * 10, np.uint8)).save(d / c / f"{i:02}.png")
    (d / "b" / "07.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)  # corrupt
    ds = stoke.Dataset(d, image_size=8)
    loader = stoke.Loader(ds, batch_size=4, workers=2)
    got = 0
    with pytest.raises(stoke.Error, match="07.png"):
        for _ in loader:
            got += 1
    assert got == 6  # samples 0..23 came; the batch holding sample 27 failed
    again = 0
    with pytest.raises(stoke.Error, match="07.png"):
        for _ in loader:  # a new pass starts the epoch again: the same batches, then
            again += 1    # the same error
    assert again == 6


SHRINK = textwrap.dedent("""
    import os, struct, sys, zlib, numpy as np, stoke
    kind, d = sys.argv[1], sys.argv[2]
    x = np.arange(4096 * 64, dtype=np.uint32).astype(np.uint8).reshape(4096, 8, 8)
    y = (np.arange(4096) % 10).astype(np.uint8)
    if kind == "npy":
        path = d + "/x.npy"
        np.save(path, x)
        np.save(d + "/y.npy", y)
    else:  # packed records, version 1, as docs/formats.md lays them out
        path = d + "/x.rec"
        h = bytearray(256)
        h[0:8] = b"STOKEREC"
        struct.pack_into("<IIQQQQq", h, 8, 1, 256, 4096, 80, 64, 1, 10)
        h[56:61] = bytes([0, 2, 1, 0, 0])  # u8 input, ndim 2, class, u8 target, ndim 0
        struct.pack_into("<QQ", h, 64, 8, 8)
        struct.pack_into("<Q", h, 192, 64)
        struct.pack_into("<I", h, 252, zlib.crc32(bytes(h[:252])))
        recs = np.zeros((4096, 80), np.uint8)
        recs[:, :64] = x.reshape(4096, 64)
        recs[:, 64] = y
        with open(path, "wb") as f:
            f.write(bytes(h) + recs.tobytes())
    loader = stoke.Loader(stoke.Dataset(path), batch_size=64, workers=1, prefetch=1)
    it = iter(loader)
    next(it)
    os.truncate(path, 300)
    try:
        for _ in it:
            pass
    except stoke.Error as e:
        print(e)
        sys.exit(3)
""")


@pytest.mark.parametrize("kind", ["npy", "records"])
def test_a_file_shrinking_under_the_loader_is_an_exception(tmp_path, kind):
    """A dataset file truncated while a loader reads it: an exception naming the file
    and the sample, never SIGBUS (the readers used to map their files)."""
    p = subprocess.run([sys.executable, "-c", SHRINK, kind, str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, (p.returncode, p.stderr)
    name = "x.npy" if kind == "npy" else "x.rec"
    assert name + ": sample " in p.stdout and "the file ends at byte 300" in p.stdout, p.stdout


SLOW = textwrap.dedent("""
    import signal, sys, time, numpy as np, stoke
    # Python keeps SIGINT ignored when it starts so (a parent run as a background job
    # passes that on): the test is of the loader's wait, not of how it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    np.save(sys.argv[1] + "/x.npy", np.zeros((4096, 32, 32, 3), np.uint8))
    np.save(sys.argv[1] + "/y.npy", np.zeros(4096, np.int64))
    ds = stoke.Dataset(sys.argv[1] + "/x.npy")
    # Each sample is upscaled and jittered: seconds per batch, so a pass takes minutes.
    loader = stoke.Loader(ds, batch_size=1024, workers=int(sys.argv[2]),
                          transforms=[stoke.Resize(512), stoke.ColorJitter(0.5, 0.5, 0.5, 0.3)])
    print("started", flush=True)
    try:
        for x, y in loader:
            print("batch", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
""")


@pytest.mark.parametrize("workers", [0, 1])
def test_ctrl_c_interrupts_a_wait(tmp_path, workers):
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", SLOW, str(tmp_path), str(workers)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("Ctrl-C did not stop the loop")
    assert p.returncode == 3, err
    assert "interrupted" in out and "batch" not in out


def test_misuse_is_an_error_not_a_crash(rgb_npy):
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    loader = stoke.Loader(ds, batch_size=32, workers=1)
    a = iter(loader)
    next(a)
    b = iter(loader)  # a second pass while the first is mid-epoch: it starts again
    next(b)
    with pytest.raises(stoke.ArgumentError, match="one pass at a time"):
        next(a)
    # Two threads taking batches from one loader at once: one is told, neither crashes.
    import threading
    slow = stoke.Loader(ds, batch_size=500, workers=1,
                        transforms=[stoke.Resize(256), stoke.ColorJitter(0.5, 0.5, 0.5, 0.2)])
    errors = []

    def take():
        try:
            for _ in slow:
                pass
        except (RuntimeError, stoke.ArgumentError) as e:
            errors.append(str(e))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors and all("one consumer" in e or "one pass at a time" in e for e in errors)
    # After fork() (multiprocessing's default here), the child's pass starts a loader
    # of its own: the same batches, no hang on the parent's threads. `slow`'s worker is
    # still filling 500-sample batches: it is closed first, because under
    # AddressSanitizer (GCC 12) a fork while another thread is inside malloc leaves the
    # child's allocator locked (seen once in CI). `loader`'s worker, idle with its ring
    # full, stays alive across the fork.
    slow.close()
    loader.set_epoch(3)
    want = [y.clone() for _, y in loader]
    pid = os.fork()
    if pid == 0:
        try:
            loader.set_epoch(3)
            got = [y for _, y in loader]
            os._exit(0 if all(torch.equal(a, b) for a, b in zip(got, want)) else 1)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_numpy_batches_without_torch(rgb_npy):
    """Where torch is not installed, batches are NumPy arrays (numpy.from_dlpack)."""
    path, x, _ = rgb_npy
    code = ("import sys; sys.modules['torch'] = None\n"
            "import stoke\n"
            f"xb, yb = next(iter(stoke.Loader({path!r}, batch_size=8)))\n"
            "print(type(xb).__module__, xb.dtype, yb.dtype, xb.shape, int(xb.sum()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["numpy", "uint8", "int64", "(8,", "16,", "20,", "3)", str(int(x[:8].sum()))]


def test_core_refuses_bad_layouts(tmp_path):
    """The C core's own checks (the Python layer checks first): a layout that is not a
    str, or a str UTF-8 cannot encode, is an error, never the default or a crash."""
    np.save(tmp_path / "x.npy", np.zeros((4, 2, 2), dtype=np.uint8))
    ds = stoke.Dataset(str(tmp_path / "x.npy"))
    for layout, err in ((5, ValueError), ("\udc80", UnicodeEncodeError), ("NCWH", ValueError)):
        with pytest.raises(err):
            _stoke.LoaderCore(ds._d, {"batch_size": 2, "workers": 0, "prefetch": 1, "device": -1,
                                      "transform": {"ops": [], "layout": layout}})
