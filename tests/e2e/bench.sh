#!/bin/sh
# bench.sh STOKE WORKDIR - `stoke bench` on a small prefix of Fashion-MNIST: the
# before/after table with a number (or "-") in every cell, the JSON report valid
# against docs/bench.md's schema, the robustness run diagnosed input-bound with the
# fix; absurd flags, an unwritable --json, SIGINT and SIGTERM fail cleanly with no partial JSON.
# No timing thresholds: the figures are checked for being numbers, not for their size.
set -u
stoke=$1
work=$2
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
small="--limit 2000 --val-limit 100"

# --- a whole run: table, JSON, robustness
"$stoke" bench $small --steps 6 --warmup 2 --json "$work/b.json" >"$out" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then ok "bench runs"; else fail "bench: exit $rc"; show "$out"; fi
if /usr/bin/python3 - "$out" <<'PY'; then ok "table: every row, a number or - in each cell"; else fail "table"; show "$out"; fi
import re, sys
text = open(sys.argv[1]).read()
rows = ["CPU utilization %", "GPU utilization %", "batch x accumulation", "samples/s",
        "data wait %", "step: input %", "step: forward %", "step: backward %",
        "step: optimizer %", "memory (plan)", "peak RSS", "MFU %", "speedup"]
assert re.search(r"^ +naive +tuned$", text, re.M), "no header"
num = r"(-|[0-9]+(\.[0-9]+)?( [kMGT]?B|x)?|[0-9]+ x [0-9]+)"
for r in rows:
    m = re.search(r"^  " + re.escape(r) + r" +(.+?) {2,}(.+)$", text, re.M)
    assert m, "no row " + r
    for c in (m.group(1).strip(), m.group(2).strip()):
        assert re.fullmatch(num, c), (r, c)
assert re.search(r"^  batch x accumulation +4 x 1 ", text, re.M), "naive batch"
assert re.search(r"^  speedup +1\.00x +[0-9.]+x$", text, re.M), "speedup"
assert "warm-up 2 steps" in text and "6 measured steps after 2 warm-up steps" in text
for s in ("naive settings:", "tuned settings:"):
    assert s in text, s
assert re.search(r"^  workers +0 +bench$", text, re.M), "naive workers from bench"
assert re.search(r"^  workers +[0-9]+ +(rule|measured|cached): ", text, re.M), "tuned workers decided"
assert re.search(r"^robustness: passed, [0-9]+ us more CPU per sample, [0-9]+ samples, [0-9]+ "
                 r"workers, data wait [0-9.]+%: input-bound \(", text, re.M), "robustness line"
assert re.search(r"^  advice: .*(--workers [0-9]|make per-sample work cheaper)", text, re.M), \
    "advice: more workers (--workers N) or cheaper per-sample work"
PY

if /usr/bin/python3 - "$work/b.json" <<'PY'; then ok "JSON: the schema of docs/bench.md"; else fail "JSON"; show "$work/b.json"; fi
import json, math, sys
o = json.load(open(sys.argv[1]))
def num(v, null=False):
    if v is None:
        assert null, "null where a number is due"
        return
    assert isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), v
assert set(o) == {"schema", "machine", "model", "dataset", "limit", "configurations",
                  "speedup", "robustness"}, sorted(o)
assert o["schema"] == "stoke-bench/1"
m = o["machine"]
assert isinstance(m["cpu"], str) and isinstance(m["gpus"], list)
num(m["usable_cpus"])
assert o["model"] == "cnn" and o["limit"] == 2000
assert set(o["configurations"]) == {"naive", "tuned"}
keys = ["batch_size", "accumulate", "workers", "prefetch", "threads", "precision", "device",
        "pinned", "lr"]
meas = {"warmup_steps", "steps", "samples", "seconds", "batch", "accumulate", "samples_per_s",
        "data_wait_pct", "step_pct", "cpu_pct", "gpu_pct", "mfu_pct", "plan_bytes",
        "peak_rss_bytes", "peak_rss_reset"}
for name, c in o["configurations"].items():
    assert set(c) == {"settings", "measured", "diagnoses"}, (name, sorted(c))
    assert list(c["settings"]) == keys, (name, list(c["settings"]))
    for k, s in c["settings"].items():
        assert set(s) == {"value", "source", "detail"}, (name, k, s)
        assert s["source"] in ("default", "file", "env", "flag", "checkpoint", "rule", "cached", "measured",
                               "bench"), (name, k, s)
        assert isinstance(s["detail"], str)
    x = c["measured"]
    assert set(x) == meas, (name, set(x) ^ meas)
    for k in meas - {"step_pct", "gpu_pct", "mfu_pct", "peak_rss_reset"}:
        num(x[k])
    num(x["gpu_pct"], null=True)
    num(x["mfu_pct"], null=True)
    assert isinstance(x["peak_rss_reset"], bool)
    assert set(x["step_pct"]) == {"input", "forward", "backward", "optimizer"}
    for v in x["step_pct"].values():
        num(v)
    assert x["warmup_steps"] == 2 and x["steps"] == 6, (name, x)
    assert x["samples"] == 6 * x["batch"] * x["accumulate"] or x["samples"] > 0
    assert isinstance(c["diagnoses"], list) and all(isinstance(d, str) for d in c["diagnoses"])
n = o["configurations"]["naive"]["settings"]
assert [n[k]["value"] for k in ("batch_size", "accumulate", "workers", "prefetch")] == [4, 1, 0, 2]
assert n["precision"]["value"] == "fp32" and n["precision"]["source"] == "bench"
t = o["configurations"]["tuned"]["settings"]
assert all(t[k]["source"] != "bench" for k in keys), t
assert abs(n["lr"]["value"] - t["lr"]["value"] * 4 / 128) < 1e-9, (n["lr"], t["lr"])
num(o["speedup"])
r = o["robustness"]
assert r["ran"] is True and r["passed"] is True, r
assert set(r) == {"ran", "delay_us", "limit", "workers", "data_wait_pct", "passed", "verdict",
                  "rule", "evidence", "advice", "figures", "changes"}, sorted(r)
for k in ("delay_us", "limit", "workers", "data_wait_pct"):
    num(r[k])
assert r["delay_us"] > 0
assert r["rule"] in ("data-wait", "input-bound-thread", "input-bound-cpu"), r["rule"]
assert r["verdict"].startswith("input-bound"), r["verdict"]
assert "--workers" in r["advice"] or "per-sample work cheaper" in r["advice"], r["advice"]
assert "num_workers" not in r["advice"]
# the same advice as numbers: more workers than the run had, or cheaper per-sample work
ch = {c["setting"]: c for c in r["changes"]}
assert ("workers" in ch and ch["workers"]["direction"] == 1 and
        (ch["workers"]["suggested"] is None or ch["workers"]["suggested"] > r["workers"])) \
    or "per_sample_work" in ch, r["changes"]
assert all(isinstance(v["value"], (int, float)) or v["value"] is None for v in r["figures"].values())
assert r["figures"], r
PY

# --- --no-robustness says so in both forms
"$stoke" bench --limit 200 --val-limit 50 --steps 1 --warmup 1 --no-robustness \
    --json "$work/n.json" >"$out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^robustness: skipped (--no-robustness)$" "$out" &&
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["robustness"]; assert r == {"ran": False, "skipped": "--no-robustness"}, r' "$work/n.json"; then
    ok "--no-robustness"
else
    fail "--no-robustness (exit $rc)"; show "$out"
fi

# --- absurd flags and an unwritable --json: clear errors before any training, no file
for bad in "--steps 0" "--steps -1" "--steps 99999999999" "--steps x" "--warmup 0" \
    "--batch-size 8" "--epochs 2"; do
    "$stoke" bench $small $bad --json "$work/bad.json" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 2 ] && grep -q "^stoke bench: " "$out" && ! grep -q "warm-up" "$out" &&
        [ ! -e "$work/bad.json" ]; then
        ok "refused: $bad"
    else
        fail "$bad: exit $rc"; show "$out"
    fi
done
"$stoke" bench $small --json "$work/no/such/dir/b.json" >"$out" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "^stoke bench: --json: .*no/such/dir/b.json" "$out" &&
    ! grep -q "warm-up" "$out"; then
    ok "unwritable --json: exit 1 before training"
else
    fail "unwritable --json: exit $rc"; show "$out"
fi

# --- SIGINT or SIGTERM mid-run: 128 + the signal, no JSON, no temporary file left
for sig in INT:130 TERM:143; do
    name=${sig%:*} code=${sig#*:}
    rm -f "$work/int.json"
    "$stoke" bench --limit 2000 --steps 1000000 --json "$work/int.json" >"$out" 2>&1 &
    pid=$!
    # until the warm-up line, or until it ends: no clock (ctest's TIMEOUT bounds a hang)
    while kill -0 $pid 2>/dev/null && ! grep -q "warm-up" "$out"; do sleep 0.1; done
    sleep 0.5
    kill -"$name" $pid
    wait $pid
    rc=$?
    if [ "$rc" -eq "$code" ] && [ ! -e "$work/int.json" ] && ! ls -A "$work" | grep -q stoke-tmp &&
        grep -q "interrupted by SIG$name during the naive run; no report written" "$out"; then
        ok "SIG$name: exit $code, no JSON"
    else
        fail "SIG$name: exit $rc (expected $code)"; show "$out"; ls -A "$work"
    fi
done

e2e_end
