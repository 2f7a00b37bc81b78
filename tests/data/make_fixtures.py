#!/usr/bin/python3
"""make_fixtures.py OUTDIR - writes the data-format test fixtures with independent tools
(numpy, gzip, struct) into OUTDIR, with a manifest of what stoke must read back.

Run by ctest at test time (never committed). manifest.txt has one case per line:
  idx-debian SPLIT COUNT CRC32_OF_ALL_IMAGE_BYTES FIRST.raw LAST.raw LABELS.raw CLASS_COUNTS
  case NAME INPUTS TARGETS|- IN.raw TGT.raw|- COUNT IN_SHAPE IN_DTYPE KIND TGT_SHAPE TGT_DTYPE NCLASSES
  bad NAME PATH STATUS SUBSTRING|SUBSTRING...
Shapes are "28x28", or "-" for a scalar; raw files hold every sample in the host's
(little-endian) order, as stoke_dataset_read must return them.
"""
import gzip
import os
import struct
import sys
import zlib

import numpy as np
from numpy.lib import format as npf

out = sys.argv[1]
os.makedirs(os.path.join(out, "bad"), exist_ok=True)
manifest = []
rng = np.random.default_rng(1234)

STOKE_NAMES = {"u1": "uint8", "b1": "uint8", "i1": "int8", "u2": "uint16", "i2": "int16",
               "u4": "uint32", "i4": "int32", "i8": "int64", "f2": "float16",
               "f4": "float32", "f8": "float64"}


def p(*parts):
    return os.path.join(out, *parts)


def sname(a):
    return STOKE_NAMES[a.dtype.kind + str(a.dtype.itemsize)]


def shape_text(shape):
    return "x".join(str(d) for d in shape) if shape else "-"


def raw(a, name):
    """The samples as stoke returns them: host (little-endian) order."""
    le = a.astype(a.dtype.newbyteorder("<")) if a.dtype.itemsize > 1 else a
    if a.dtype == np.bool_:
        le = a.astype(np.uint8)
    with open(p(name), "wb") as f:
        f.write(np.ascontiguousarray(le).tobytes())
    return p(name)


def save_npy(name, a, version):
    with open(p(name), "wb") as f:
        npf.write_array(f, a, version=version, allow_pickle=False)
    return p(name)


# ---- IDX from the Debian package, read with gzip + struct + numpy -------------------
FM = "/usr/share/datasets/fashion-mnist"
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=IDX_TYPES[code], offset=4 + 4 * ndim).reshape(dims)


for split, prefix in (("train", "train"), ("test", "t10k")):
    images = read_idx(f"{FM}/{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(f"{FM}/{prefix}-labels-idx1-ubyte.gz")
    counts = np.bincount(labels, minlength=int(labels.max()) + 1)
    manifest.append(" ".join([
        "idx-debian", split, str(len(images)), str(zlib.crc32(images.tobytes())),
        raw(images[0], f"fm_{split}_first.raw"), raw(images[-1], f"fm_{split}_last.raw"),
        raw(labels, f"fm_{split}_labels.raw"), ",".join(str(c) for c in counts)]))

# ---- small IDX files of every element type, plain and gzip ---------------------------
IDX_CODES = {"u1": 0x08, "i1": 0x09, "i2": 0x0B, "i4": 0x0C, "f4": 0x0D, "f8": 0x0E}


def idx_bytes(a):
    code = IDX_CODES[a.dtype.kind + str(a.dtype.itemsize)]
    head = struct.pack(">HBB", 0, code, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


def write_idx(path, a, gz=False):
    data = idx_bytes(a)
    with open(path, "wb") as f:
        f.write(gzip.compress(data) if gz else data)


for t in ("u1", "i1", "i2", "i4", "f4", "f8"):
    for gz in (False, True):
        d = p(f"idx_{t}{'_gz' if gz else ''}")
        os.makedirs(d, exist_ok=True)
        if t[0] == "f":
            x = (rng.standard_normal((5, 3, 4)) * 100).astype(t)
        else:
            info = np.iinfo(t)
            x = rng.integers(info.min, info.max, (5, 3, 4), endpoint=True).astype(t)
        y = rng.integers(0, 7, 5).astype("u1")
        y[0] = 6  # 7 classes
        suffix = ".gz" if gz else ""
        write_idx(f"{d}/train-images-idx3-ubyte{suffix}", x, gz)
        write_idx(f"{d}/train-labels-idx1-ubyte{suffix}", y, gz)
        manifest.append(" ".join([
            "case", f"idx_{t}{'_gz' if gz else ''}", d, "-", raw(x, f"idx_{t}_{gz}_x.raw"),
            raw(y, f"idx_{t}_{gz}_y.raw"), "5", "3x4", sname(x), "class", "-", "uint8", "7"]))

# ---- NPY, written by numpy in format versions 1.0, 2.0 and 3.0 ------------------------


def npy_case(name, x, y, xfile, yfile, version, kind, nclasses):
    d = p(name)
    os.makedirs(d, exist_ok=True)
    xp = save_npy(os.path.join(name, xfile), x, version)
    yp = "-"
    if y is not None:
        yp = save_npy(os.path.join(name, yfile), y, version)
    manifest.append(" ".join([
        "case", name, xp, "-" if y is None else yp, raw(x, f"{name}_x.raw"),
        "-" if y is None else raw(y, f"{name}_y.raw"), str(len(x)), shape_text(x.shape[1:]),
        sname(x), kind, "-" if y is None else shape_text(y.shape[1:]),
        "-" if y is None else sname(y), str(nclasses)]))


x = rng.integers(0, 256, (6, 4, 4)).astype("|u1")
y = np.array([0, 3, 1, 3, 2, 0], dtype="<i8")
npy_case("npy_v1_u8", x, y, "x.npy", "y.npy", (1, 0), "class", 4)

x = rng.integers(-32768, 32767, (5, 3), endpoint=True).astype(">i2")
y = np.array([1, 0, 1, 1, 0], dtype=">i4")
npy_case("npy_v2_i16be", x, y, "X_train.npy", "y_train.npy", (2, 0), "class", 2)

x = rng.standard_normal((4, 2, 3)).astype("<f4")
y = (rng.standard_normal(4) * 45).astype("<f4")  # head-pose angles: regression
npy_case("npy_v3_f4_regression", x, y, "inputs.npy", "targets.npy", (3, 0), "scalar", 0)

x = rng.standard_normal((3, 5)).astype(">f8")
y = rng.standard_normal((3, 2)).astype("<f4")
npy_case("npy_v1_f8be_vector", x, y, "pose_x.npy", "pose_y.npy", (1, 0), "vector", 0)

x = rng.standard_normal(7).astype("<f8")  # one scalar per sample, no targets file
npy_case("npy_v1_scalar_samples", x, None, "values.npy", None, (1, 0), "none", 0)

x = rng.standard_normal((3, 2)).astype("<f2")
y = np.array([True, False, True])
npy_case("npy_v2_f2_bool", x, y, "data_x.npy", "data_y.npy", (2, 0), "class", 2)

x = rng.integers(0, 9, (4, 2)).astype("<i4")
y = np.array([2.0, 0.0, 1.0, 2.0], dtype="<f8")  # integer-valued floats: classes
npy_case("npy_v1_float_labels", x, y, "x.npy", "y.npy", (1, 0), "class", 3)

# ---- corrupt inputs -----------------------------------------------------------------


def bad(name, data, status, *needles):
    path = p("bad", name)
    if isinstance(data, bytes):
        with open(path, "wb") as f:
            f.write(data)
    manifest.append(" ".join(["bad", name, path, status, "|".join(needles)]))


good = idx_bytes(rng.integers(0, 255, (5, 3, 4)).astype("u1"))
bad("idx_truncated", good[:-10], "format", "idx_truncated", "truncated", "5 x 3 x 4",
    "76 bytes", "holds 66")
bad("idx_oversized", good + b"\0" * 3, "format", "idx_oversized", "oversized", "holds at least 79")
bad("idx_header_cut", good[:9], "format", "idx_header_cut", "header needs 16 bytes")
bad("idx_wrong_magic", b"\x01\x00\x08\x03" + good[4:], "format", "idx_wrong_magic",
    "unrecognised format", "01 00 08 03")
bad("idx_wrong_magic.gz", gzip.compress(b"\x00\x01\x08\x03" + good[4:]), "format",
    "idx_wrong_magic.gz", "offset 0: bad IDX magic 00 01")
bad("idx_bad_type.gz", gzip.compress(b"\x00\x00\x0a\x03" + good[4:]), "format",
    "offset 2: unknown IDX element type 0x0a")
bad("idx_zero_dim", good[:4] + struct.pack(">III", 5, 0, 4), "format", "offset 8: dimension 1 is 0")
gz = gzip.compress(good)
bad("idx_bad_gzip.gz", gz[:10] + bytes(b ^ 0x5A for b in gz[10:]), "format",
    "idx_bad_gzip.gz", "bad gzip")
bad("idx_gzip_cut.gz", gz[:len(gz) // 2], "format", "idx_gzip_cut.gz", "bad gzip", "ends early")
bad("idx_gzip_truncated_content.gz", gzip.compress(good[:-1]), "format",
    "truncated", "(uncompressed)")
d = p("bad", "idx_count_mismatch")
os.makedirs(d, exist_ok=True)
with open(f"{d}/train-images-idx3-ubyte", "wb") as f:
    f.write(good)
write_idx(f"{d}/train-labels-idx1-ubyte", np.zeros(4, "u1"))
bad("idx_count_mismatch", None, "format", "train-images-idx3-ubyte holds 5 samples",
    "train-labels-idx1-ubyte holds 4 labels")
d = p("bad", "idx_negative_label")
os.makedirs(d, exist_ok=True)
with open(f"{d}/train-images-idx3-ubyte", "wb") as f:
    f.write(good)
write_idx(f"{d}/train-labels-idx1-ubyte", np.array([0, 1, -3, 1, 0], "i1"))
bad("idx_negative_label", None, "format", "train-labels-idx1-ubyte", "sample 2", "label -3")


def npy_raw(header_text, version=(1, 0), data=b"", pad=True):
    h = header_text.encode("latin1")
    if pad:
        pre = 10 if version == (1, 0) else 12
        h += b" " * ((64 - (pre + len(h) + 1) % 64) % 64) + b"\n"
    ln = struct.pack("<H", len(h)) if version == (1, 0) else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + ln + h + data


ok_data = np.arange(12, dtype="<f4").tobytes()
bad("npy_bad_dict", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4) ",
                            data=ok_data), "format", "npy_bad_dict", "offset 128",
    "expected ',' or '}'")
bad("npy_unknown_key", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), "
                               "'colour': 'red'}", data=ok_data),
    "format", "npy_unknown_key", "offset 68", "unknown key 'colour'")
bad("npy_unknown_dtype", npy_raw("{'descr': '<c8', 'fortran_order': False, 'shape': (3, 4), }",
                                 data=ok_data * 2),
    "format", "npy_unknown_dtype", "offset 20", "unsupported dtype '<c8'")
bad("npy_fortran", npy_raw("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }",
                           data=ok_data),
    "format", "npy_fortran", "offset 44", "Fortran order is not supported")
bad("npy_truncated_data", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
                                  data=ok_data[:-4]),
    "format", "npy_truncated_data", "truncated data", "48 bytes from offset 128", "holds 44")
bad("npy_version4", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
                            version=(4, 0), data=ok_data),
    "format", "npy_version4", "offset 6", "format version 4.0")
bad("npy_header_past_end", b"\x93NUMPY\x01\x00\xff\x7f{'descr'", "format",
    "npy_header_past_end", "offset 8", "header length 32767 runs past the end")
bad("npy_not_tuple", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (12), }",
                             data=ok_data), "format", "npy_not_tuple", "is not a tuple")
bad("npy_scalar_shape", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                                data=ok_data[:4]), "format", "npy_scalar_shape", "shape ()",
    "no sample axis")
# a count mismatch between inputs and targets
d = p("bad", "npy_count_mismatch")
os.makedirs(d, exist_ok=True)
np.save(f"{d}/x.npy", np.zeros((3, 2), "f4"))
np.save(f"{d}/y.npy", np.zeros(4, "i8"))
bad("npy_count_mismatch/x.npy", None, "format", "x.npy holds 3 samples", "y.npy holds 4 targets")

with open(p("manifest.txt"), "w") as f:
    f.write("\n".join(manifest) + "\n")
print(f"make_fixtures: {len(manifest)} cases in {out}")
