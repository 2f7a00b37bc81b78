"""image_folder_gen.py DIR [IMAGES] [CLASSES] - writes an image folder of photo-like
JPEGs for bench/image_pipeline.sh: DIR/classNN/NNNNN.jpg, sizes spread around
ImageNet's (~500x375, 400x350, 333x500, 640x480, ...), quality 75-95 (Pillow's default
4:2:0 subsampling), content that compresses like a photograph rather than flat colour:
a smooth two-colour gradient, soft low-frequency shading, a few filled shapes with hard
edges, a fine texture and sensor-like noise. Deterministic (seeded), so every run of
the benchmark decodes the same bytes. Writes DIR/.done (the parameters) last: a folder
without it is incomplete and is written again."""
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

SIZES = [(500, 375), (400, 350), (333, 500), (640, 480), (375, 500), (500, 333),
         (448, 336), (350, 400), (512, 384), (600, 400)]


def image(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    t = (np.cos(a) * x / w + np.sin(a) * y / h + 1) / 2
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    px = c0 + t[..., None] * (c1 - c0)
    # soft shading: a coarse random grid, bilinearly upsampled
    g = rng.normal(0, 25, (6, 8, 3)).astype(np.float32)
    shade = np.asarray(Image.fromarray(g[..., 0]).resize((w, h), Image.BILINEAR))
    px += shade[..., None]
    img = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(img)
    for _ in range(rng.integers(3, 9)):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(w // 10, w // 2), y0 + rng.integers(h // 10, h // 2)
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)([x0, y0, x1, y1], fill=fill)
    px = np.asarray(img).astype(np.float32)
    # a fine texture (fabric, foliage) and noise
    px += 6 * np.sin(x * rng.uniform(0.3, 1.2) + y * rng.uniform(0.3, 1.2))[..., None]
    px += rng.normal(0, rng.uniform(3, 9), px.shape)
    return Image.fromarray(np.clip(px, 0, 255).astype(np.uint8))


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    stamp = f"images {n} classes {classes} generator 1\n"
    done = os.path.join(out, ".done")
    if os.path.exists(done) and open(done).read() == stamp:
        return
    rng = np.random.default_rng(2000)
    for k in range(n):
        cls = os.path.join(out, f"class{k % classes:02d}")
        os.makedirs(cls, exist_ok=True)
        w, h = SIZES[rng.integers(len(SIZES))]
        image(rng, w, h).save(os.path.join(cls, f"{k:05d}.jpg"),
                              quality=int(rng.integers(75, 96)))
    with open(done, "w") as f:
        f.write(stamp)


if __name__ == "__main__":
    main()
