#!/bin/sh
# bench/prometheus.sh [STOKE] [ROUNDS] - what the Prometheus endpoint costs training.
# The same short `stoke train` (the mlp on Fashion-MNIST, fixed steps, --log-every 1) run
# ROUNDS times (default 10) three ways, interleaved, the order rotating each round:
#   plain    without --prometheus
#   idle     with --prometheus, nobody scraping
#   scraped  with --prometheus while curl scrapes /metrics every 100 ms (one curl
#            process at nice 19, one connection kept alive, as a Prometheus server
#            scrapes; a curl started per scrape would cost the 2 CPUs its own fork and exec)
# A step's time is the gap between consecutive step records of the log (a run's first 20
# steps left out). Printed: each way's median step over all rounds, and the rounds' own
# ratios (a run's median moves by tens of percent from run to run on a shared machine),
# the load average beside them; then the server's own CPU time per scrape, measured on a
# `stoke monitor --prometheus` over 1,000 scrapes. docs/prometheus.md has the figures.
set -eu
stoke=${1:-out/release/stoke}
rounds=${2:-10}
steps=${STEPS:-600}
[ -x "$stoke" ] || { echo "no stoke binary at $stoke (build with scripts/build out/release)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing (apt-get install curl)" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "$data is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STOKE_CACHE_DIR="$work/cache"
load() { cut -d' ' -f1-3 /proc/loadavg; }

url_of() { # url_of PID OUT: the URL the endpoint printed
    url=""
    while [ -z "$url" ] && kill -0 "$1" 2>/dev/null; do
        url=$(sed -n 's/^prometheus: \(http:[^ ]*\)$/\1/p' "$2")
        sleep 0.05
    done
}

run() { # run WAY ROUND
    log="$work/$1.$2.jsonl"
    set -- "$1" "$2" train --model mlp --epochs 100 --max-steps "$steps" --tune off \
        --log-every 1 --log "$log"
    way=$1 round=$2
    shift 2
    if [ "$way" = plain ]; then
        "$stoke" "$@" >"$work/out" 2>&1
        return
    fi
    "$stoke" "$@" --prometheus 127.0.0.1:0 >"$work/out" 2>&1 &
    pid=$!
    if [ "$way" = idle ]; then
        wait $pid
        return
    fi
    url_of $pid "$work/out"
    rm -rf "$work/scr" && mkdir "$work/scr"
    nice -n 19 curl -s --rate 10/s -o "$work/scr/#1" "$url?n=[1-1000000]" &
    cpid=$!
    wait $pid
    kill $cpid 2>/dev/null || true
    wait $cpid 2>/dev/null || true
    ls "$work/scr" | wc -l >"$work/scrapes.$round"
}

echo "stoke train --model mlp --max-steps $steps --log-every 1, $rounds rounds of 3 ways, interleaved"
echo "load average at the start: $(load)"
r=1
while [ $r -le "$rounds" ]; do
    case $((r % 3)) in
    1) run plain $r; run idle $r; run scraped $r ;;
    2) run idle $r; run scraped $r; run plain $r ;;
    0) run scraped $r; run plain $r; run idle $r ;;
    esac
    echo "  round $r: scrapes during the scraped run $(cat "$work/scrapes.$r"), load $(load)"
    r=$((r + 1))
done
/usr/bin/python3 - "$work" "$rounds" "$(load)" <<'PY'
import json, statistics, sys
work, rounds, load = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def gaps(way, r):
    t = [json.loads(l)["time"] for l in open(f"{work}/{way}.{r}.jsonl") if '"type":"step"' in l]
    return [b - a for a, b in zip(t[20:], t[21:])]
ways = ("plain", "idle", "scraped")
pooled = {w: statistics.median([g for r in range(1, rounds + 1) for g in gaps(w, r)]) for w in ways}
for w, what in zip(ways, ("no endpoint", "endpoint, not scraped", "scraped every 100 ms")):
    print(f"median step, {what + ':':24s} {pooled[w] * 1e3:.3f} ms  load {load}")
for w in ("idle", "scraped"):
    rr = sorted(statistics.median(gaps(w, r)) / statistics.median(gaps("plain", r))
                for r in range(1, rounds + 1))
    print(f"{w} / plain: pooled {pooled[w] / pooled['plain']:.3f}x; per round median "
          f"{statistics.median(rr):.3f}x, from {rr[0]:.3f}x to {rr[-1]:.3f}x")
PY
# the server's own work: the CPU time stoke spends answering 1,000 scrapes (its sampler
# samples once in the meantime at --interval 10)
"$stoke" monitor --interval 10 --duration 60 --prometheus 127.0.0.1:0 >"$work/mon" 2>&1 &
mpid=$!
url_of $mpid "$work/mon"
ticks() { awk '{print $14 + $15}' /proc/$mpid/stat; }
t0=$(ticks)
curl -s -o /dev/null "$url?n=[1-1000]"
t1=$(ticks)
kill $mpid
wait $mpid 2>/dev/null || true
hz=$(getconf CLK_TCK)
echo "server CPU per scrape: $(( (t1 - t0) * 1000000 / hz / 1000 )) us (1,000 scrapes: $(( (t1 - t0) * 1000 / hz )) ms of stoke's CPU, in ticks of $(( 1000 / hz )) ms), load $(load)"
