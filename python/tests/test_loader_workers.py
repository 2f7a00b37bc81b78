"""workers="auto" follows the cores the training script leaves the loader: the
available CPUs, less the script's compute threads (torch.get_num_threads()), less what
other processes keep busy (decided in C, stoke_decide's host_threads; the arithmetic on
synthetic machines is tests/test_tune.c's test_decide_host_threads), decided again at
each pass; a given count never changes, and a new count changes no batch."""
import json
import subprocess
import sys

import pytest

import stoke
from stoke import _stoke

try:
    import torch
except ImportError:  # pragma: no cover - Debian's python3-torch is installed here
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not importable by this "
                                 "interpreter: the script's thread count is torch's")


def decide(workers=-1, host=1, host_from="torch.get_num_threads()", in_memory=False,
           cheap=False):
    return _stoke.decide(workers, 0, 32, in_memory, cheap, host, host_from)


def test_workers_are_what_the_script_leaves():
    """One decision's own numbers add up, and its reason says them."""
    for host in (1, 2, 64):
        d = decide(host=host)
        assert d["host_threads"] == host
        left = d["available_cpus"] - host - d["others_cpus"]
        assert d["workers"] == max(1, min(8, left)), d  # 8: the CPU-only machine's cap
        assert d["workers_why"]["source"] == "rule"
        reason = d["workers_why"]["reason"]
        assert reason.startswith(f"{d['available_cpus']} available CPU"), reason
        assert (f"the script computes on {host} thread{'s' if host > 1 else ''} "
                "(torch.get_num_threads())") in reason
        if d["load_others_cpus"] is None:
            assert "other processes' load unknown" in reason
        else:
            assert f"other processes busy on {d['load_others_cpus']:.1f}" in reason
        said = f": {d['workers']} worker{'s' if d['workers'] > 1 else ''}"
        assert said + (" (at least 1)" if left < 1 else "") in reason
    # 0 threads (stoke train's request): the rules' share, no load taken
    assert decide(host=0)["workers_why"]["reason"].startswith("the tuner: ")
    # the in-memory rule's 0 stays; a given count is kept
    assert decide(in_memory=True, cheap=True)["workers"] == 0
    given = decide(workers=3, host=2)
    assert given["workers"] == 3 and given["workers_why"]["source"] == "flag"
    with pytest.raises(ValueError, match="host_threads"):
        decide(host=-1)


def test_without_torch_the_script_is_one_thread(rgb_npy):
    path, _, _ = rgb_npy
    code = ("import sys, json\n"
            "sys.modules['torch'] = None  # not importable: as where torch is absent\n"
            "import stoke\n"
            f"l = stoke.Loader({path!r}, batch_size=50)\n"
            "print(json.dumps([l.output, l.decision['workers']]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    output, w = json.loads(out.stdout)
    assert output == "numpy"
    assert "the script computes on 1 thread (torch not imported: one assumed)" in w["reason"]


class Threads:
    """torch.set_num_threads for one test, restored after."""

    def __init__(self):
        self.saved = torch.get_num_threads()

    def set(self, n):
        torch.set_num_threads(n)
        assert torch.get_num_threads() == n

    def restore(self):
        torch.set_num_threads(self.saved)


@needs_torch
def test_auto_workers_are_decided_again_each_pass(rgb_npy):
    """torch.set_num_threads between epochs: the next pass's decision counts the new
    threads (on this 2-CPU machine 1 and 2 threads both leave 1 worker; the count a
    change makes is the next test's)."""
    path, _, _ = rgb_npy
    threads = Threads()
    try:
        threads.set(1)
        loader = stoke.Loader(stoke.Dataset(path), batch_size=100, transforms=[stoke.HFlip()])
        first = loader.decision["workers"]
        assert "the script computes on 1 thread (torch.get_num_threads())" in first["reason"]
        for _ in loader:
            pass
        threads.set(2)
        for _ in loader:
            pass
        second = loader.decision["workers"]
        assert "the script computes on 2 threads (torch.get_num_threads())" in second["reason"]
        assert second["value"] == loader.workers == loader.stats()["workers"]
        assert loader.decision["prefetch"]["value"] == loader.prefetch
    finally:
        threads.restore()


@needs_torch
def test_a_new_worker_count_changes_no_batch(rgb_npy, monkeypatch):
    """The decision (C's, wrapped) gives 1 worker for 1 script thread and 3 for 2: the
    next pass runs on the new count, the batches and their order are the workers=0
    loader's, and a resumed position stays where it was."""
    path, _, _ = rgb_npy
    ds = stoke.Dataset(path)
    aug = [stoke.RandomCrop((16, 16), pad=2), stoke.HFlip(), stoke.ColorJitter(0.3, 0.3)]
    kw = dict(batch_size=40, shuffle=True, seed=5, transforms=aug)
    ref = stoke.Loader(ds, workers=0, **kw)
    want = [[(x.clone(), y.clone()) for x, y in ref] for _ in range(3)]
    real, seen = _stoke.decide, []

    def wrapped(*a):
        d = real(*a)
        seen.append(a[5])
        if a[0] < 0:
            d["workers"] = {1: 1, 2: 3}[a[5]]
        return d

    monkeypatch.setattr(_stoke, "decide", wrapped)
    threads = Threads()
    try:
        threads.set(1)
        loader = stoke.Loader(ds, **kw)
        counts, got = [], []
        for epoch, n in enumerate((1, 2, 1)):
            threads.set(n)
            batches = [(x.clone(), y.clone()) for x, y in loader]
            counts.append(loader.stats()["workers"])
            got.append(batches)
        # epoch 0 ran on the construction's decision (1 thread then)
        assert counts == [1, 3, 1] and seen == [1, 2, 1]
        for e in range(3):
            assert len(got[e]) == len(want[e])
            for (gx, gy), (wx, wy) in zip(got[e], want[e]):
                assert torch.equal(gx, wx) and torch.equal(gy, wy)
        # mid-epoch: 3 batches of epoch 1 on 1 worker, then the rest on 3
        loader.set_epoch(1)
        it = iter(loader)
        head = [next(it)[0].clone() for _ in range(3)]
        state = loader.state_dict()
        del it
        assert state["epoch"] == 1 and state["index"] == 3 * 40  # samples
        loader.load_state_dict(state)
        threads.set(2)
        tail = [x.clone() for x, _ in loader]
        assert loader.stats()["workers"] == 3
        xs = head + tail
        assert len(xs) == len(want[1])
        assert all(torch.equal(a, b) for a, (b, _) in zip(xs, want[1]))
    finally:
        threads.restore()


@needs_torch
def test_given_workers_never_change(rgb_npy, monkeypatch):
    path, _, _ = rgb_npy
    calls = []
    real = _stoke.decide
    monkeypatch.setattr(_stoke, "decide", lambda *a: calls.append(a) or real(*a))
    threads = Threads()
    try:
        threads.set(1)
        loader = stoke.Loader(stoke.Dataset(path), batch_size=100, workers=2)
        for n in (2, 1, 2):
            threads.set(n)
            for _ in loader:
                pass
            assert loader.workers == 2 and loader.stats()["workers"] == 2
            assert loader.decision["workers"] == {"value": 2, "source": "flag", "reason": ""}
        assert len(calls) == 1  # decided once, at construction
    finally:
        threads.restore()


def test_probe_says_the_cpus_the_decision_shares():
    """probe()'s available CPUs are the ones the loader's decision counts."""
    cpu = stoke.probe()["cpu"]
    assert decide()["available_cpus"] == cpu["available_cpus"]


PROFILES = """\
version: 1
profiles:
  - name: test-cpu
    match:
      cpu_only: true
    workers: 1
    prefetch_factor: 5
    precision: auto
    tf32: false
    source: "a test"
    note: "five batches ahead per worker, where the rule keeps two"
"""


def test_the_profiles_are_stoke_trains(rgb_npy, tmp_path, monkeypatch):
    """stoke.Loader decides from the hardware profiles `stoke train` reads (STOKE_PROFILES,
    else the built-in table): on a profile whose prefetch is not the rule's, the loader
    and `stoke train --dry-run` put the same batches in flight for the same workers, with
    the same reason; and both take the in-memory rule's 0 workers alike."""
    import os
    import re
    from pathlib import Path

    import _gpu_doubles as doubles
    cli = Path(os.environ.get("STOKE_TEST_CLI", doubles.BUILD / "stoke"))
    if not cli.exists():
        pytest.skip(f"no stoke command beside the package ({cli})")
    path, _, _ = rgb_npy
    (tmp_path / "profiles.yaml").write_text(PROFILES)
    monkeypatch.setenv("STOKE_PROFILES", str(tmp_path / "profiles.yaml"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKE_FAKE")}
    env.update(STOKE_TUNE="off", STOKE_CACHE_DIR=str(tmp_path / "cache"))
    for k in ("NUM_WORKERS", "PREFETCH_FACTOR", "BATCH_SIZE", "STOKE_DEVICE"):
        env.pop(k, None)

    def train(*flags):
        p = subprocess.run([str(cli), "train", "--dataset", path, "--model", "mlp",
                            "--batch-size", "32", "--dry-run", *flags], capture_output=True,
                           text=True, env=env, check=True)
        loader = re.search(r"^loader: (\d+) batches in flight \((.*)\); pinned", p.stdout, re.M)
        workers = re.search(r" \+ (\d+) loader workers? \((.*?)\)", p.stdout)
        assert loader and workers, p.stdout
        return int(workers[1]), workers[2], int(loader[1]), loader[2]

    w, _, prefetch, why = train("--workers", "2")
    with stoke.Loader(path, batch_size=32, workers=2) as loader:
        assert (loader.workers, loader.prefetch) == (w, prefetch)
        assert loader.decision["prefetch"]["reason"] == why
        if "profile 'test-cpu'" in why:  # decided for the CPU (a GPU has no profile here)
            assert prefetch == 10, why
    # held in memory with one cheap pass (normalize only, as `stoke train` runs it)
    w, wwhy, prefetch, why = train()
    ds = stoke.Dataset(path, in_memory=True)
    with stoke.Loader(ds, batch_size=32, transforms=[stoke.Normalize()]) as loader:
        assert (loader.workers, loader.prefetch) == (w, prefetch)
        assert loader.decision["workers"]["reason"] == wwhy
