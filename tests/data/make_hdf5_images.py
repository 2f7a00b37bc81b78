#!/usr/bin/python3
"""Writes the HDF5 files (with h5py) and image folders (with Pillow) that
tests/test_data_hdf5_images.c reads, with the values stoke must produce dumped as raw
native-order bytes beside them, read back by h5py and Pillow (never computed by stoke).

usage: make_hdf5_images.py OUTDIR
"""
import os
import shutil
import sys

import h5py
import numpy as np
from PIL import Image

OUT = sys.argv[1]
rng = np.random.default_rng(20261122)

# Image folders are read at this size (stoke's opts.image_height x image_width).
H, W = 10, 12


def raw(path, arr):
    np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("=")).tofile(path)


def dump_h5(path, names):
    """Reads datasets back with h5py and dumps them as native-order raw bytes."""
    with h5py.File(path, "r") as f:
        for n in names:
            a = f[n][()]
            raw(path + "." + n.replace("/", "_") + ".raw", a)


def hdf5_files(d):
    os.makedirs(d)
    # u8 images + int64 labels, contiguous, default names x / y.
    with h5py.File(f"{d}/contig.h5", "w") as f:
        f.create_dataset("x", data=rng.integers(0, 256, (37, 5, 4), dtype=np.uint8))
        f.create_dataset("y", data=rng.integers(0, 7, 37).astype(np.int64))
    dump_h5(f"{d}/contig.h5", ["x", "y"])
    # The same kind, chunked with gzip, under names stoke does not guess.
    with h5py.File(f"{d}/chunked.h5", "w") as f:
        f.create_dataset("images", data=rng.integers(0, 256, (50, 8, 8, 3), dtype=np.uint8),
                         chunks=(7, 8, 8, 3), compression="gzip", compression_opts=4)
        f.create_dataset("labels", data=rng.integers(0, 10, 50).astype(np.int64),
                         chunks=(16,), compression="gzip")
        f.create_dataset("extra/meta", data=np.arange(3, dtype=np.int32))
    dump_h5(f"{d}/chunked.h5", ["images", "labels"])
    # f32 features + float32 regression targets, chunked and compressed; names inputs/targets.
    with h5py.File(f"{d}/features.h5", "w") as f:
        f.create_dataset("inputs", data=rng.standard_normal((40, 6)).astype(np.float32),
                         chunks=(8, 6), compression="gzip")
        f.create_dataset("targets", data=(rng.standard_normal(40) * 30).astype(np.float32))
    dump_h5(f"{d}/features.h5", ["inputs", "targets"])
    # Big-endian stored data: >f8 inputs and >i4 class labels (X / Y).
    with h5py.File(f"{d}/bigendian.h5", "w") as f:
        f.create_dataset("X", data=rng.standard_normal((20, 3)).astype(">f8"))
        f.create_dataset("Y", data=rng.integers(0, 4, 20).astype(">i4"))
    dump_h5(f"{d}/bigendian.h5", ["X", "Y"])
    # Vector targets; float16 inputs; names data / labels.
    with h5py.File(f"{d}/vector.h5", "w") as f:
        f.create_dataset("data", data=rng.standard_normal((25, 3)).astype(np.float16))
        f.create_dataset("labels", data=rng.standard_normal((25, 2)).astype(np.float32),
                         chunks=(4, 2), compression="gzip")
    dump_h5(f"{d}/vector.h5", ["data", "labels"])
    # One dataset per element type, little- and big-endian, for input_name.
    types = ["u1", "i1", "<i2", ">i2", "<u2", "<i4", ">i4", "<u4", "<i8", ">i8",
             "<f2", ">f2", "<f4", ">f4", "<f8", ">f8"]
    with h5py.File(f"{d}/dtypes.h5", "w") as f:
        for t in types:
            dt = np.dtype(t)
            if dt.kind == "f":
                a = rng.standard_normal((9, 2)) * 100
            else:
                info = np.iinfo(dt)
                a = rng.integers(info.min, info.max, (9, 2), endpoint=True, dtype=np.int64
                                 if dt.kind == "i" else np.uint64)
            f.create_dataset("t_" + t.replace("<", "le").replace(">", "be"), data=a.astype(dt))
        f.create_dataset("y", data=np.arange(9, dtype=np.uint8))
        f.create_dataset("u64", data=np.zeros((9, 2), dtype=np.uint64))
        f.create_dataset("strings", data=np.array([b"abc"] * 9))
        f.create_dataset("scalar", data=np.float32(1.5))
        f.create_dataset("grp/nested", data=np.arange(18, dtype=np.int16).reshape(9, 2))
        f.create_dataset("neg", data=np.array([0, 1, -1, 2, 0, 0, 0, 0, 0], dtype=np.int32))
    dump_h5(f"{d}/dtypes.h5",
            ["t_" + t.replace("<", "le").replace(">", "be") for t in types] + ["y", "grp/nested"])
    # Counts that do not match.
    with h5py.File(f"{d}/mismatch.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((10, 2), dtype=np.float32))
        f.create_dataset("y", data=np.zeros(9, dtype=np.int64))
    # A file cut in half.
    with open(f"{d}/chunked.h5", "rb") as f:
        blob = f.read()
    with open(f"{d}/cut.h5", "wb") as f:
        f.write(blob[: len(blob) // 2])
    # Inputs only.
    with h5py.File(f"{d}/noy.h5", "w") as f:
        f.create_dataset("features", data=np.arange(12, dtype=np.float64).reshape(4, 3))
    # For the threads test: many chunks, and a contiguous twin.
    big = rng.integers(0, 256, (3000, 16, 16), dtype=np.uint8)
    with h5py.File(f"{d}/big.h5", "w") as f:
        f.create_dataset("x", data=big, chunks=(64, 16, 16), compression="gzip")
        f.create_dataset("y", data=rng.integers(0, 10, 3000).astype(np.int64))
        f.create_dataset("xc", data=big)
        f.create_dataset("v", data=rng.standard_normal((3000, 5)).astype(np.float32),
                         chunks=(100, 5))
    dump_h5(f"{d}/big.h5", ["x", "y", "v"])


def gradient(w, h, seed):
    """A smooth picture with some texture, so JPEG keeps it close."""
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)),
                    ((xx + yy) * 128 // max(w + h - 2, 1)) + 60], axis=-1)
    img = img + r.integers(-12, 13, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def luma(rgb):
    """Pillow's convert("L") arithmetic, to check stoke's without Pillow converting."""
    r, g, b = (rgb[..., k].astype(np.uint32) for k in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)


def image_folders(d):
    """imgs/: one file of each kind at the target size, in classes; the expected pixels
    (RGB and gray) in sample order, and per-sample tolerances (0 PNG, 2 JPEG)."""
    root = f"{d}/imgs"
    for c in ["ant", "cat", "dog", "zebra"]:  # "ant" stays empty: still class 0
        os.makedirs(f"{root}/{c}")
    os.makedirs(f"{root}/dog/more")
    samples = []  # (class, relative path, rgb, gray, tolerance)

    def add(cls, rel, rgb, gray, tol):
        samples.append((cls, rel, rgb, gray, tol))

    a = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    Image.fromarray(a, "RGB").save(f"{root}/cat/rgb.png")
    add(1, "cat/rgb.png", a, luma(a), 0)
    g = rng.integers(0, 256, (H, W), dtype=np.uint8)
    Image.fromarray(g, "L").save(f"{root}/cat/gray.png")
    add(1, "cat/gray.png", np.stack([g] * 3, -1), g, 0)
    # Palette with transparency: colors come from the palette, alpha dropped.
    p = Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), "RGB").quantize(16)
    p.info["transparency"] = 3
    p.save(f"{root}/cat/palette.png", transparency=3)
    ref = Image.open(f"{root}/cat/palette.png")
    assert ref.mode == "P"
    prgb = np.asarray(ref.convert("RGB"))
    add(1, "cat/palette.png", prgb, luma(prgb), 0)
    rgba = rng.integers(0, 256, (H, W, 4), dtype=np.uint8)
    Image.fromarray(rgba, "RGBA").save(f"{root}/dog/rgba.png")
    add(2, "dog/rgba.png", rgba[..., :3], luma(rgba[..., :3]), 0)
    # 16-bit gray: stoke keeps the high byte.
    g16 = rng.integers(0, 65536, (H, W), dtype=np.uint16)
    Image.fromarray(g16.astype(np.int32), "I").convert("I;16").save(f"{root}/dog/gray16.png")
    back = np.asarray(Image.open(f"{root}/dog/gray16.png")).astype(np.uint16)
    assert (back == g16).all(), "Pillow did not keep the 16-bit samples"
    hi = (g16 >> 8).astype(np.uint8)
    add(2, "dog/gray16.png", np.stack([hi] * 3, -1), hi, 0)
    # JPEG: compared with Pillow's own decode of the same file.
    j = gradient(W, H, 1)
    Image.fromarray(j, "RGB").save(f"{root}/dog/photo.jpg", quality=90)
    dec = np.asarray(Image.open(f"{root}/dog/photo.jpg").convert("RGB"))
    add(2, "dog/photo.jpg", dec, luma(dec), 2)
    jg = gradient(W, H, 2)[..., 0]
    Image.fromarray(jg, "L").save(f"{root}/dog/more/gray.JPEG", quality=95)
    decg = np.asarray(Image.open(f"{root}/dog/more/gray.JPEG"))
    add(2, "dog/more/gray.JPEG", np.stack([decg] * 3, -1), decg, 2)
    Image.fromarray(a[::-1].copy(), "RGB").save(f"{root}/zebra/z.png")
    add(3, "zebra/z.png", a[::-1], luma(a[::-1]), 0)
    # Not images: ignored.
    with open(f"{root}/cat/notes.txt", "w") as f:
        f.write("not an image\n")
    with open(f"{root}/cat/.hidden.png", "wb") as f:
        f.write(b"junk")
    # stoke's order: class folders by name, then each folder's files by name, then its
    # subfolders.
    samples.sort(key=lambda s: (s[0], s[1].count("/"), s[1]))
    with open(f"{root}.manifest", "w") as f:
        for cls, rel, _, _, tol in samples:
            f.write(f"{cls} {tol} {rel}\n")
    raw(f"{root}.rgb.raw", np.stack([s[2] for s in samples]))
    raw(f"{root}.gray.raw", np.stack([s[3] for s in samples]))

    # The same folder under a split: split/train/<class>/.
    shutil.copytree(root, f"{d}/split/train")

    # Resizing: PNGs of other sizes, against Pillow's resize(BILINEAR) to W x H.
    rs = f"{d}/resize"
    os.makedirs(f"{rs}/c")
    expect = []
    for name, (w, h) in [("a_down.png", (37, 23)), ("b_big.png", (400, 300)),
                         ("c_up.png", (5, 4)), ("d_wide.png", (60, 7))]:
        im = Image.fromarray(gradient(w, h, w * h), "RGB")
        im.save(f"{rs}/c/{name}")
        expect.append(np.asarray(Image.open(f"{rs}/c/{name}").resize((W, H), Image.BILINEAR)))
    raw(f"{rs}.rgb.raw", np.stack(expect))
    # JPEG larger than the target: stoke decodes it at 1/2..1/8 scale (DCT scaling)
    # before resampling, so it is compared with Pillow's full decode + resize within a
    # looser tolerance.
    os.makedirs(f"{d}/resize_jpeg/c")
    im = Image.fromarray(gradient(480, 400, 7), "RGB")
    im.save(f"{d}/resize_jpeg/c/big.jpg", quality=92)
    ref = Image.open(f"{d}/resize_jpeg/c/big.jpg").convert("RGB").resize((W, H), Image.BILINEAR)
    raw(f"{d}/resize_jpeg.rgb.raw", np.asarray(ref)[None])

    # Bad files, one per sample, in name order; the last one is good.
    bad = f"{d}/bad/c"
    os.makedirs(bad)
    Image.fromarray(gradient(64, 48, 3), "RGB").save(f"{d}/jpeg_full.jpg", quality=90)
    with open(f"{d}/jpeg_full.jpg", "rb") as f:
        jb = f.read()
    with open(f"{bad}/a_truncated.jpg", "wb") as f:
        f.write(jb[: len(jb) // 2])
    Image.fromarray(a, "RGB").save(f"{d}/png_full.png")
    with open(f"{d}/png_full.png", "rb") as f:
        pb = bytearray(f.read())
    idat = pb.find(b"IDAT")
    length = int.from_bytes(pb[idat - 4:idat], "big")
    pb[idat + 4 + length] ^= 0xFF  # first byte of the IDAT chunk's CRC
    with open(f"{bad}/b_badcrc.png", "wb") as f:
        f.write(pb)
    with open(f"{bad}/c_text.png", "w") as f:
        f.write("this is a text file, not a picture\n" * 4)
    open(f"{bad}/d_empty.jpg", "wb").close()
    with open(f"{d}/png_full.png", "rb") as f:
        pfull = f.read()
    with open(f"{bad}/e_truncated.png", "wb") as f:
        f.write(pfull[: len(pfull) * 2 // 3])
    Image.fromarray(a, "RGB").save(f"{bad}/f_good.png")

    # Class folders without a single image.
    os.makedirs(f"{d}/noimg/a")
    os.makedirs(f"{d}/noimg/b")
    with open(f"{d}/noimg/a/readme.txt", "w") as f:
        f.write("no pictures here\n")


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    hdf5_files(f"{OUT}/h5")
    image_folders(f"{OUT}")


main()
