# train_report.py: bench/train_bench.sh's reading of stoke's logs and its table.
#   train_report.py table RESULTS       the table, from the harness's "key value" lines
#   train_report.py speed LOG BATCH WARMUP STEPS REPEATS
#       from a `stoke train --log LOG --log-every 1` run: the best of REPEATS windows of
#       STEPS optimizer steps after WARMUP steps, in samples/s (the same measure as
#       train_torch.py speed), from the step records' wall-clock times
#   train_report.py epochs LOG MODEL PREC TARGET
#       from a `stoke train --target-accuracy TARGET --log LOG` run: each epoch's time
#       since the training loop started (its record's "elapsed": training + evaluation)
#       and test accuracy, and the time of the first evaluation with accuracy >= TARGET
#       (the "target" record's "elapsed"; nan when the run never reached it)
#
# Keys of RESULTS (written by the harness):
# Keys (written by the harness):
#   peak_<source>_<ct>_t<threads> GFLOP/s     source: openblas_sgemm, dnnl_sgemm,
#       dnnl_matmul_f32, dnnl_matmul_bf16, torch_mm; ct: set or unset (OPENBLAS_CORETYPE)
#   torch_speed_<model>_t<T>_b<B>_cl<0|1>[_bf16]_<ct> samples/s   (T torch threads,
#       B OpenBLAS threads, cl channels_last)
#   torch_to90_<model>_<fp32|bf16> seconds, torch_to90cfg_<model>_<prec> config, and
#       torch_epoch_<model>_<prec>_<epoch> "seconds accuracy"
#   stoke_speed_<model>_<fp32|bf16>_t<T> samples/s
#   stoke_to90_<model>_<prec> seconds, stoke_to90cfg_<model>_<prec> config, and
#       stoke_epoch_<model>_<prec>_<epoch> "seconds accuracy"
#   flops_fwd_<model> FLOPs of one sample's forward pass
#   flops_first_<model> FLOPs of its first layer's forward product
#   target_<model> the test accuracy the time-to-target runs stop at
#   peer_openblas_<set|unset> "CORE FIT [OPENBLAS_CORETYPE=...]": the OpenBLAS kernels
#       PyTorch ran on, FIT as `stoke probe` judges them (match, below, fallback, ...)
#   missing_<n> text: what stoke lacked for a measurement
import math
import re
import sys

BATCH = {"cnn": 128, "mlp": 256}


def load(path):
    """The results; a key given twice (the peaks, measured twice) keeps its larger value."""
    v = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            k, _, rest = line.partition(" ")
            if k in v and k.startswith("peak_"):
                try:
                    rest = str(max(float(v[k]), float(rest)))
                except ValueError:
                    pass
            v[k] = rest
    return v


def num(v, k):
    try:
        return float(v[k])
    except (KeyError, ValueError):
        return math.nan


def cfg_text(tag):
    m = re.match(r"t(\d)_b(\d)_cl(\d)(_bf16)?_(set|unset)", tag)
    if not m:
        return tag
    t, b, cl, bf16, ct = m.groups()
    s = f"set_num_threads({t}), OpenBLAS {b} thread{'s' if b != '1' else ''}"
    if cl == "1":
        s += ", channels_last"
    if bf16:
        s += ", autocast bf16"
    return s + (", OPENBLAS_CORETYPE set" if ct == "set" else ", OPENBLAS_CORETYPE unset")


def peer_core(v, ct):
    """(core, fit, advice) of PyTorch's OpenBLAS with OPENBLAS_CORETYPE set or unset."""
    parts = v.get(f"peer_openblas_{ct}", "").split()
    return tuple((parts + ["?", "unknown", ""][len(parts):])[:3])


def fallback_warning(v, tag):
    """A warning when a PyTorch configuration ran on a fallback OpenBLAS core, or ""."""
    ct = "set" if tag.endswith("_set") else "unset"
    core, fit, advice = peer_core(v, ct)
    if fit != "fallback":
        return ""
    return (f"WARNING: this ran on OpenBLAS's {core} kernels, a fallback far below this CPU: "
            f"a crippled peer, not PyTorch at its best ({advice} would fix it)")


def threads_of(tag):
    """Cores a configuration keeps busy: the larger of torch's and OpenBLAS's threads."""
    m = re.match(r"t(\d)_b(\d)", tag)
    return max(int(m.group(1)), int(m.group(2))) if m else 2


def best(v, prefix):
    """(value, tag) of the largest entry whose key starts with prefix."""
    top = (math.nan, "")
    for k in v:
        if k.startswith(prefix):
            x = num(v, k)
            if not math.isnan(x) and (math.isnan(top[0]) or x > top[0]):
                top = (x, k[len(prefix):])
    return top


def peak(v, threads, bf16=False):
    """The best rate measured on at most `threads` threads (what fewer threads reach,
    more can too)."""
    names = ("openblas_sgemm", "dnnl_sgemm", "dnnl_matmul_f32", "torch_mm")
    if bf16:
        names = ("dnnl_matmul_bf16",)
    vals = [num(v, f"peak_{n}_{ct}_t{t}") for n in names for ct in ("set", "unset")
            for t in range(1, threads + 1)]
    vals = [x for x in vals if not math.isnan(x)]
    return max(vals) if vals else math.nan


def fmt(x, spec="{:,.0f}"):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def ratio(a, b):
    return math.nan if math.isnan(a) or math.isnan(b) or b == 0 else a / b


def records(path, kind):
    import json
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("type") == kind]


def speed(log, batch, warmup, steps, repeats):
    t = {r["step"]: r["time"] for r in records(log, "step")}
    best_rate = math.nan
    for w in range(repeats):
        a, b = warmup + w * steps, warmup + (w + 1) * steps
        if a in t and b in t and t[b] > t[a]:
            r = steps * batch / (t[b] - t[a])
            best_rate = r if math.isnan(best_rate) else max(best_rate, r)
    return best_rate


def epochs(log, model, prec, target):
    eps = records(log, "epoch")
    if not eps or any("elapsed" not in r for r in eps):
        print(f"missing_{model}_{prec}_to90 stoke train {model} {prec}: no epoch records with "
              f"'elapsed' in its log (see its output)")
        return
    for r in eps:
        acc = r.get("val_acc")
        print(f"stoke_epoch_{model}_{prec}_{r['epoch'] + 1} {r['elapsed']:.2f} "
              f"{math.nan if acc is None else acc:.4f}")
    hit = records(log, "target")
    print(f"stoke_to90_{model}_{prec} {hit[0]['elapsed'] if hit else math.nan:.2f}")


def main():
    cmd = sys.argv[1]
    if cmd == "speed":
        print(f"{speed(sys.argv[2], *map(int, sys.argv[3:7])):.0f}")
        return
    if cmd == "epochs":
        epochs(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
        return
    v = load(sys.argv[2])
    print("\nMatrix-multiply peaks, 1024^3 (GFLOP/s; best window; OPENBLAS_CORETYPE set / unset):")
    print(f"  {'':34} {'1 thread':>17} {'2 threads':>17}")
    for n, label in (("openblas_sgemm", "OpenBLAS cblas_sgemm"), ("torch_mm", "torch.mm (OpenBLAS)"),
                     ("dnnl_sgemm", "oneDNN dnnl_sgemm"), ("dnnl_matmul_f32", "oneDNN matmul fp32"),
                     ("dnnl_matmul_bf16", "oneDNN matmul bf16")):
        cells = []
        for t in (1, 2):
            cells.append(f"{fmt(num(v, f'peak_{n}_set_t{t}'), '{:.0f}')} / "
                         f"{fmt(num(v, f'peak_{n}_unset_t{t}'), '{:.0f}')}")
        print(f"  {label:34} {cells[0]:>17} {cells[1]:>17}")
    print(f"  {'best fp32 (the SGEMM peak)':34} {fmt(peak(v, 1), '{:.0f}'):>17} "
          f"{fmt(peak(v, 2), '{:.0f}'):>17}")
    print(f"  {'best bf16':34} {fmt(peak(v, 1, True), '{:.0f}'):>17} "
          f"{fmt(peak(v, 2, True), '{:.0f}'):>17}")
    cores = {ct: peer_core(v, ct) for ct in ("set", "unset")}
    print("PyTorch's OpenBLAS kernels: " + ", ".join(
        f"OPENBLAS_CORETYPE {ct} -> {c[0]} ({c[1]})" for ct, c in cores.items()))
    for ct, (core, fit, advice) in cores.items():
        if fit == "fallback":
            print(f"  WARNING: with OPENBLAS_CORETYPE {ct}, OpenBLAS ran its {core} kernels, a "
                  f"fallback far below this CPU ({advice} fixes it): the OpenBLAS and torch.mm "
                  f"'{ct}' peaks and PyTorch's '{ct}' configurations are crippled")

    for model in ("cnn", "mlp"):
        b = BATCH[model]
        # forward + two backward products, less the first layer's input gradient (never
        # computed: its input is data)
        train_flops = 3 * num(v, f"flops_fwd_{model}") - num(v, f"flops_first_{model}")
        tf32, tcfg32 = best({k: x for k, x in v.items() if "_bf16_" not in k}, f"torch_speed_{model}_")
        tbf, tcfgbf = best({k: x for k, x in v.items() if "_bf16_" in k}, f"torch_speed_{model}_")
        s32, scfg32 = best(v, f"stoke_speed_{model}_fp32_")
        sbf, scfgbf = best(v, f"stoke_speed_{model}_bf16_")
        title = ("reference CNN (batch 128)" if model == "cnn" else "MLP 784-512-512-10 (batch 256)")
        target = num(v, f"target_{model}")
        print(f"\n{title}: {fmt(train_flops / 1e6, '{:.2f}')} MFLOP per training sample, "
              f"{fmt(train_flops * b / 1e9, '{:.2f}')} GFLOP per step")
        print(f"  {'':44} {'samples/s':>10} {'x PyTorch':>9} {'% peak':>7} {'to ' + fmt(100 * target, '{:.0f}') + '% (s)':>11} {'x PyTorch':>9}")

        def row(label, rate, tag, cores, to90, ref_rate, ref_to90, warn=""):
            pk = peak(v, cores)  # bf16 rows too: the fraction of the fp32 SGEMM peak
            frac = 100 * rate * train_flops / 1e9 / pk if not math.isnan(rate) else math.nan
            # time ratio: PyTorch's time / stoke's, so > 1 means stoke is faster
            print(f"  {label:44} {fmt(rate):>10} {fmt(ratio(rate, ref_rate), '{:.2f}'):>9} "
                  f"{fmt(frac, '{:.0f}%'):>7} {fmt(to90, '{:.1f}'):>11} "
                  f"{fmt(ratio(ref_to90, to90), '{:.2f}'):>9}")
            if tag:
                print(f"    ({tag})")
            if warn:
                print(f"    {warn}")

        t90_32 = num(v, f"torch_to90_{model}_fp32")
        t90_bf = num(v, f"torch_to90_{model}_bf16")
        row("PyTorch best fp32", tf32, cfg_text(tcfg32), threads_of(tcfg32), t90_32, tf32, t90_32,
            fallback_warning(v, tcfg32))
        if not math.isnan(tbf):
            row("PyTorch best bf16 autocast", tbf, cfg_text(tcfgbf), threads_of(tcfgbf), t90_bf, tf32,
                t90_32, fallback_warning(v, tcfgbf))
        s90_32 = num(v, f"stoke_to90_{model}_fp32")
        s90_bf = num(v, f"stoke_to90_{model}_bf16")
        row("stoke fp32", s32, f"--threads {scfg32[1:]}" if scfg32 else "", int(scfg32[1:] or 2),
            s90_32, tf32, t90_32)
        row("stoke bf16", sbf, f"--threads {scfgbf[1:]}" if scfgbf else "", int(scfgbf[1:] or 2),
            s90_bf, tf32, t90_32)
        tb = max([x for x in (tf32, tbf) if not math.isnan(x)], default=math.nan)
        sb = max([x for x in (s32, sbf) if not math.isnan(x)], default=math.nan)
        goal = 3.0 if model == "cnn" else 1.5
        t90b = min([x for x in (t90_32, t90_bf) if not math.isnan(x)], default=math.nan)
        if not math.isnan(tbf) and f"torch_to90_{model}_bf16" not in v:
            t90b = math.nan  # PyTorch's bf16 time was not measured (--quick): no best
        s90b = min([x for x in (s90_32, s90_bf) if not math.isnan(x)], default=math.nan)
        print(f"  goal: stoke >= {goal}x PyTorch's best throughput: stoke fp32 / PyTorch fp32 "
              f"{fmt(ratio(s32, tf32), '{:.2f}x')}, stoke best / PyTorch best (any precision) "
              f"{fmt(ratio(sb, tb), '{:.2f}x')}; PyTorch's time to target / stoke's >= 3: "
              f"{fmt(ratio(t90_32, s90_32), '{:.2f}x')} (fp32), "
              f"{fmt(ratio(t90_32, s90_bf), '{:.2f}x')} (stoke bf16), "
              f"{fmt(ratio(t90b, s90b), '{:.2f}x')} (best / best, any precision)")
        for prec in ("fp32", "bf16"):
            for side in ("torch", "stoke"):
                ep = sorted((int(k.rsplit("_", 1)[1]), v[k]) for k in v
                            if k.startswith(f"{side}_epoch_{model}_{prec}_"))
                if ep:
                    print(f"    {side} {prec} per epoch (seconds accuracy): "
                          + ", ".join(f"{e}: {x}" for e, x in ep))
    miss = [v[k] for k in sorted(v) if k.startswith("missing_")]
    if miss:
        print("\nNot measured:")
        for m in miss:
            print(f"  - {m}")


if __name__ == "__main__":
    main()
