#!/usr/bin/python3
"""dist_model.py - a MODEL, NOT A MEASUREMENT, of how a stoke training step scales with
data parallelism on N GPUs: 1, 2, 4 and 8 H200s in one node (NVLink through NVSwitch) and
2 nodes of 8 over 400 Gb/s InfiniBand (docs/distributed.md, "The scaling model").

  dist_model.py [--log FILE | --samples-per-s X --batch B --params P]
                [--backward-frac F] [--hidden-frac H] [--bucket-mib M]
                [--grad-bytes G] [--gpus-per-node K]

Weak scaling: every rank keeps the per-rank batch, so a step's compute time stays the
one-GPU step's, and each step adds the gradients' all-reduce, less what of it hides
behind backward:

  step(N)      = compute + allreduce(N) - hidden(N)
  allreduce(N) = sum over the buckets b of  2(N-1)/N x bytes(b) / busbw(bytes(b))
  hidden(N)    = min(H x allreduce(N), backward)

2(N-1)/N x S is a ring all-reduce's volume per rank; bus bandwidth is the figure
nccl-tests reports so that this formula gives the time (NVIDIA/nccl-tests,
doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n, comparable across rank counts). busbw
depends on the payload (latency dominates small ones), so it is read, per bucket, off
published nccl-tests curves (interpolated log-log; clamped at their ends):
  - one node: all_reduce_perf on one 8 x H200 node, NCCL 2.30.7 (stas00/ml-engineering,
    network/benchmarks/README.md, "How the calls are timed", nccl-tests column). Bus
    bandwidth is defined to be independent of the rank count; the 8-GPU curve is used
    for 2 and 4 GPUs too (an assumption: small rings have lower latency, so this errs
    slow at small payloads).
  - two nodes: the lower of the one-node curve and the published all-reduce of 4 nodes
    of 8 B200 over 8 x 400 Gb/s per node (same source, "all_reduce benchmark"): a fabric
    like DGX H200's (eight single-port ConnectX-7 at up to 400 Gb/s for the compute
    fabric: NVIDIA DGX BasePOD reference architecture, "Core Components"). Its 16 GiB
    figure, 376.71 GB/s, is 94% of the 8 x 50 GB/s line rate.
The buckets are stoke's (src/train/dist.c): about four, a quarter of the gradients
each within [256 KiB, 25 MiB], taken here as equal (stoke never splits a tensor between
buckets, so a model made mostly of one tensor has fewer); --bucket-mib sets another
size. H, the share of the
all-reduce hidden behind backward, is by default the ideal of bucketing: every bucket
but the last reduces while backward still runs ((k-1)/k of k equal buckets; 0 for one
bucket), and never more than backward's time.

The default compute time is docs/gpu.md's measured H200 figure for the reference CNN in
fp32 (TF32): 199,378 samples/s at batch 128 (0.642 ms a step), 421,642 parameters (fp32
gradients: 1.69 MB), backward 76% of the step (the lower end of the 76-80% docs/gpu.md
gives for its first run). --log reads a one-rank stoke JSON log instead: the start
record's batch and parameters, the last epoch record's samples_per_s and backward_pct.

tests/dist_model_test.py checks the arithmetic against cases computed by hand.
"""
import argparse
import json
import math
import sys

MIB = 2**20
GIB = 2**30

# (payload bytes, bus bandwidth GB/s): nccl-tests all_reduce_perf, one 8 x H200 node
ONE_NODE_H200 = [
    (32 * 1024, 3.20), (64 * 1024, 6.26), (128 * 1024, 12.40), (256 * 1024, 24.63),
    (512 * 1024, 48.30), (1 * MIB, 72.45), (2 * MIB, 91.48), (4 * MIB, 139.97),
    (8 * MIB, 182.03), (16 * MIB, 242.45), (32 * MIB, 298.44), (64 * MIB, 369.82),
    (128 * MIB, 411.21), (256 * MIB, 442.27), (512 * MIB, 455.82), (1 * GIB, 464.00),
    (2 * GIB, 468.31), (4 * GIB, 473.10), (8 * GIB, 475.16), (16 * GIB, 480.70),
]
# all_reduce over 4 nodes of 8 B200 (32 ranks), 8 x 400 Gb/s InfiniBand a node
FOUR_NODES_IB = [
    (32 * 1024, 0.65), (64 * 1024, 1.27), (128 * 1024, 2.35), (256 * 1024, 4.06),
    (512 * 1024, 6.99), (1 * MIB, 12.47), (2 * MIB, 20.79), (4 * MIB, 31.63),
    (8 * MIB, 50.61), (16 * MIB, 71.80), (32 * MIB, 142.90), (64 * MIB, 197.77),
    (128 * MIB, 260.50), (256 * MIB, 283.23), (512 * MIB, 309.91), (1 * GIB, 365.99),
    (2 * GIB, 371.26), (4 * GIB, 374.66), (8 * GIB, 376.14), (16 * GIB, 376.71),
]
SOURCES = [
    "bus bandwidth: NVIDIA/nccl-tests doc/PERFORMANCE.md (busbw = algbw x 2(n-1)/n)",
    "one node: stas00/ml-engineering network/benchmarks/README.md, nccl-tests on 8 x H200 "
    "(NCCL 2.30.7)",
    "two nodes: the same page, all_reduce of 4 nodes x 8 B200 over 8 x 400 Gb/s a node; "
    "DGX H200's 8 x 400 Gb/s ConnectX-7: NVIDIA DGX BasePOD reference architecture",
]
DEFAULT = {
    "samples_per_s": 199378.0, "batch": 128, "params": 421642, "backward_frac": 0.76,
    "source": "docs/gpu.md: H200, reference CNN fp32 (TF32), 199,378 samples/s at batch 128",
}


def busbw_at(nbytes, table):
    """Bus bandwidth in bytes/s at a payload, log-log between the table's points."""
    if nbytes <= table[0][0]:
        return table[0][1] * 1e9
    for (x0, y0), (x1, y1) in zip(table, table[1:]):
        if nbytes <= x1:
            t = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0))) * 1e9
    return table[-1][1] * 1e9


def ring_time(nbytes, n, busbw):
    """Seconds of a ring all-reduce of nbytes over n ranks at bus bandwidth busbw (B/s)."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / busbw


def buckets(grad_bytes, bucket_bytes):
    """The buckets' sizes: full ones, then the remainder."""
    full, rest = divmod(int(grad_bytes), int(math.ceil(bucket_bytes)))
    bucket_bytes = math.ceil(bucket_bytes)
    return [int(bucket_bytes)] * full + ([rest] if rest else [])


def stoke_bucket(grad_bytes):
    """stoke's bucket size (src/train/dist.c): about four buckets, within [256 KiB,
    25 MiB] (PyTorch DDP's size the largest)."""
    return min(max(grad_bytes / 4, 256 * 1024), 25 * MIB)


def allreduce_time(grad_bytes, bucket_bytes, n, busbw_fn):
    """Seconds a step's all-reduce takes: each bucket at its own payload's busbw."""
    return sum(ring_time(b, n, busbw_fn(b)) for b in buckets(grad_bytes, bucket_bytes))


def ideal_hidden_frac(grad_bytes, bucket_bytes):
    """(k-1)/k for k buckets: all but the last reduce while backward runs."""
    k = len(buckets(grad_bytes, bucket_bytes))
    return (k - 1) / k if k else 0.0


def step_time(compute, backward, allreduce, hidden_frac):
    """(step seconds, hidden seconds): the all-reduce adds to compute, less the hidden
    share, which cannot exceed backward's time."""
    hidden = min(hidden_frac * allreduce, backward)
    return compute + allreduce - hidden, hidden


def configs(gpus_per_node):
    """(label, ranks, busbw function) of each row."""
    one = lambda b: busbw_at(b, ONE_NODE_H200)  # noqa: E731
    two = lambda b: min(busbw_at(b, ONE_NODE_H200), busbw_at(b, FOUR_NODES_IB))  # noqa: E731
    rows = [(f"1 node, {n} GPU{'s' if n > 1 else ''} (NVLink)", n, one) for n in (1, 2, 4, 8)]
    rows.append((f"2 nodes x {gpus_per_node} GPUs (400 Gb/s IB)", 2 * gpus_per_node, two))
    return rows


def read_log(path):
    """The inputs from a one-rank stoke JSON log."""
    start, epoch = None, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"dist_model.py: {path}:{n}: not JSON ({e})")
            if r.get("type") == "start":
                start = r
            elif r.get("type") == "epoch" or (r.get("type") == "step" and
                                               (epoch is None or epoch["type"] == "step")):
                epoch = r  # the last epoch's figures, else the last step's (epoch so far)
    if start is None or epoch is None:
        raise SystemExit(f"dist_model.py: {path}: needs a start record and an epoch or "
                         "step record")
    world = start.get("world_size", start.get("world", 1)) or 1
    if world != 1:
        raise SystemExit(f"dist_model.py: {path}: a run of {world} ranks; the model "
                         "takes one rank's compute time (a run without mpirun)")
    for key in ("batch", "parameters"):
        if key not in start:
            raise SystemExit(f"dist_model.py: {path}: the start record has no '{key}'")
    if not epoch.get("samples_per_s"):
        raise SystemExit(f"dist_model.py: {path}: the {epoch['type']} record has no "
                         "samples_per_s")
    bwd = epoch.get("backward_pct")
    return {
        "samples_per_s": float(epoch["samples_per_s"]),
        "batch": int(start["batch"]) * int(start.get("accumulate", 1)),
        "params": int(start["parameters"]),
        "backward_frac": bwd / 100.0 if bwd is not None else DEFAULT["backward_frac"],
        "source": f"{path}: {start.get('model')} {start.get('precision')} on "
                  f"{start.get('device')}, {epoch['type']} record of epoch {epoch.get('epoch')}",
    }


def table(inp, bucket_bytes, grad_bytes_per_param, hidden_frac, gpus_per_node):
    """The rows, as dicts (one per configuration)."""
    compute = inp["batch"] / inp["samples_per_s"]
    backward = inp["backward_frac"] * compute
    grad = inp["params"] * grad_bytes_per_param
    h = ideal_hidden_frac(grad, bucket_bytes) if hidden_frac is None else hidden_frac
    rows = []
    base = None
    for label, n, fn in configs(gpus_per_node):
        ar = allreduce_time(grad, bucket_bytes, n, fn)
        step, hidden = step_time(compute, backward, ar, h)
        rate = n * inp["batch"] / step
        base = base or rate
        bw = fn(min(grad, bucket_bytes)) if n > 1 else 0.0
        rows.append({"config": label, "ranks": n, "busbw": bw, "allreduce": ar,
                     "hidden": hidden, "step": step, "rate": rate,
                     "speedup": rate / base, "efficiency": rate / base / n})
    return rows, compute, backward, grad, h


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", help="a one-rank stoke JSON log (stoke train --log)")
    ap.add_argument("--samples-per-s", type=float)
    ap.add_argument("--batch", type=int, help="per-rank batch (x accumulation)")
    ap.add_argument("--params", type=int, help="trainable parameters")
    ap.add_argument("--backward-frac", type=float, help="backward's share of a step, 0-1")
    ap.add_argument("--hidden-frac", type=float,
                    help="share of the all-reduce hidden behind backward, 0-1 "
                         "(default: (k-1)/k of k buckets)")
    ap.add_argument("--bucket-mib", type=float,
                    help="bucket size, MiB (default stoke's: a quarter of the gradients, "
                         "within [0.25, 25])")
    ap.add_argument("--grad-bytes", type=int, default=4, help="bytes a gradient (fp32: 4)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    a = ap.parse_args(argv)
    if a.log:
        inp = read_log(a.log)
    elif a.samples_per_s or a.batch or a.params:
        if not (a.samples_per_s and a.batch and a.params):
            ap.error("--samples-per-s, --batch and --params go together")
        inp = {"samples_per_s": a.samples_per_s, "batch": a.batch, "params": a.params,
               "backward_frac": DEFAULT["backward_frac"], "source": "the command line"}
    else:
        inp = dict(DEFAULT)
    if a.backward_frac is not None:
        inp["backward_frac"] = a.backward_frac
    for name, v in (("--backward-frac", inp["backward_frac"]), ("--hidden-frac", a.hidden_frac)):
        if v is not None and not 0.0 <= v <= 1.0:
            ap.error(f"{name} must be within [0, 1], got {v}")
    if (a.bucket_mib is not None and a.bucket_mib <= 0) or a.grad_bytes <= 0 or \
            a.gpus_per_node < 1:
        ap.error("--bucket-mib, --grad-bytes and --gpus-per-node must be positive")
    grad = inp["params"] * a.grad_bytes
    bucket = a.bucket_mib * MIB if a.bucket_mib is not None else stoke_bucket(grad)
    rows, compute, backward, grad, h = table(inp, bucket, a.grad_bytes, a.hidden_frac,
                                             a.gpus_per_node)
    k = len(buckets(grad, bucket))
    print("MODEL, NOT MEASURED: data-parallel scaling of one training step (weak scaling,")
    print("the per-rank batch kept), from a measured compute time and published NCCL bus")
    print("bandwidths; no multi-GPU run produced these figures.")
    print(f"compute: {compute * 1e3:.3f} ms a step ({inp['source']}), batch {inp['batch']} "
          f"a rank, backward {inp['backward_frac'] * 100:.0f}% = {backward * 1e3:.3f} ms")
    print(f"gradients: {inp['params']:,} x {a.grad_bytes} B = {grad / 1e6:.2f} MB in {k} "
          f"bucket{'s' if k > 1 else ''} of <= {bucket / MIB:.3g} MiB; hidden share "
          f"{h * 100:.0f}%{' (one bucket: backward is over when it is ready)' if k == 1 and a.hidden_frac is None else ''}")
    print()
    print("| MODEL: configuration | ranks | busbw (GB/s) | all-reduce (ms) | hidden (ms) "
          "| step (ms) | samples/s | speedup | efficiency |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        bw = f"{r['busbw'] / 1e9:.1f}" if r["ranks"] > 1 else "-"
        print(f"| {r['config']} | {r['ranks']} | {bw} | {r['allreduce'] * 1e3:.4f} | "
              f"{r['hidden'] * 1e3:.4f} | {r['step'] * 1e3:.4f} | {r['rate']:,.0f} | "
              f"{r['speedup']:.2f}x | {r['efficiency'] * 100:.1f}% |")
    print()
    print("Sources (figures published by others, not measured here):")
    for s in SOURCES:
        print(f"  - {s}")
    if inp["source"] == DEFAULT["source"]:
        print("  - compute: docs/gpu.md, 'Measured on an NVIDIA H200' (measured there, "
              "on one GPU)")
    print("Not modelled: NCCL's launch overhead per bucket beyond what the curves hold, "
          "stragglers, the input pipeline, contention between the all-reduce's and the "
          "backward's kernels for SMs and memory bandwidth.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
