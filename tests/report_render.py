"""report_render.py STOKE FAKE_NVML SCENARIOS WORKDIR - `stoke report` as a person sees
it: pages of real runs (`stoke train --log`, `stoke monitor --jsonl` on the fake GPU,
`stoke train --report`, `stoke monitor --report`) and of synthetic logs (one point, NaN
losses, empty, only a start record, a million step records, every input kind), each
rendered by Debian's chromium headless. For every page: every expected figure is in the
DOM; every series path has data-points == the points in its d == the count the fixture
gives (capped by the downsampler); the screenshot is a PNG of the window's size that is
not one flat colour; chromium logged no console message or CSP violation and requested
nothing but file:, data: and about: URLs. A deliberately bad page (an external image and
a script logging an error) must fail the same checks. Exit 77 (skipped) only when
chromium is missing. docs/report.md."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

stoke, fake_nvml, scenarios, work = sys.argv[1:5]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    print("skipped: chromium not found (Debian's chromium package renders the pages)")
    sys.exit(77)
from PIL import Image  # python3-pil, installed with chromium by scripts/deps

CAP = 2000  # RP_MAX_POINTS
WIN = (900, 2400)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(cmd, env=None, ok=(0,)):
    e = dict(os.environ, **(env or {}))
    # no clock anywhere here: a hang is bounded by ctest's TIMEOUT, not by a number of seconds
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if p.returncode not in ok:
        fail(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def chromium(args, page):
    with tempfile.TemporaryDirectory() as prof:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", f"--user-data-dir={prof}", "--no-first-run",
               "--enable-logging=stderr", "--v=0", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-default-apps",
               "--disable-extensions", "--no-pings", "--disable-features=SpellCheck,Translate,"
               "OptimizationHints,MediaRouter,AutofillServerCommunication"] + args + ["file://" + os.path.abspath(page)]
        return subprocess.run(cmd, capture_output=True, text=True)


POINT = re.compile(r"-?\d+(?:\.\d+)?,-?\d+(?:\.\d+)?")
PATH = re.compile(r"<path\b([^>]*)>")
ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def page_requests(netlog, problems):
    """The URLs the page requested, from chromium's net log. chromium's own requests
    (its component updater, clock check, account list: initiator "not an origin"; the
    flags above turn most of them off) are the browser's, not the page's; every other
    request counts, whatever its initiator."""
    try:
        with open(netlog, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        problems.append(f"no net log: {e}")
        return []
    try:
        d = json.loads(text)
    except ValueError:  # cut short: close the event list
        try:
            d = json.loads(text.rstrip().rstrip(",") + "]}")
        except ValueError:
            problems.append("the net log is not JSON")
            return []
    start = (d.get("constants") or {}).get("logEventTypes", {}).get("URL_REQUEST_START_JOB")
    if start is None:
        problems.append("the net log has no URL_REQUEST_START_JOB event type")
    urls = []
    for e in d.get("events", []):
        p = e.get("params") or {}
        if e.get("type") == start and "url" in p and p.get("initiator") != "not an origin":
            urls.append(p["url"])
    return urls


def render(page, name):
    """The page through chromium: (dom, problems), the screenshot checked."""
    problems = []
    netlog = os.path.join(work, name + ".netlog.json")
    p = chromium(["--dump-dom", f"--log-net-log={netlog}"], page)
    dom = p.stdout
    if p.returncode != 0 or "<html" not in dom:
        problems.append(f"--dump-dom exited {p.returncode}: {p.stderr[-1500:]}")
    for line in p.stderr.splitlines():
        if "CONSOLE" in line or "Content Security Policy" in line:
            problems.append("console: " + line.strip()[:300])
    for url in page_requests(netlog, problems):
        if not url.startswith(("file:", "data:", "about:")):
            problems.append("network request: " + url)
    png = os.path.join(work, name + ".png")
    p = chromium([f"--screenshot={png}", f"--window-size={WIN[0]},{WIN[1]}",
                  "--hide-scrollbars"], page)
    try:
        with Image.open(png) as im:
            if im.format != "PNG" or im.size != WIN:
                problems.append(f"screenshot: {im.format} {im.size}, not a PNG of {WIN}")
            lo, hi = zip(*im.convert("RGB").getextrema())
            if lo == hi:
                problems.append("screenshot: one flat colour")
    except OSError as e:
        problems.append(f"screenshot: {e} ({p.stderr[-500:]})")
    return dom, problems


def series_of(dom):
    """[(figure id, series name, data-points, points in d)]"""
    out = []
    for fig in re.finditer(r'<figure class="plot"[^>]*id="([^"]*)"(.*?)</figure>', dom, re.S):
        for m in PATH.finditer(fig.group(2)):
            a = dict(ATTR.findall(m.group(1)))
            if "series" in a.get("class", "").split():
                out.append((fig.group(1), a.get("data-series"), int(a.get("data-points", -1)),
                            len(POINT.findall(a.get("d", "")))))
    return out


def check_page(name, page, figures=(), empty=(), expect=None, texts=()):
    """figures: ids drawn; empty: ids that must say why; expect: series -> count."""
    dom, problems = render(page, name)
    for p in problems:
        fail(f"{name}: {p}")
    for fid in figures:
        if not re.search(rf'<figure class="plot" id="{re.escape(fid)}"><svg', dom):
            fail(f"{name}: figure {fid} not drawn")
    for fid in empty:
        if not re.search(rf'<figure class="plot empty" id="{re.escape(fid)}"><p class="nodata">'
                         r"[^<]+</p></figure>", dom):
            fail(f"{name}: figure {fid} is not an empty plot saying why")
    ser = series_of(dom)
    for fid, s, n, d in ser:
        if n != d or n < 1:
            fail(f"{name}: {fid}/{s}: data-points {n} but {d} points in d")
        want = (expect or {}).get(s)
        if want is not None and "band" not in s:
            # downsampled: at most the cap (a flat stretch gives one point, not two)
            if n != want if want <= CAP else not (0 < n <= CAP):
                fail(f"{name}: {fid}/{s}: {n} points, the fixture gives {want} (cap {CAP})")
    for s in (expect or {}):
        if not any(x[1] == s for x in ser):
            fail(f"{name}: series {s} not drawn")
    for t in texts:
        if t not in dom:
            fail(f"{name}: the page does not say {t!r}")
    print(f"{name}: {len(ser)} series checked, {len(figures)} figures, {len(empty)} empty")
    return dom


def report(name, *inputs, ok=(0,)):
    out = os.path.join(work, name + ".html")
    p = run([stoke, "report", *inputs, "-o", out], ok=ok)
    return out, p


def lines(path):
    return [json.loads(x) for x in open(path) if x.strip()]


def count(recs, key, types=("step",), finite=True):
    return sum(1 for r in recs if r.get("type") in types and isinstance(r.get(key), (int, float)))


# ---- the negative control: the checks can fail ----
bad = os.path.join(work, "bad.html")
with open(bad, "w") as f:
    f.write('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
            '<script>console.error("deliberate error")</script></body></html>')
_, probs = render(bad, "bad")
if not any(p.startswith("console:") for p in probs):
    fail("negative control: the console error was not caught")
if not any("127.0.0.1:9" in p for p in probs):
    fail("negative control: the request to 127.0.0.1:9 was not caught")
print("negative control caught:", len(probs), "problems")

# ---- a real training run, and a real monitor on the fake GPU ----
runlog = os.path.join(work, "run.jsonl")
run([stoke, "train", "--model", "mlp", "--epochs", "2", "--limit", "3000", "--val-limit", "500",
     "--log", runlog, "--log-every", "2"])
recs = lines(runlog)
monlog = os.path.join(work, "mon.jsonl")
gpu_env = {"STOKE_NVML_LIBRARY": fake_nvml,
           "STOKE_FAKE_GPU_SCENARIO": os.path.join(scenarios, "monitor_throttle.gpu")}
run([stoke, "monitor", "--interval", "0.05", "--jsonl", monlog, "--", "sleep", "1"], env=gpu_env)
mrecs = [r for r in lines(monlog) if "type" not in r]
run_expect = {"loss": count(recs, "loss"), "lr": count(recs, "lr"),
              "samples_per_s": count(recs, "samples_per_s"),
              "val_acc": count(recs, "val_acc", ("epoch", "eval")),
              "acc": count(recs, "acc", ("epoch",))}
mon_expect = {"cpu_pct": sum(1 for r in mrecs if "cpu_pct" in r),
              "gpu0_util_pct": sum(1 for r in mrecs if "util_pct" in (r.get("gpus") or [{}])[0])}
train_figs = ["loss", "accuracy", "loss-time", "accuracy-time", "lr", "throughput", "data-wait",
              "breakdown"]
page, _ = report("real", runlog, monlog)
check_page("real", page, train_figs + ["cpu", "host-mem", "gpu0-0", "gpu0-1", "gpu0-2",
                                       "gpu0-3"],
           expect={**run_expect, **mon_expect}, texts=["shaded: throttled", 'class="throttle"'])

# ---- every input kind, synthetic: findings, wait histogram, diagnosis, bench, tune ----
full_run = os.path.join(work, "full.jsonl")
finding = {"rule": "data-wait", "resource": "loader", "gpu": None, "rank": None,
           "evidence": "the loop waited for data 62% of the time",
           "advice": "run 2 loader workers, --workers 2",
           "figures": {"data_wait_median": {"value": 62, "unit": "%"}},
           "changes": [{"setting": "workers", "unit": "workers", "current": 0, "suggested": 2,
                        "direction": 1, "to": None}]}
with open(full_run, "w") as f:
    f.write(json.dumps({"type": "start", "time": 1, "model": "cnn <&>", "dataset": "d",
                        "epochs": 3, "batch": 64, "device": "cpu"}) + "\n")
    for e in range(3):
        for s in range(1, 41):
            st = e * 40 + s
            f.write(json.dumps({"type": "step", "time": 1 + st, "elapsed": st * 0.1, "epoch": e,
                                "step": st, "loss": 2.0 / (1 + st * 0.05),
                                "batch_loss": 2.1 / (1 + st * 0.05), "lr": 0.05,
                                "samples_per_s": 1000 + st, "data_wait_pct": 60,
                                "input_pct": 50, "forward_pct": 10, "backward_pct": 20,
                                "optimizer_pct": 5}) + "\n")
        f.write(json.dumps({"type": "finding", "time": 2, "elapsed": 1, "epoch": e,
                            "step": e * 40 + 40, **finding}) + "\n")
        f.write(json.dumps({"type": "epoch", "time": 5, "elapsed": (e + 1) * 4, "epoch": e,
                            "step": e * 40 + 40, "loss": 1, "acc": 0.5 + e * 0.1,
                            "val_loss": 1.1, "val_acc": 0.55 + e * 0.1, "samples_per_s": 1000,
                            "mfu_pct": 30 + e,
                            "wait_hist": {"edges_ms": [0, 0.1, 1, 10, 100],
                                          "counts": [5, 10, 20, 4, 1], "batches": 40,
                                          "p50_ms": 0.8, "p95_ms": 9.5, "max_ms": 150 + e}})
                + "\n")
full_mon = os.path.join(work, "full-mon.jsonl")
with open(full_mon, "w") as f:
    for i in range(50):
        f.write(json.dumps({"seq": i + 1, "t": i * 0.5, "time": 1 + i, "cpu_pct": 50 + i % 7,
                            "mem_used_bytes": 2 << 30,
                            "pipeline": {"wait_p95_ms": 3 + i % 3, "wait_max_ms": 20}}) + "\n")
    f.write(json.dumps({"type": "diagnosis", "time": 30, "t": 25,
                        "findings": [dict(finding, rule="cpu-bound", evidence="CPU 97%")]})
            + "\n")
bench = os.path.join(work, "bench.json")
meas = {"samples_per_s": 241.5, "batch": 4, "seconds": 1.6, "data_wait_pct": 0.5,
        "cpu_pct": 91, "gpu_pct": None, "mfu_pct": 1.9, "peak_rss_bytes": 190648320}
with open(bench, "w") as f:
    json.dump({"schema": "stoke-bench/1", "model": "cnn",
               "configurations": {"naive": {"measured": meas, "diagnoses": []},
                                  "tuned": {"measured": dict(meas, samples_per_s=1113.0,
                                                             batch=128), "diagnoses": []}},
               "speedup": 4.61,
               "robustness": {"ran": True, "delay_us": 8982, "passed": True,
                              "verdict": "input-bound (data-wait)", **finding}}, f, indent=2)
tune = os.path.join(work, "tune.json")
trial = {"batch_size": 128, "workers": 0, "prefetch": 2, "threads": 2, "precision": "fp32",
         "ran": True, "samples_per_s": 7000}
with open(tune, "w") as f:
    json.dump({"trials": [dict(trial, stage="start"), dict(trial, workers=1, stage="workers",
                                                           samples_per_s=7800),
                          dict(trial, batch_size=4096, stage="batch", ran=False,
                               error="out of memory <at> batch 4096")],
               "chosen": dict(trial, workers=1, samples_per_s=7800), "why": {}, "seconds": 4},
              f)
page, _ = report("full", tune, bench, full_mon, full_run)  # any order
check_page("full", page, train_figs + ["mfu", "cpu", "host-mem", "wait-hist", "pipeline-wait",
                                       "tune"],
           expect={"loss": 120, "val_acc": 3, "mfu_pct": 3, "cpu_pct": 50, "wait_p95_ms": 50},
           texts=["data-wait", "--workers 2", "cpu-bound", "4.61x", "1113", "(chosen)",
                  "failed: out of memory &lt;at&gt; batch 4096", "p95 9.5 ms", "max 152 ms",
                  "120 batches", "cnn &lt;&amp;&gt;", "copy", 'data-series="data_wait"'])

# ---- one point, NaN losses, empty, only a start record ----
one = os.path.join(work, "one.jsonl")
with open(one, "w") as f:
    f.write(json.dumps({"type": "start", "time": 1, "model": "mlp"}) + "\n")
    f.write(json.dumps({"type": "step", "time": 2, "elapsed": 0.5, "epoch": 0, "step": 10,
                        "loss": 1.25, "lr": 0.1}) + "\n")
page, _ = report("one", one)
check_page("one", page, ["loss", "lr"], expect={"loss": 1, "lr": 1},
           texts=["one point, 1.25 at step 10", 'class="marker"'])
nan = os.path.join(work, "nan.jsonl")
with open(nan, "w") as f:
    f.write(json.dumps({"type": "start", "time": 1, "model": "mlp"}) + "\n")
    for s in range(1, 31):
        f.write(json.dumps({"type": "step", "time": 2, "elapsed": s * 0.1, "epoch": 0, "step": s,
                            "loss": None if s in (12, 13, 20) else 1.0 / s}) + "\n")
page, _ = report("nan", nan)
check_page("nan", page, ["loss", "loss-time"], expect={"loss": 27},
           texts=["3 of 30 losses are NaN, the first at step 12"])
empty = os.path.join(work, "run-empty.jsonl")
open(empty, "w").close()
page, _ = report("empty", empty)
check_page("empty", page, [], empty=["loss", "accuracy", "lr", "breakdown", "wait-hist"],
           texts=[f"{empty} is empty"])
start = os.path.join(work, "start.jsonl")
with open(start, "w") as f:
    f.write(json.dumps({"type": "start", "time": 1, "model": "mlp"}) + "\n")
page, _ = report("start", start)
check_page("start", page, [], empty=["loss", "accuracy", "lr", "breakdown"],
           texts=["has only its start record"])

# ---- bad inputs: named, nothing written ----
junk = os.path.join(work, "junk.txt")
with open(junk, "w") as f:
    f.write("\nhello\n")
out, p = report("junk", junk, ok=(1,))
if f"{junk}:2:" not in p.stderr or os.path.exists(out):
    fail(f"junk input: {p.stderr!r}, page written: {os.path.exists(out)}")
out, p = report("two", runlog, runlog, ok=(1,))
if "both a training log" not in p.stderr:
    fail(f"two run logs: {p.stderr!r}")

# ---- a million step records: bounded, under 3 MB ----
big = os.path.join(work, "million.jsonl")
with open(big, "w") as f:
    f.write('{"type":"start","time":1,"model":"mlp"}\n')
    for s in range(1, 1000001):
        f.write('{"type":"step","elapsed":%g,"step":%d,"loss":%g,"lr":0.1,"forward_pct":30}\n'
                % (s * 0.001, s, 1.0 + (s % 1000) * 1e-3 + (5 if s == 424242 else 0)))
page, _ = report("million", big)
os.unlink(big)
size = os.path.getsize(page)
if size >= 3 << 20:
    fail(f"million: the page is {size} bytes, not under 3 MB")
check_page("million", page, ["loss", "lr", "breakdown"], expect={"loss": 1000000, "lr": 1000000},
           texts=["downsampled to", "of 1000000 points"])
print(f"million: {size} bytes")

# ---- the hooks: stoke train --report, stoke monitor --report ----
tr = os.path.join(work, "train-report.html")
run([stoke, "train", "--model", "mlp", "--epochs", "2", "--limit", "6000", "--val-limit", "500",
     "--report", tr])
check_page("train-report", tr, train_figs)
if [x for x in os.listdir(work) if x.startswith(".train-report")]:
    fail("train --report left its temporary files")
# a stopped run writes its page too, and keeps the stop's exit status
import signal
import time
sr, slog = os.path.join(work, "stopped-report.html"), os.path.join(work, "stopped.jsonl")
proc = subprocess.Popen([stoke, "train", "--model", "mlp", "--epochs", "1000", "--limit", "6000",
                         "--log", slog, "--log-every", "1", "--report", sr],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
while proc.poll() is None:  # until the log has a step record: the loop is running
    if os.path.exists(slog) and '"type":"step"' in open(slog).read():
        break
    time.sleep(0.1)
proc.send_signal(signal.SIGINT)
_, err = proc.communicate()
if proc.returncode != 130 or not os.path.exists(sr):
    fail(f"train --report stopped by SIGINT: exit {proc.returncode}, page written "
         f"{os.path.exists(sr)}: {err[-1000:]}")
else:
    check_page("stopped-report", sr, ["loss", "lr"])
mo = os.path.join(work, "monitor-report.html")
run([stoke, "monitor", "--interval", "0.05", "--report", mo, "--", "sleep", "0.5"], env=gpu_env)
check_page("monitor-report", mo, ["cpu", "gpu0-0"], empty=["loss"])
bad_out = os.path.join(work, "no-such-dir", "r.html")
p = run([stoke, "monitor", "--interval", "0.05", "--report", bad_out, "--", "true"], ok=(1,))
if "--report" not in p.stderr:
    fail(f"monitor --report into a missing directory: {p.stderr!r}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all pages render")
