#!/bin/sh
# bench/image_pipeline.sh [BUILD_DIR] [SECONDS] - an image classifier's input pipeline,
# images/s per core, in one run on one folder of photo-like JPEGs:
#   a. decode only: TurboJPEG decoding every whole image on 1 thread, files in memory
#      (bench/jpeg_decode_bench.c): the limit a loader that decodes every image cannot
#      pass per core;
#   b. stoke: `stoke data bench FOLDER --augment --transforms rrc --size 224x224 --json`,
#      as stoke train would run it (RandomResizedCrop on the original images, decoded
#      every epoch, as torchvision does); its best worker count;
#   c. torchvision's DataLoader: ImageFolder + RandomResizedCrop(224) +
#      RandomHorizontalFlip + ToTensor + Normalize, batch 64, num_workers 0, 1, 2
#      (persistent, pin_memory off) (bench/image_pipeline_torch.py); its best.
# Per core: images per CPU second of each pipeline's processes (every thread, and
# torchvision's worker processes): on a machine shared with other jobs those lose wall
# time to them, not CPU seconds. Wall-clock images/s are printed beside them.
# Goals (issue 14): stoke >= 0.8 x decode-only, stoke >= 3 x torchvision, per core;
# a missed goal is printed as "goal missed".
# The folder (2,000 JPEGs in 10 classes, sizes around ImageNet's, quality 75-95;
# bench/image_folder_gen.py) is written once under bench/out/ and reused. Builds
# BUILD_DIR (default out/release) if needed; installs python3-torchvision with apt-get
# if missing (Debian's 0.14.1, which matches Debian's torch 1.13). SECONDS (default 3)
# per worker count.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-out/release}
secs=${2:-3}
py=/usr/bin/python3
folder=$here/out/imagefolder-2000

if ! "$py" -c 'import numpy, PIL, torchvision' 2>/dev/null; then
    echo "installing python3-torchvision, python3-pil, python3-numpy (apt-get)" >&2
    apt-get install -y python3-torchvision python3-pil python3-numpy >/dev/null
fi
[ -d "$build" ] || "$here/../scripts/build" "$build" >/dev/null
cmake "$build" >/dev/null # a build configured before stoke_bench_decode existed
cmake --build "$build" -j"$(nproc)" --target stoke stoke_bench_decode >/dev/null
if ! [ -f "$folder/.done" ]; then
    echo "writing $folder (2000 JPEGs, once)" >&2
fi
"$py" "$here/image_folder_gen.py" "$folder" 2000 10

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) usable CPUs; $(uptime)"
"$build/tests/stoke_bench_decode" "$folder" "$secs" >"$out/decode"
"$build/stoke" data bench "$folder" --augment --transforms rrc --size 224x224 \
    --seconds "$secs" --json >"$out/stoke"
"$py" "$here/image_pipeline_torch.py" "$folder" "$secs" 0 1 2 >"$out/torch"
echo "# after: $(uptime)"

"$py" - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
kv = lambda f: dict(l.split() for l in open(f"{out}/{f}") if l.strip() and l[0] != "#")
dec, tk = kv("decode"), kv("torch")
torch = {int(k[7:]): (float(v), float(tk[f"torchcpu_w{k[7:]}"])) for k, v in tk.items()
         if k.startswith("torch_w")}
print("".join(l for l in open(f"{out}/torch") if l[0] == "#"), end="")
decode, decode_cpu = float(dec["decode_images_per_s"]), float(dec["decode_images_per_cpu_s"])
print(f"\nfolder: {dec['decode_images']} JPEGs, mean {dec['decode_mean_kb']} KB\n")
print(f"{'pipeline':62} {'workers':>7} {'images/s':>9} {'per CPU-s':>10}")
print(f"{'a. decode only (TurboJPEG, whole image, 1 thread)':62} {'-':>7} {decode:9.0f} "
      f"{decode_cpu:10.0f}")
d = json.load(open(f"{out}/stoke"))
held = d["memory"]["held"]
label = "b. stoke data bench --augment --transforms rrc" + (" (held in memory)" if held else "")
stoke = {}
for r in d["rows"]:
    stoke[r["workers"]] = (r["samples_per_s"], r["samples_per_cpu_s"])
    print(f"{label:62} {r['workers']:7d} {r['samples_per_s']:9.0f} {r['samples_per_cpu_s']:10.0f}")
for w, (v, c) in sorted(torch.items()):
    print(f"{'c. torchvision DataLoader, RRC + flip + ToTensor + Normalize':62} {w:7d} {v:9.0f} "
          f"{c:10.0f}")
# Judged at each side's best worker count (the most images/s), per CPU second.
sw = max(stoke, key=lambda w: stoke[w][0])
tw = max(torch, key=lambda w: torch[w][0])
sper, tper = stoke[sw][1], torch[tw][1]
print(f"\nstoke best: {sw} workers, {stoke[sw][0]:.0f} images/s, {sper:.0f} per CPU second")
print(f"torchvision best: {tw} workers, {torch[tw][0]:.0f} images/s, {tper:.0f} per CPU second")
if held:
    print("(held in memory: decoded once when loaded, so the ratios are not like for like)")
r1, r2 = sper / decode_cpu, sper / tper
print(f"  stoke / decode-only per core  {r1:6.2f}  (goal >= 0.8: "
      f"{'met' if r1 >= 0.8 else 'goal missed'})")
print(f"  stoke / torchvision per core  {r2:6.2f}x (goal >= 3: "
      f"{'met' if r2 >= 3 else 'goal missed'})")
EOF
