"""stoke.Monitor: the sampler of `stoke monitor` inside a Python process (docs/python.md,
"The monitor")."""
import json
import os
import subprocess
import sys
import time

import pytest
import stoke
from stoke.monitor import in_python

import _gpu_doubles as doubles


def wait_samples(mon, n, busy=False):
    """Waits until the monitor has taken n samples. The deadline only keeps a broken
    sampler from hanging the suite; nothing is judged by time."""
    deadline = time.monotonic() + 120
    while True:
        s = mon.latest()
        if s is not None and s["seq"] >= n:
            return s
        assert time.monotonic() < deadline, "the monitor took no samples"
        if not busy:
            time.sleep(0.01)


def test_jsonl_has_one_line_per_sample(tmp_path):
    log = tmp_path / "run.jsonl"
    with stoke.Monitor(interval=0.05, jsonl=log) as mon:
        assert mon.running
        wait_samples(mon, 5)
    assert not mon.running
    last = mon.latest()
    lines = log.read_text().splitlines()
    assert len(lines) == last["seq"]
    samples = [json.loads(x) for x in lines]
    assert [s["seq"] for s in samples] == list(range(1, last["seq"] + 1))
    # latest() has the keys of a JSON line, and a "gpus" list even when there are none.
    assert {"gpus": [], **samples[-1]} == last
    for s in samples:
        assert s["proc"]["pid"] == os.getpid()  # the Python process itself by default
        assert "cpu_pct" in s and "mem_total_bytes" in s
    assert mon.summary()["samples"] == last["seq"]

    # Started again, the history goes on and the log is appended to, not truncated.
    mon.start()
    wait_samples(mon, last["seq"] + 3)
    mon.stop()
    lines = log.read_text().splitlines()
    assert len(lines) == mon.latest()["seq"] == mon.summary()["samples"]
    assert [json.loads(x)["seq"] for x in lines] == list(range(1, len(lines) + 1))


def proc_cpu_median(busy):
    with stoke.Monitor(interval=0.05, gpu=False) as mon:
        wait_samples(mon, 8, busy=busy)
    return mon.summary()["metrics"]["proc_cpu_pct"]["median"]


def test_busy_python_loop_shows_in_proc_cpu():
    idle = proc_cpu_median(busy=False)
    busy = proc_cpu_median(busy=True)
    # A spinning interpreter keeps one core busy, a sleeping one next to none; the
    # margin leaves room for a machine shared with other jobs.
    assert busy > idle + 20, (idle, busy)


@pytest.mark.parametrize("interval", [0.01, 0, -1, float("nan"), 1e9])
def test_bad_interval_is_an_argument_error(interval, tmp_path):
    log = tmp_path / "never.jsonl"
    with pytest.raises(stoke.ArgumentError, match=r"interval .* out of range \(0.05 to 86400\)"):
        stoke.Monitor(interval=interval, jsonl=log)
    assert not log.exists()  # nothing is created for a monitor that cannot run


def test_bad_argument_types():
    with pytest.raises(TypeError):
        stoke.Monitor(interval="fast")
    with pytest.raises(TypeError, match="pid"):
        stoke.Monitor(pid="me")
    with pytest.raises(TypeError, match="pid"):
        stoke.Monitor(pid=True)


def test_bad_pid():
    with pytest.raises(stoke.ArgumentError, match="pid"):
        stoke.Monitor(pid=-1)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # reaped: its pid names no process now
    with pytest.raises(stoke.NotFoundError, match=f"no process with pid {p.pid}"):
        stoke.Monitor(pid=p.pid)


def test_data_storage_feeds_the_summary(tmp_path):
    mon = stoke.Monitor(data=tmp_path)
    summary = mon.summary()
    assert summary["data_path"] == str(tmp_path)
    assert summary["data_storage"] in ("unknown", "memory", "ssd", "rotational", "network",
                                       "overlay")
    assert "data_path" not in stoke.Monitor().summary()
    missing = tmp_path / "nope"
    with pytest.raises(stoke.NotFoundError, match=str(missing)):
        stoke.Monitor(data=missing)


def test_jsonl_to_a_directory_names_the_path(tmp_path):
    with pytest.raises(stoke.FileError, match=str(tmp_path)) as e:
        stoke.Monitor(jsonl=tmp_path)
    assert isinstance(e.value, OSError)


def test_jsonl_under_a_missing_directory_names_the_path(tmp_path):
    path = tmp_path / "no" / "such" / "run.jsonl"
    with pytest.raises(stoke.FileError, match=str(path)):
        stoke.Monitor(jsonl=path)


def test_jsonl_write_error_is_raised_by_stop():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full to fill")
    mon = stoke.Monitor(interval=0.05, jsonl="/dev/full", gpu=False)
    mon.start()
    wait_samples(mon, 2)
    with pytest.raises(stoke.FileError, match="cannot write to '/dev/full'"):
        mon.stop()
    mon.stop()  # raised once; the monitor is stopped and still usable
    assert "diagnosis:" in mon.diagnosis()


def test_exception_in_the_body_stops_the_monitor():
    with pytest.raises(KeyError):
        with stoke.Monitor(interval=0.05) as mon:
            wait_samples(mon, 1)
            raise KeyError("the user's own")
    assert not mon.running


def test_a_forked_child_leaves_the_monitor_alone():
    # DataLoader workers are fork() children: the monitor is copied into them, its
    # sampler thread is not.
    with stoke.Monitor(interval=0.05) as mon:
        wait_samples(mon, 2)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                mon.summary()
                mon.stop()
                code = 0 if not mon.running else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        wait_samples(mon, mon.latest()["seq"] + 2)  # the parent's sampler goes on
    assert mon.summary()["samples"] == mon.latest()["seq"]


def test_latest_summary_and_findings_shapes():
    mon = stoke.Monitor(interval=0.05)
    assert mon.latest() is None and mon.line() == ""
    with mon:
        wait_samples(mon, 4, busy=True)
        # Read while running: the sampler pauses for the copy and goes on.
        running_summary = mon.summary()
        assert mon.running
        n = running_summary["samples"]
        wait_samples(mon, n + 2)
    s = mon.latest()
    assert isinstance(s["gpus"], list)
    assert s["proc"]["threads"] >= 1 and s["proc"]["rss_bytes"] > 0
    assert "CPU" in mon.line()
    summary = mon.summary()
    assert summary["samples"] >= n + 2
    assert summary["pid"] == os.getpid()
    cpu = summary["metrics"]["cpu_pct"]
    assert set(cpu) == {"n", "min", "median", "p95", "max", "mean", "unit"}
    assert cpu["min"] <= cpu["median"] <= cpu["p95"] <= cpu["max"]
    assert "proc_rss" in summary["metrics"]
    assert "pipeline" not in summary or summary["pipeline"]["batches"] >= 0
    # one process: no ranks, of the tree or the trainer's
    assert summary["ranks"] == [] and summary["rank_steps"] == [] and "ranks" not in s
    for f in mon.findings():
        assert set(f) == {"id", "kind", "resource", "gpu", "rank", "host", "program",
                          "evidence", "advice", "figures", "changes", "python"}
        assert f["kind"] in ("bottleneck", "risk", "warning")
        check_fields(f)


def test_ranks_of_a_watched_launcher():
    # Two processes an MPI launcher would start: their environment names their rank.
    p = subprocess.Popen(["sh", "-c", "OMPI_COMM_WORLD_RANK=0 sleep 20 & "
                          "OMPI_COMM_WORLD_RANK=1 sleep 20 & wait"])
    try:
        kids = []
        for _ in range(500):
            kids = [int(x) for x in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()]
            if len(kids) == 2 and all(open(f"/proc/{k}/comm").read() == "sleep\n" for k in kids):
                break
            time.sleep(0.01)
        with stoke.Monitor(interval=0.05, pid=p.pid, gpu=False) as mon:
            wait_samples(mon, 3)
        ranks = mon.latest()["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert sorted(r["pid"] for r in ranks) == sorted(kids)
        assert all(r["rss_bytes"] > 0 and r["cpu_pct"] >= 0 for r in ranks)
        summary = mon.summary()
        assert [(r["rank"], r["pid"]) for r in summary["ranks"]] == \
            [(r["rank"], r["pid"]) for r in ranks]
        assert summary["ranks"][0]["metrics"]["rss"]["unit"] == "bytes"
        assert summary["rank_steps"] == []  # the trainer's figures: not a Python monitor's
        assert "RANKS 0:" in mon.line()
        assert "ranks (MPI processes of the tree)" in mon.report()
    finally:
        p.kill()
        for k in kids:
            try:
                os.kill(k, 9)
            except ProcessLookupError:
                pass
        p.wait()


def check_fields(f):
    """A finding's numbers are fields of the shapes docs/monitor.md gives."""
    assert f["program"] in ("stoke", "external")
    for name, x in f["figures"].items():
        assert set(x) == {"value", "unit"} and isinstance(x["value"], float), (name, x)
    for c in f["changes"]:
        assert set(c) == {"setting", "unit", "current", "suggested", "direction", "to"}, c
        assert c["direction"] in (-1, 0, 1)
        # a number to set, a direction, or a word
        assert (c["to"] is None) == (c["direction"] != 0), c
        assert c["suggested"] is None or c["to"] is None, c


def test_diagnosis_carries_every_finding():
    with stoke.Monitor(interval=0.05) as mon:
        wait_samples(mon, 6, busy=True)
    text = mon.diagnosis()
    assert text.startswith("diagnosis: ")
    findings = mon.findings()
    for f in findings:
        assert f"[{f['id']}]: {f['evidence']}" in text
        assert f"  change: {f['advice']}" in text
        if f["python"]:
            assert f"  in Python: {f['python']}" in text
    if not findings:
        assert "no rule fired" in text
    report = mon.report()
    assert report.startswith("summary: ") and report.endswith(text)


def test_too_few_samples_is_said_plainly():
    mon = stoke.Monitor()
    assert "too few samples (0)" in mon.diagnosis()
    assert mon.findings() == []


def change(setting, suggested=None, direction=1, to=None, current=None, unit=""):
    return {"setting": setting, "unit": unit, "current": current, "suggested": suggested,
            "direction": 0 if to else direction, "to": to}


def test_advice_in_python_terms_from_the_changes():
    # The changes src/monitor/rules.c records, whatever its texts say: in_python reads
    # fields, never the advice (which these findings do not even have).
    records = change("data_format", to="stoke-records")
    assert in_python({"changes": [change("workers", 4.0, current=2.0), change(
        "per_sample_work", direction=-1), records]}) == (
        "stoke.Loader(..., workers=4); stoke.Dataset(..., in_memory=True) if it fits in "
        "memory, else convert once in a shell (stoke data convert SRC DST), then "
        "stoke.Dataset(DST)")
    assert in_python({"changes": [change("data_location", to="tmpfs"), records,
                                  change("prefetch", 6.0, current=3.0)]}) == (
        "stoke.Loader(..., prefetch=6); stoke.Dataset(..., in_memory=True) if it fits in "
        "memory, else convert once in a shell (stoke data convert SRC DST), then "
        "stoke.Dataset(DST)")
    assert in_python({"changes": [change("prefetch", 8.0, current=4.0)]}) == (
        "stoke.Loader(..., prefetch=8)")
    assert in_python({"changes": [change("threads", 2.0), change("workers", 7.0)]}) == (
        "stoke.Loader(..., workers=7)")
    assert in_python({"changes": [change("workers", direction=-1),
                                  change("prefetch", direction=-1)]}) == (
        "a smaller stoke.Loader(..., workers=..., prefetch=...)")
    # Settings the loader does not have, and a foreign job's shards: nothing to say.
    assert in_python({"changes": [change("power_limit", direction=1), change(
        "precision", to="bf16")]}) is None
    assert in_python({"changes": [change("data_format", to="shards")]}) is None
    assert in_python({"changes": []}) is None


def test_monitor_module_reads_no_english():
    # The numbers come from the findings' fields: no pattern matching of advice text.
    import stoke.monitor as m
    src = open(m.__file__, encoding="utf-8").read()
    assert "import re" not in src and "re." + "search" not in src


def test_short_run_names_the_python_argument():
    with stoke.Monitor(interval=5, gpu=False) as mon:
        pass  # stopped at once: too short even for the sample taken at stop
    text = mon.diagnosis()
    assert "--interval" not in text
    assert "too few samples (0)" in text and "a shorter stoke.Monitor(interval=...)" in text


def test_a_loop_shorter_than_the_interval_is_judged(tmp_path):
    # stop() samples the whole loop: one sample, in the history and the log, judged
    log = tmp_path / "short.jsonl"
    with stoke.Monitor(interval=5, gpu=False, jsonl=str(log)) as mon:
        t = time.monotonic()
        while time.monotonic() - t < 0.2:  # longer than stop()'s shortest sample; not judged
            pass
    assert mon.summary()["samples"] == 1
    assert len(log.read_text().splitlines()) == 1
    text = mon.diagnosis()
    assert text.startswith("diagnosis: ") and "too few samples" not in text, text


def test_no_gpu_gives_the_reason():
    with stoke.Monitor(interval=0.05, gpu=False) as mon:
        wait_samples(mon, 1)
    assert mon.latest()["gpus"] == [] and mon.gpu_count == 0
    assert mon.gpu_note == "GPU sampling disabled"
    # Without NVML, the reason names the library that could not be loaded.
    out = doubles.run(
        "import json, stoke, time\n"
        "with stoke.Monitor(interval=0.05) as m:\n"
        "    while not m.latest(): time.sleep(0.01)\n"
        "print(json.dumps({'gpus': m.latest()['gpus'], 'note': m.gpu_note}))\n",
        nvml="/nonexistent/libnvidia-ml.so.1")
    assert out["gpus"] == []
    assert out["note"].startswith("no NVIDIA GPU: ")
    assert "/nonexistent/libnvidia-ml.so.1" in out["note"]


def test_fake_gpu_in_latest_summary_and_diagnosis(tmp_path):
    nvml, cudart = doubles.fake_libs()
    scenario = tmp_path / "busy.gpu"
    # A GPU that stays mostly idle (util 9-13%) while this process holds 7.5 GB on it.
    scenario.write_text(
        "driver 550.54.15\ncuda 12040\n"
        'device name="NVIDIA GeForce RTX 3090" uuid=GPU-py bus=00000000:01:00.0 '
        "memory=24000000000 cc=8.6 sm=82 power_limit=350000 max_sm_clock=2100 pcie_gen=4 "
        "pcie_width=16\n"
        "sample util=11 mem_util=4 mem_used=8000000000 power=120000 temp=48 sm_clock=1395 "
        "throttle=0x1 pcie_rx=90000 pcie_tx=2000\n"
        "sample util=9 mem_util=3 mem_used=8000000000 power=115000 temp=48 sm_clock=1395 "
        "throttle=0x1 pcie_rx=85000 pcie_tx=2000\n"
        "sample util=13 mem_util=5 mem_used=8000000000 power=125000 temp=49 sm_clock=1395 "
        "throttle=0x1 pcie_rx=95000 pcie_tx=2000\n"
        "proc pid=self mem=7500000000\n")
    out = doubles.run(
        "import json, stoke, time\n"
        "with stoke.Monitor(interval=0.05) as m:\n"
        "    while not m.latest() or m.latest()['seq'] < 4: time.sleep(0.01)\n"
        "print(json.dumps({'latest': m.latest(), 'count': m.gpu_count, 'note': m.gpu_note,\n"
        "                  'summary': m.summary(), 'findings': m.findings(),\n"
        "                  'diagnosis': m.diagnosis(), 'line': m.line()}))\n",
        scenario=scenario, nvml=nvml, cudart=cudart)
    assert out["count"] == 1 and out["note"] == ""
    g = out["latest"]["gpus"][0]
    assert g["index"] == 0 and g["util_pct"] in (9, 11, 13)
    assert g["mem_total_bytes"] == 24000000000 and g["mem_used_bytes"] == 8000000000
    assert g["proc_mem_bytes"] == 7500000000
    assert out["latest"]["proc"]["gpu_mem_bytes"] == 7500000000
    assert "GPU " in out["line"] and "VRAM 8.0/24.0 GB" in out["line"]
    sg = out["summary"]["gpus"][0]
    assert sg["mem_total_bytes"] == 24000000000
    assert sg["metrics"]["util_pct"]["max"] <= 13
    low = [f for f in out["findings"] if f["id"] == "low-gpu-util"]
    assert low and low[0]["gpu"] == 0
    # The numbers of the text, as fields: the utilization it read and the workers it asks.
    check_fields(low[0])
    assert low[0]["program"] == "external"
    assert 9 <= low[0]["figures"]["gpu_util_median"]["value"] <= 13
    assert low[0]["figures"]["gpu_util_median"]["unit"] == "%"
    workers = low[0]["changes"][0]
    assert workers["setting"] == "workers" and workers["direction"] == 1
    assert f"try {int(workers['suggested'])})" in low[0]["advice"]
    assert f"stoke.Loader(..., workers={int(workers['suggested'])})" in out["diagnosis"]
    assert "[low-gpu-util]: GPU 0 utilization median" in out["diagnosis"]
    assert "  in Python: stoke.Loader(..., workers=" in out["diagnosis"]


@pytest.mark.parametrize("workers", [1, 0])
def test_a_starving_loader_shows_as_data_wait(tmp_path, workers):
    np = pytest.importorskip("numpy")
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "train.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["x"] = rng.random((512, 3, 64, 64), dtype=np.float32)
        f["y"] = rng.integers(0, 10, 512).astype(np.int64)
    ds = stoke.Dataset(str(path), input="x", target="y")
    # The loop does nothing with its batches while every sample is resized and
    # jittered (by one worker, or by the loop itself): it waits for data nearly all
    # the time.
    loader = stoke.Loader(ds, batch_size=32, workers=workers, prefetch=2, output="numpy",
                          transforms=[stoke.Resize(160), stoke.ColorJitter(0.4, 0.4),
                                      stoke.HFlip(), stoke.Normalize()])
    with stoke.Monitor(interval=0.05) as mon:
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            for batch in loader:
                del batch
            epoch += 1
            if mon.summary()["metrics"].get("data_wait_pct", {}).get("n", 0) >= 6:
                break
            assert epoch < 500, "the monitor never saw the loader's windows"
    assert mon.latest()["pipeline"]["workers"] == workers
    assert "DATA " in mon.line()
    summary = mon.summary()
    assert summary["pipeline"]["batches"] > 0 and summary["pipeline"]["slots"] == 2
    findings = mon.findings()
    assert findings and findings[0]["id"] == "data-wait"
    wait = findings[0]
    check_fields(wait)
    assert wait["figures"]["data_wait_median"]["value"] >= 10
    assert wait["figures"]["workers"]["value"] == workers
    assert wait["figures"]["prefetch"] == {"value": 2.0, "unit": "batches"}
    asked = {c["setting"]: c for c in wait["changes"]}
    if "workers" in asked:
        assert asked["workers"]["current"] == workers
        assert wait["python"].startswith(
            f"stoke.Loader(..., workers={int(asked['workers']['suggested'])}")
    text = mon.diagnosis()
    assert text.startswith("diagnosis: bounded by input pipeline (data loader)")
    assert "[data-wait]: the training loop waited for data" in text
    assert f"  in Python: {findings[0]['python']}\n" in text
    if workers == 0:
        # The loop did the work itself: the advice is to start workers, in Python.
        assert "run 1 loader worker" in findings[0]["advice"] or \
            "loader workers (now 0" in findings[0]["advice"]
        assert findings[0]["python"].startswith("stoke.Loader(..., workers=")
