#!/bin/sh
# bench/tune_grid.sh [--quick] [BUILD_DIR] - `stoke tune`'s search against the exhaustive
# grid it replaces, on the same machine in the same run: the reference CNN on Debian's
# Fashion-MNIST. The search (`stoke tune`) and the grid (`stoke tune --grid`: every
# batch from 16 to 1024 in powers of two x loader workers 0..CPUs x compute threads
# 1..CPUs x prefetch 2, 4, 8) each pick a setting; both settings are then trained for the
# same number of samples, alternating, and the best of the repeats is compared. Prints
# the search's time against the grid's and its setting's throughput against the grid
# best's: the goal is within 10% of the grid's best in under a tenth of its time.
# --quick: shorter trials and runs. Builds BUILD_DIR (default out/release).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
build=${1:-out/release}
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
if [ $quick = 1 ]; then trial=0.2 samples=12288 repeats=2; else trial=0.5 samples=30720 repeats=3; fi
maxb=1024
if ! [ -d "$data" ]; then
    echo "installing dataset-fashion-mnist (apt-get)" >&2
    apt-get install -y dataset-fashion-mnist >/dev/null
fi
"$here/../scripts/build" "$build" >/dev/null 2>&1 || echo "warning: building $build failed; using what it has" >&2
stoke=$(cd "$build" && pwd)/stoke
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STOKE_CACHE_DIR="$work/cache" # neither side reads an earlier result
cd "$work"
common="--precision fp32 --max-batch $maxb --trial-seconds $trial --json"

echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
"$stoke" tune $common --output search.yaml >search.json
t1=$(date +%s.%N)
"$stoke" tune $common --grid --output grid.yaml >grid.json
t2=$(date +%s.%N)

# train each pick for the same samples, alternating; samples/s from the log's last step
run() { # run CONFIG TAG REPEAT
    b=$(sed -n 's/^batch_size: //p' "$1")
    steps=$(( (samples + b - 1) / b ))
    "$stoke" train --config "$1" --max-steps "$steps" --log-every "$steps" --no-monitor \
        --val-limit 1 --log "$2.$3.jsonl" >/dev/null 2>&1
}
r=1
while [ $r -le $repeats ]; do
    run search.yaml search $r
    run grid.yaml grid $r
    r=$((r + 1))
done

"$py" - "$t0" "$t1" "$t2" "$repeats" <<'EOF'
import json, sys
t0, t1, t2 = (float(x) for x in sys.argv[1:4])
repeats = int(sys.argv[4])
s, g = json.load(open("search.json")), json.load(open("grid.json"))

def setting(d):
    c = d["chosen"]
    return "batch %d, %d workers + %d threads, prefetch %d" % (
        c["batch_size"], c["workers"], c["threads"], c["prefetch"])

def trained(tag):
    best = 0
    for r in range(1, repeats + 1):
        steps = [json.loads(l) for l in open("%s.%d.jsonl" % (tag, r)) if '"samples_per_s"' in l]  # steps and epochs, not findings
        best = max(best, steps[-1]["samples_per_s"])
    return best

ts, tg = t1 - t0, t2 - t1
ss, sg = trained("search"), trained("grid")
print("%-8s %7s %8s  %-45s %s" % ("", "trials", "seconds", "setting", "trained samples/s (best of %d)" % repeats))
print("%-8s %7d %8.1f  %-45s %.0f" % ("search", len(s["trials"]), ts, setting(s), ss))
print("%-8s %7d %8.1f  %-45s %.0f" % ("grid", len(g["trials"]), tg, setting(g), sg))
print("search / grid: throughput %.2f (goal >= 0.90), time %.3f (goal < 0.10)" % (ss / sg, ts / tg))
EOF
