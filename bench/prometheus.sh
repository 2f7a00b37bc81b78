#!/bin/sh
# bench/prometheus.sh [STOKE] [ROUNDS] - what scraping costs training: the same short
# `stoke train` (the mlp on Fashion-MNIST, fixed steps, --log-every 1) run ROUNDS times
# (default 5) each way, interleaved: without --prometheus, and with --prometheus while
# curl scrapes /metrics every 100 ms. The step time is the gap between consecutive step
# records of the log (the first 20 steps of a run left out as warm-up); the median of
# each way over all its rounds and their ratio are printed, the load average beside
# them. docs/prometheus.md has the figures.
set -eu
stoke=${1:-out/release/stoke}
rounds=${2:-5}
steps=${STEPS:-600}
[ -x "$stoke" ] || { echo "no stoke binary at $stoke (build with scripts/build out/release)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing (apt-get install curl)" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "$data is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STOKE_CACHE_DIR="$work/cache"
load() { cut -d' ' -f1-3 /proc/loadavg; }

run() { # run WAY ROUND
    log="$work/$1.$2.jsonl"
    if [ "$1" = plain ]; then
        "$stoke" train --model mlp --epochs 100 --max-steps "$steps" --tune off --log-every 1 \
            --log "$log" >"$work/out" 2>&1
        return
    fi
    "$stoke" train --model mlp --epochs 100 --max-steps "$steps" --tune off --log-every 1 \
        --log "$log" --prometheus 127.0.0.1:0 >"$work/out" 2>&1 &
    pid=$!
    url=""
    while [ -z "$url" ] && kill -0 $pid 2>/dev/null; do
        url=$(sed -n 's/^prometheus: \(http:[^ ]*\)$/\1/p' "$work/out")
        sleep 0.05
    done
    n=0
    while kill -0 $pid 2>/dev/null; do
        curl -s -o /dev/null --max-time 5 "$url" && n=$((n + 1))
        sleep 0.1
    done
    wait $pid
    echo "$n" >"$work/scrapes.$2"
}

echo "stoke train --model mlp --max-steps $steps --log-every 1, $rounds rounds each way, interleaved"
echo "load average at the start: $(load)"
r=1
while [ $r -le "$rounds" ]; do
    run plain $r
    run scraped $r
    echo "  round $r: scrapes during the scraped run $(cat "$work/scrapes.$r"), load $(load)"
    r=$((r + 1))
done
/usr/bin/python3 - "$work" "$rounds" "$(load)" <<'EOF'
import json, statistics, sys
work, rounds, load = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def gaps(way):
    out = []
    for r in range(1, rounds + 1):
        t = [json.loads(l)["time"] for l in open(f"{work}/{way}.{r}.jsonl") if '"type":"step"' in l]
        out += [b - a for a, b in zip(t[20:], t[21:])]
    return out
p, s = gaps("plain"), gaps("scraped")
mp, ms = statistics.median(p), statistics.median(s)
print(f"median step, no endpoint:               {mp * 1e3:.3f} ms ({len(p)} steps)  load {load}")
print(f"median step, scraped every 100 ms:      {ms * 1e3:.3f} ms ({len(s)} steps)  load {load}")
print(f"scraped / not: {ms / mp:.3f}x")
EOF
