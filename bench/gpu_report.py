# gpu_report.py: bench/gpu.sh's reading of `stoke probe --json` and of stoke's logs, and
# its table and JSON. Commands:
#
#   gpu_report.py probe PROBE_JSON [GPU]
#       "key value" lines from `stoke probe --json` for GPU (default 0, the NVML index;
#       stoke's --device cuda:N takes its peak from the same entry): gpu_count, gpu_note,
#       gpu_name, gpu_cc, gpu_sms, gpu_clock_mhz, gpu_memory_bytes, driver, cuda_driver,
#       cuda_runtime, auto_precision (stoke's --precision auto rule: bf16 from compute
#       capability 8.0, fp16 on 7.x, fp32 below; "unknown" without a compute capability)
#       and the peaks stoke computes MFU against: peak_fp32 and peak_bf16 / peak_fp16
#       (FLOP/s), each with peak_*_reason (the probe's words; an unknown peak has only
#       the reason).
#   gpu_report.py stoke-speed LOG BATCH WARMUP STEPS REPEATS
#       from `stoke train --log LOG --log-every 1`: the best of REPEATS windows of STEPS
#       optimizer steps after WARMUP, in samples/s, from the step records' wall-clock
#       "time" (stoke reads each batch's loss back from the GPU, so a step record is
#       written after the work before it has finished); the loader's wait over that
#       window in % ("data_wait_pct"), and the start record's device_name.
#   gpu_report.py stoke-epochs LOG
#       from `stoke train --target-accuracy A --log LOG`: "epoch E seconds S
#       test_accuracy A" per epoch record (S: its "elapsed", since the training loop
#       started: training + evaluation), "to_target_seconds S" (the "target" record's
#       elapsed, nan if none) and "mfu_reported PCT" (stoke's own, the first epoch's).
#   gpu_report.py table RESULTS JSON_OUT
#       the one table and the machine line, from bench/gpu.sh's "key value" lines, and
#       the same as JSON in JSON_OUT.
#   gpu_report.py kernels NCU_CSV
#       the kernels of an Nsight Compute --csv run of gpu__time_duration.sum (the GPU
#       kit's profile step) by total GPU time: share, ms, launches, mean microseconds.
import datetime
import json
import math
import sys

DRY_LABEL = "DRY RUN: CPU doubles, not a GPU measurement"
WHO = (("stoke", "stoke"), ("torch_resident", "PyTorch, data on GPU"),
       ("torch_loader", "PyTorch, DataLoader"))
MODEL_NAME = {"cnn": "CNN", "mlp": "MLP"}


def nan():
    return float("nan")


# ---- stoke probe --json ------------------------------------------------------------

def auto_precision(cc):
    """stoke's --precision auto on a GPU (src/tune/recommend.c, the `precision` rule)."""
    try:
        major = int(cc.split(".")[0])
    except (AttributeError, ValueError):
        return "unknown"
    return "bf16" if major >= 8 else "fp16" if major == 7 else "fp32"


def probe(path, gpu=0):
    with open(path) as f:
        d = json.load(f)
    gpus = d.get("gpus") or []
    out = [("gpu_count", len(gpus))]
    if d.get("gpu_note"):
        out.append(("gpu_note", d["gpu_note"]))
    for k, name in (("driver_version", "driver"), ("cuda_driver_version", "cuda_driver"),
                    ("cuda_runtime_version", "cuda_runtime")):
        if d.get(k):
            out.append((name, d[k]))
    # cuda:N is the GPU the probe matched to CUDA's device N by PCI bus id (CUDA's
    # order and CUDA_VISIBLE_DEVICES differ from NVML's); NVML's N without a runtime
    matched = [g for g in gpus if g.get("cuda_device") == gpu]
    if not any("cuda_device" in g for g in gpus) and gpu < len(gpus):
        matched = [gpus[gpu]]
    if matched:
        g = matched[0]
        out += [("gpu_index", g.get("index", gpu)), ("gpu_name", g.get("name", "?"))]
        for k, name in (("compute_capability", "gpu_cc"), ("sm_count", "gpu_sms"),
                        ("max_sm_clock_mhz", "gpu_clock_mhz"),
                        ("memory_total_bytes", "gpu_memory_bytes"),
                        ("pci_bus_id", "gpu_pci_bus_id")):
            if k in g:
                out.append((name, g[k]))
        prec = auto_precision(g.get("compute_capability"))
        out.append(("auto_precision", prec))
        for r in d.get("recommendations", []):
            if r.get("device") != "gpu" or r.get("gpu", 0) != g.get("index", gpu):
                continue
            key = r.get("key", "")
            if key == "precision":
                # the probe's own rule, to catch this copy drifting from it
                theirs = str(r.get("value", "")).split("+")[0]
                if "value" in r and theirs != prec:
                    out.append(("warning_precision", f"stoke probe recommends {r['value']}, "
                                f"this script's rule says {prec} (compute capability "
                                f"{g.get('compute_capability')}); stoke's --precision auto "
                                f"follows the probe"))
            elif key in ("peak_fp32_flops", "peak_bf16_flops", "peak_fp16_flops"):
                name = key[:-len("_flops")]
                if "value" in r:
                    out.append((name, r["value"]))
                out.append((name + "_reason", r.get("reason", "")))
    for k, v in out:
        print(f"{k} {v}")


# ---- stoke's logs ------------------------------------------------------------------

def records(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def stoke_speed(log, batch, warmup, steps, repeats):
    steps_by = {}
    device_name = None
    for r in records(log):
        if r.get("type") == "step":
            steps_by[r["step"]] = r
        elif r.get("type") == "start" and device_name is None:
            device_name = r.get("device_name") or r.get("device")

    def wait_s(r):
        # the step record's data_wait_pct is over its epoch so far; in the run's first
        # epoch that is since the loop started ("elapsed")
        return r["data_wait_pct"] / 100.0 * r["elapsed"]

    best, wait, phases = nan(), nan(), None
    for w in range(repeats):
        a, b = warmup + w * steps, warmup + (w + 1) * steps
        if a not in steps_by or b not in steps_by:
            continue
        ra, rb = steps_by[a], steps_by[b]
        dt = rb["time"] - ra["time"]
        if dt <= 0:
            continue
        rate = steps * batch / dt
        if math.isnan(best) or rate > best:
            best = rate
            if ra["epoch"] == 0 and rb["epoch"] == 0 and rb["elapsed"] > ra["elapsed"]:
                wait = 100.0 * (wait_s(rb) - wait_s(ra)) / (rb["elapsed"] - ra["elapsed"])
            else:
                wait = rb["data_wait_pct"]  # its epoch so far
            # the step's phases on the GPU's clock (CUDA events), its epoch so far
            keys = ("input_pct", "forward_pct", "backward_pct", "optimizer_pct")
            if all(k in rb for k in keys):
                phases = [rb[k] for k in keys]
    print(f"speed {best:.1f}")
    if phases:
        print("step_pct " + " ".join(f"{x:.1f}" for x in phases))
    print(f"data_wait_pct {max(wait, 0.0) if not math.isnan(wait) else wait:.2f}")
    if device_name:
        print(f"device_name {device_name}")


def stoke_epochs(log):
    target, mfu = nan(), None
    for r in records(log):
        t = r.get("type")
        if t == "epoch":
            acc = r.get("val_acc")
            print(f"epoch {r['epoch'] + 1} seconds {r['elapsed']:.3f} test_accuracy "
                  f"{nan() if acc is None else acc:.4f}")
            if mfu is None and r.get("mfu_pct") is not None:
                mfu = r["mfu_pct"]
        elif t == "target" and math.isnan(target):
            target = r["elapsed"]
    print(f"to_target_seconds {target:.3f}")
    if mfu is not None:
        print(f"mfu_reported {mfu}")


# ---- the table ---------------------------------------------------------------------

def load(path):
    v = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            k, _, rest = line.partition(" ")
            if k.startswith("missing_") or k.startswith("warning_"):
                k = f"{k}_{len(v)}"  # keep every one
            v[k] = rest
    return v


def num(v, k):
    try:
        x = float(v[k])
    except (KeyError, ValueError):
        return nan()
    return x if math.isfinite(x) else nan()


def count(v, k):
    """A positive whole number, or None."""
    x = num(v, k)
    return int(x) if x > 0 else None


def fmt(x, spec):
    return "n/a" if x is None or math.isnan(x) else spec.format(x)


def fmt_small(x, decimals=1):
    """x with `decimals` decimals, or 2 significant digits when that would show 0."""
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.{decimals}f}" if abs(x) >= 10 ** -decimals or x == 0 else f"{x:.2g}"


def fmt_mfu(x):
    """An MFU as printed: never above 100%. A rate past the peak shows the peak is not
    this run's ceiling (fp32 with TF32 on tensor cores against the FMA peak): said as
    such, not as a figure."""
    if x is not None and not math.isnan(x) and x > 100:
        return "> peak"
    return fmt_small(x)


def jnum(x, digits=None):
    """A JSON number (None for NaN), to `digits` significant digits when given."""
    if x is None or math.isnan(x):
        return None
    return float(f"{x:.{digits}g}") if digits is not None else x


def jint(s):
    try:
        return int(s)
    except (TypeError, ValueError):
        return s


def table(path, json_out):
    v = load(path)
    dry = v.get("dry_run") == "1"
    models = v.get("models", "").split()
    precs = v.get("precisions", "").split()
    tt_models = v.get("to_target_models", "").split()
    target = num(v, "target")
    tcol = f"to {fmt(100 * target, '{:.0f}')}% (s)"
    rows = []
    for m in models:
        flops = num(v, f"flops_{m}")
        for p in precs:
            peak = num(v, f"peak_{p}")
            stoke_rate = num(v, f"rate_{m}_{p}_stoke")
            for who, label in WHO:
                rate = num(v, f"rate_{m}_{p}_{who}")
                cfg = v.get(f"cfg_{m}_{p}_{who}", "")
                if math.isnan(rate) and not cfg:
                    continue  # not run (no peer, or a failure listed below)
                to_t = num(v, f"to_{m}_{p}_{who}") if m in tt_models else nan()
                rows.append({
                    "model": m, "precision": p, "who": label,
                    "samples_per_s": rate,
                    "stoke_over_peer": stoke_rate / rate if who != "stoke" and rate > 0 else nan(),
                    "mfu_pct": 100 * rate * flops / peak if peak > 0 else nan(),
                    "to_target_s": to_t,
                    "to_target_epochs": count(v, f"to_epochs_{m}_{p}_{who}"),
                    "data_wait_pct": num(v, f"wait_{m}_{p}_{who}"),
                    "step_pct": v.get(f"step_{m}_{p}_{who}", ""),
                    "mfu_reported_by_stoke_pct": num(v, f"mfu_reported_{m}_{p}_{who}"),
                    "config": cfg,
                    "epochs": sorted(
                        (int(k.rsplit("_", 1)[1]), v[k]) for k in v
                        if k.startswith(f"epoch_{m}_{p}_{who}_")),
                })

    mode = ("dry-run sizes" if dry else "--quick" if v.get("quick") == "1" else "full run")
    title = f"stoke train --device cuda vs PyTorch on the same GPU ({mode})"
    if dry:
        title = f"{DRY_LABEL} -- {title}"
    print()
    print(title)
    hdr = (f"{'model':6} {'precision':9} {'who':22} {'samples/s':>10} {'stoke/peer':>10} "
           f"{'MFU %':>7} {tcol:>14} {'data wait %':>11} {'in/fwd/bwd/opt %':>20}")
    print(hdr)
    print("-" * len(hdr))
    notes = []
    for r in rows:
        ref = ""
        if r["config"]:
            if r["config"] not in notes:
                notes.append(r["config"])
            ref = f" [{notes.index(r['config']) + 1}]"
        t = fmt(r["to_target_s"], "{:.2f}" if r["to_target_s"] < 10 else "{:.1f}")
        if r["to_target_epochs"]:
            t = (f"{t} ({r['to_target_epochs']} ep)" if not math.isnan(r["to_target_s"])
                 else f"not in {r['to_target_epochs']} ep")
        ratio = "-" if r["who"] == "stoke" else fmt(r["stoke_over_peer"], "{:.2f}x")
        print(f"{MODEL_NAME[r['model']]:6} {r['precision']:9} {(r['who'] + ref):22} "
              f"{fmt(r['samples_per_s'], '{:,.0f}'):>10} {ratio:>10} "
              f"{fmt_mfu(r['mfu_pct']):>7} {t:>14} {fmt_small(r['data_wait_pct']):>11} "
              f"{('/'.join(r['step_pct'].split()) or '-'):>20}")
    if not rows:
        print("(no rows: nothing was measured)")
    print("-" * len(hdr))
    for i, n in enumerate(notes, 1):
        print(f"  [{i}] {n}")

    machine = (f"GPU: {v.get('gpu_name', '?')} (compute capability {v.get('gpu_cc', '?')}, "
               f"{v.get('gpu_sms', '?')} SMs, {v.get('gpu_clock_mhz', '?')} MHz max), driver "
               f"{v.get('driver', '?')}, CUDA {v.get('cuda_driver', '?')} (driver) / "
               f"{v.get('cuda_runtime', '?')} (runtime stoke loaded)")
    if v.get("torch_version"):
        machine += (f"; torch {v['torch_version']} (CUDA {v.get('torch_cuda', '?')}, cuDNN "
                    f"{v.get('torch_cudnn', 'n/a')}) on {v.get('torch_device_name', '?')}")
    machine += f"; CPU: {v.get('cpu', '?')}; command: {v.get('command', '?')}"
    print(machine)
    if v.get("stoke_device_name"):
        print(f"stoke's device: {v['stoke_device_name']} (commit {v.get('commit', '?')})")
    print(f"samples/s: the best of {v.get('repeats')} windows of {v.get('steps')} steps after "
          f"{v.get('warmup')} warm-up steps, in the first epoch; stoke/peer: stoke's samples/s "
          f"at the same model and precision over the row's; time to target: from the first "
          f"step to the first end-of-epoch test evaluation reaching "
          f"{fmt(100 * target, '{:.0f}')}%, training and evaluation included, at most "
          f"{v.get('max_epochs')} epochs; data wait: stoke's loader wait over its best window; "
          f"in/fwd/bwd/opt: stoke's step phases (the batch into the model, forward, backward, "
          f"optimizer) as % of its first epoch's time so far, on the GPU's clock (CUDA events)")
    for k in sorted(k for k in v if k.startswith("graphs_")):
        print(f"{k[len('graphs_'):].replace('_', ' ', 1)}: {v[k]}")
    for p in precs:
        pk = num(v, f"peak_{p}")
        print(f"MFU {p}: the step's matmul/conv FLOPs a sample (3 x forward less the first "
              f"layer's input gradient, never computed: "
              + ", ".join(f"{MODEL_NAME[m]} {fmt(num(v, f'flops_{m}') / 1e6, '{:.2f}')}"
                          for m in models)
              + f" MFLOP) against stoke's {p} peak {fmt(pk / 1e12, '{:.1f}')} TFLOP/s: "
              + v.get(f"peak_{p}_reason", "unknown"))
    if dry:
        print(f"{DRY_LABEL}: every number above comes from the CPU: stoke's from its CUDA "
              "test doubles (a fake GPU whose cuBLAS, cuDNN and kernels are loops on the CPU), "
              "PyTorch's (with --dry-run) from device cpu, at tiny sizes. None of it says "
              "anything about a GPU.")
    warnings = [v[k] for k in v if k.startswith("warning_")]
    for w in warnings:
        print(f"warning: {w}")
    missing = [v[k] for k in v if k.startswith("missing_")]
    if missing:
        print("Not measured:")
        for mi in missing:
            print(f"  - {mi}")

    def clean(r):
        out = {k: (jnum(x, 4) if isinstance(x, float) else x) for k, x in r.items()
               if k != "epochs"}
        out["epochs"] = [{"epoch": e, "seconds": float(s.split()[0]),
                          "test_accuracy": float(s.split()[1])} for e, s in r["epochs"]]
        if dry:
            out["label"] = DRY_LABEL
        return out

    doc = {
        "dry_run": dry,
        "label": DRY_LABEL if dry else None,
        "title": title,
        "date": v.get("date"),
        "written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": v.get("command"),
        "commit": v.get("commit"),
        "gpu": {k: jint(v.get(k)) for k in ("gpu_name", "gpu_cc", "gpu_sms", "gpu_clock_mhz",
                                             "gpu_memory_bytes", "gpu_pci_bus_id", "driver",
                                             "cuda_driver", "cuda_runtime",
                                             "stoke_device_name")},
        "peaks_flops": {p: jnum(num(v, f"peak_{p}")) for p in precs},
        "peak_reasons": {p: v.get(f"peak_{p}_reason") for p in precs},
        "step_flops_per_sample": {m: jnum(num(v, f"flops_{m}")) for m in models},
        "cpu": v.get("cpu"),
        "torch": {k: v.get(k) for k in ("torch_version", "torch_cuda", "torch_cudnn",
                                         "torch_device_name", "torch_device_cc")},
        "settings": {k: v.get(k) for k in ("quick", "warmup", "steps", "repeats", "target",
                                            "max_epochs", "limit", "val_limit", "batch_cnn",
                                            "batch_mlp", "loader_workers", "auto_precision")},
        "rows": [clean(r) for r in rows],
        "warnings": warnings,
        "not_measured": missing,
    }
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"JSON: {json_out}")


def kernels(csv_path, top=15):
    """Nsight Compute's --csv of gpu__time_duration.sum (--print-units base: ns), one
    row per kernel launch: the kernels by their total GPU time, the largest first."""
    import csv
    total, count = {}, {}
    with open(csv_path, newline="") as f:
        # ncu prints its own "==PROF==" lines before the table
        rows = csv.reader(line for line in f if line.startswith('"'))
        head = next(rows, None)
        if not head or "Kernel Name" not in head or "Metric Value" not in head:
            sys.exit(f"{csv_path}: not an ncu --csv table (no 'Kernel Name', 'Metric Value')")
        k, v = head.index("Kernel Name"), head.index("Metric Value")
        for r in rows:
            if len(r) <= max(k, v):
                continue
            try:
                ns = float(r[v].replace(",", ""))
            except ValueError:
                continue
            total[r[k]] = total.get(r[k], 0.0) + ns
            count[r[k]] = count.get(r[k], 0) + 1
    s = sum(total.values())
    if not s:
        sys.exit(f"{csv_path}: no kernel timed")
    print(f"kernels: {sum(count.values())} launches, {s / 1e6:.2f} ms of GPU time in all")
    print(f"{'share':>6} {'ms':>8} {'launches':>8} {'mean us':>8}  kernel")
    for name in sorted(total, key=total.get, reverse=True)[:top]:
        print(f"{100 * total[name] / s:5.1f}% {total[name] / 1e6:8.2f} {count[name]:8d} "
              f"{total[name] / count[name] / 1e3:8.1f}  {name[:90]}")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "probe":
        probe(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    elif cmd == "stoke-speed":
        stoke_speed(sys.argv[2], *map(int, sys.argv[3:7]))
    elif cmd == "stoke-epochs":
        stoke_epochs(sys.argv[2])
    elif cmd == "table":
        table(sys.argv[2], sys.argv[3])
    elif cmd == "kernels":
        kernels(sys.argv[2])
    else:
        sys.exit("usage: gpu_report.py probe|stoke-speed|stoke-epochs|table|kernels ...")


if __name__ == "__main__":
    main()
