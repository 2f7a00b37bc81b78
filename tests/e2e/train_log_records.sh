#!/bin/sh
# train_log_records.sh STOKE WORKDIR - the records of `stoke train --log` that `stoke
# report` draws from: a run made input-bound (--loader-delay-us) logs each finding it
# prints as a finding record with the same rule, texts and figures, and every epoch
# record carries the histogram of the epoch's waits for batches. No timing thresholds:
# which input rule fires and the waits' sizes are the machine's; their agreement is not.
set -u
stoke=$1
work=$2
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
py=/usr/bin/python3

# 5 ms more CPU per sample with one worker: the loop waits for most of each epoch
"$stoke" train --limit 640 --val-limit 100 --batch-size 64 --epochs 2 --threads 1 --workers 1 \
    --loader-delay-us 5000 --log "$work/slow.jsonl" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "an input-bound run"; else fail "train exit $rc"; show "$out"; fi
if "$py" - "$work/slow.jsonl" "$out" <<'PY'; then ok "finding records: the printed warnings, in numbers"; else fail "finding records"; show "$out"; fi
import json, math, re, sys
def strict(s):  # JSON has no NaN: a NaN or Infinity in the log is a bug
    raise ValueError("not JSON: " + s)
recs = [json.loads(l, parse_constant=strict) for l in open(sys.argv[1])]
printed = re.findall(r"^warning: ([a-z0-9-]+): (.*)$", open(sys.argv[2]).read(), re.M)
found = [r for r in recs if r["type"] == "finding"]
assert printed, "no warning printed: the run was not input-bound"
assert [r["rule"] for r in found] == [p[0] for p in printed], (found, printed)
input_rules = {"data-wait", "input-bound-cpu", "input-bound-thread"}
assert input_rules & {r["rule"] for r in found}, "no input rule fired"
epochs = {r["epoch"] for r in recs if r["type"] == "epoch"}
for r, (rule, text) in zip(found, printed):
    assert set(r) == {"type", "time", "elapsed", "epoch", "step", "rule", "resource", "gpu",
                      "rank", "evidence", "advice", "figures", "changes"}, sorted(r)
    assert text == r["evidence"] + "; " + r["advice"], (text, r)
    assert r["epoch"] in epochs and r["step"] > 0 and r["resource"], r
    assert r["gpu"] == -1 and r["rank"] == -1, r  # on the CPU, one process
    assert r["figures"], r
    for name, f in r["figures"].items():
        assert set(f) == {"value", "unit"} and isinstance(f["unit"], str), (name, f)
        assert f["value"] is None or math.isfinite(f["value"]), (name, f)
    for c in r["changes"]:
        assert set(c) == {"setting", "unit", "current", "suggested", "direction", "to"}, c
        assert c["direction"] in (-1, 0, 1), c
    # the evidence is rendered from the figures
    if "data_wait_median" in r["figures"]:
        v = r["figures"]["data_wait_median"]["value"]
        assert f"waited for data {v:.0f}% of the time" in r["evidence"], (v, r["evidence"])
    if r["rule"] == "data-wait":
        v = r["figures"]["wait_avg_ms"]["value"]
        assert f"per batch avg {v:.1f} ms" in r["evidence"], (v, r["evidence"])
PY
if "$py" - "$work/slow.jsonl" <<'PY'; then ok "epoch records: the waits' histogram"; else fail "wait_hist"; fi
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
epochs = [r for r in recs if r["type"] == "epoch"]
assert len(epochs) == 2, len(epochs)
edges = [0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100,
         200, 500, 1000, 2000, 5000, 10000]
for e in epochs:
    h = e["wait_hist"]
    assert set(h) == {"edges_ms", "counts", "batches", "p50_ms", "p95_ms", "max_ms"}, sorted(h)
    assert h["edges_ms"] == edges, h["edges_ms"]
    assert len(h["counts"]) == len(edges) and all(c >= 0 for c in h["counts"]), h
    assert sum(h["counts"]) == h["batches"] == 10, h  # 640 samples at 64: this epoch's own
    assert 0 <= h["p50_ms"] <= h["p95_ms"] <= h["max_ms"], h
    # the max lies in the last bucket counted, the percentiles within the counted range
    last = max(i for i, c in enumerate(h["counts"]) if c)
    first = min(i for i, c in enumerate(h["counts"]) if c)
    assert edges[last] <= h["max_ms"] and (last == len(edges) - 1 or h["max_ms"] < edges[last + 1]), h
    assert h["p50_ms"] >= edges[first], h
PY

# without the monitor nothing is diagnosed, and an epoch's histogram is still there
"$stoke" train --limit 256 --val-limit 64 --batch-size 64 --epochs 1 --threads 1 --no-monitor \
    --log "$work/quiet.jsonl" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && "$py" - "$work/quiet.jsonl" <<'PY'; then ok "--no-monitor: no finding, the histogram"; else fail "--no-monitor run (exit $rc)"; show "$out"; fi
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert not [r for r in recs if r["type"] == "finding"], recs
(e,) = [r for r in recs if r["type"] == "epoch"]
assert sum(e["wait_hist"]["counts"]) == e["wait_hist"]["batches"] == 4, e["wait_hist"]
PY

e2e_end
