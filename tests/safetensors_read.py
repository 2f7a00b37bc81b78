#!/usr/bin/python3
"""safetensors_read.py - an independent safetensors reader (standard library + numpy
only), written from the format's specification, not from stoke's code.

  safetensors_read.py fixture FILE   checks the fixture that
                                     `test_train_checkpoint --fixture FILE` writes,
                                     recomputing its values with numpy
  safetensors_read.py model FILE     checks a checkpoint written by `stoke train`:
                                     layout, finite float32 weights, metadata keys
Exit status 0 when every check passes, 1 otherwise (each failure is printed).
"""
import json
import struct
import sys

import numpy as np

DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16,
    "U32": np.uint32, "BF16": np.uint16,  # numpy has no bfloat16: read the bits
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    spans = []
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(data[begin:end], dtype=dt).reshape(e["shape"])
        tensors[name] = (e["dtype"], arr)
        spans.append((begin, end))
    spans.sort()
    at = 0
    for b, e in spans:
        check(b == at, "tensors tile the data (hole or overlap at %d)" % b)
        at = e
    check(at == len(data), "tensors cover the data")
    return tensors, meta


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def fixture(path):
    t, meta = read(path)
    i = np.arange(30, dtype=np.float32)
    f32 = (i * np.float32(0.25) - np.float32(3.0) + np.float32(1.0) / (i + np.float32(3))).astype(np.float32)
    check(t["conv1.weight"][0] == "F32" and t["conv1.weight"][1].shape == (6, 5),
          "conv1.weight F32 (6, 5)")
    check(np.array_equal(t["conv1.weight"][1].ravel(), f32), "conv1.weight values")
    bf = bf16_to_f32(t["conv1.weight.bf16"][1]).ravel()
    check(np.all(np.abs(bf - f32) <= np.abs(f32) * 2.0 ** -8), "bf16 values within a bf16 rounding")
    # Round to nearest even, recomputed on the float32 bits.
    u = f32.view(np.uint32)
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    check(np.array_equal(t["conv1.weight.bf16"][1].ravel(), rne), "bf16 bits are round-to-nearest-even")
    f16 = t["conv1.weight.f16"][1]
    check(f16.shape == (6, 1, 5), "f16 shape")
    check(np.array_equal(f16.ravel(), f32.astype(np.float16)), "f16 values (numpy's rounding)")
    i64 = (np.arange(7, dtype=np.int64) - 3) * 1000000000007
    check(np.array_equal(t["step"][1], i64), "I64 values")
    check(np.array_equal(t["bytes"][1].ravel(), (np.arange(12) * 21 + 7).astype(np.uint8)), "U8 values")
    check(t["scalar"][1].shape == () and t["scalar"][1] == np.float64(3.141592653589793), "F64 scalar")
    check(t["empty"][1].shape == (0, 4), "empty tensor shape")
    check(meta.get("stoke.step") == "1234", "metadata stoke.step")
    check(meta.get("stoke.note") == 'quotes " and \\ and unicode \u00e9', "metadata with escapes")


def model(path):
    t, meta = read(path)
    for key in ("stoke.format", "stoke.model", "stoke.epoch", "stoke.step", "stoke.seed",
                "stoke.sampler_epoch", "stoke.sampler_index", "stoke.config"):
        check(key in meta, "metadata has %s" % key)
    weights = [n for n in t if not n.startswith("optim.")]
    check(len(weights) > 0, "has weights")
    for n in weights:
        dt, a = t[n]
        if dt == "F32":
            check(np.all(np.isfinite(a)), "%s is finite" % n)
    json.loads(meta.get("stoke.config", "{}"))
    print("%d tensors (%d weights), %d metadata keys" % (len(t), len(weights), len(meta)))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("fixture", "model"):
        print(__doc__)
        sys.exit(2)
    (fixture if sys.argv[1] == "fixture" else model)(sys.argv[2])
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)
