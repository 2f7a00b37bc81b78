"""The monitor (the sampler of `stoke monitor`, watching this Python process) and the
machine's probe and recommendations (docs/python.md)."""
import warnings

from . import _stoke
from ._stoke import Error

__all__ = ["Monitor", "probe", "recommend"]

# The findings' changes (src/monitor/rules.c, docs/monitor.md) that stoke.Loader sets,
# and the data format it reads once converted.
_LOADER = ("workers", "prefetch")
_RECORDS = "stoke-records"


def in_python(finding):
    """The stoke.Loader settings (and the one-off conversion) a finding asks for, from
    its `changes`, as a short line of Python; None when it asks for nothing the loader
    sets."""
    changes = {c["setting"]: c for c in finding["changes"]}
    args, fewer = [], False
    for name in _LOADER:
        c = changes.get(name)
        if c is None:
            continue
        if c["suggested"] is not None:
            args.append(f"{name}={int(c['suggested'])}")
        elif c["direction"] < 0:
            fewer = True
    parts = []
    if args:
        parts.append("stoke.Loader(..., " + ", ".join(args) + ")")
    elif fewer:
        parts.append("a smaller stoke.Loader(..., workers=..., prefetch=...)")
    fmt = changes.get("data_format")
    if fmt is not None and fmt["to"] == _RECORDS:
        # In a script the first thing to try is simpler than a conversion: a dataset that
        # fits in memory is read once and never again from storage.
        parts.append("stoke.Dataset(..., in_memory=True) if it fits in memory, else convert "
                     "once in a shell (stoke data convert SRC DST), then stoke.Dataset(DST)")
    return "; ".join(parts) or None


def _translate(text, findings):
    """Adds an `in Python:` line under each finding's `change:` line (the diagnosis
    prints one per finding, in the order of `findings`) that names loader settings."""
    out = []
    pending = iter(findings)
    for line in text.splitlines(keepends=True):
        # The command line's flag, as the Python argument.
        out.append(line.replace("a shorter --interval", "a shorter stoke.Monitor(interval=...)"))
        if line.startswith("  change: "):
            hint = in_python(next(pending))
            if hint:
                out.append(f"  in Python: {hint}\n")
    return "".join(out)


class Monitor:
    """Samples this process (its threads and children), the system and the NVIDIA
    GPUs every `interval` seconds on a thread of its own, like `stoke monitor`.

    `jsonl`: a file that gets one JSON object per sample (docs/monitor.md).
    `live`: print the live line to stderr at each sample (one refreshed line on a
    terminal, otherwise plain lines at most about once a second).
    `pid`: None watches this process, a PID that process and its descendants, 0 the
    whole system. `gpu=False` does not load NVML. `data`: where the dataset lives; slow
    storage there (rotational, network) feeds the I/O rule, as `stoke monitor --data`.

    As a context manager it starts on enter and stops on exit; summary(), findings()
    and diagnosis() are meant for after the run, but work at any time (a running
    monitor pauses for a moment while the history is read).
    """

    def __init__(self, interval=0.5, jsonl=None, live=False, pid=None, gpu=True, data=None):
        self._m = _stoke.Monitor(interval=interval, pid=pid, no_gpu=not gpu, jsonl=jsonl,
                                 live=bool(live), data=data)

    def start(self):
        """Starts sampling; a monitor started again continues its history and log."""
        self._m.start()
        return self

    def stop(self):
        """Stops sampling (the log file is then complete and closed). Raises the first
        error of the sampler or of writing `jsonl`, once."""
        self._m.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
            return False
        # The body's exception is the one to see; a monitor error is only a warning.
        try:
            self.stop()
        except Error as e:
            warnings.warn(f"stoke.Monitor: {e}", RuntimeWarning, stacklevel=2)
        return False

    @property
    def running(self):
        return self._m.running

    @property
    def gpu_count(self):
        """GPUs sampled."""
        return self._m.gpu_count

    @property
    def gpu_note(self):
        """Why no GPU is sampled ("no NVIDIA GPU: ..."), or "" when some are."""
        return self._m.gpu_note

    @property
    def pid(self):
        """The watched root; 0 when the whole system is sampled."""
        return self._m.pid

    def latest(self):
        """The latest sample as a dict with the keys of a JSON line (docs/monitor.md):
        readings that are not available are absent; "gpus" is always a list. None
        before the first sample."""
        return self._m.latest()

    def line(self):
        """The live line of the latest sample ("CPU 45% | RAM ... | JOB ..."), "" if
        there is none yet."""
        return self._m.line()

    def summary(self):
        """The run so far: {"samples", "duration_s", "startup_s" and
        "startup_samples" (the time before the job's first GPU work, left out of the
        figures), "ncpu", "usable_cpus", "mem_total_bytes", "pid", "metrics": {name:
        {n, min, median, p95, max, mean, unit}}, "gpus": [{index, ..., "metrics":
        {...}}], "pipeline": {...} when a stoke.Loader reported}."""
        return self._m.summary()

    def findings(self):
        """The diagnosis rules that fired, in the order `stoke monitor` prints them:
        dicts {id, kind, resource, gpu, program, evidence, advice, figures, changes,
        python}. `figures` are the run's numbers the rule read ({name: {value, unit}}),
        `changes` the settings the advice asks for ([{setting, unit, current, suggested,
        direction, to}], docs/monitor.md); the two texts render them. `python` says the
        changes as stoke.Loader settings, or is None."""
        found = self._m.findings()
        for f in found:
            f["python"] = in_python(f)
        return found

    def diagnosis(self):
        """The diagnosis `stoke monitor` prints, with each loader setting it advises
        also given as a stoke.Loader argument."""
        return _translate(*self._m.diagnosis(True))

    def report(self):
        """The min/median/p95/max table of every series, then diagnosis()."""
        return _translate(*self._m.report(True))

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return f"<stoke.Monitor pid={self.pid} {state}>"


def probe(data=None):
    """What `stoke probe` reports, as a dict: "cpu", "openblas", "memory", "storage"
    (under `data`, if given), "gpus" (a list, empty without NVIDIA GPUs), "gpu_note"
    (why there are none), driver and CUDA versions. Unknown facts are None."""
    return _stoke.probe(data)


def recommend():
    """The settings stoke recommends for this machine: a list of dicts {key, device
    ("cpu" or a GPU index), type, known, value, reason}."""
    return _stoke.recommend()
