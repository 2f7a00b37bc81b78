#!/bin/sh
# bench/monitor_overhead.sh [STOKE] [SECONDS] - the monitor's own CPU cost: runs
# `stoke monitor --interval 0.1` for SECONDS (default 60) on a job (a process tree that
# sleeps, so the monitor's time is not hidden in a busy machine) and reports the
# monitor's user+system CPU time from /proc/PID/stat as a % of one core.
set -eu
stoke=${1:-out/release/stoke}
secs=${2:-60}
[ -x "$stoke" ] || { echo "no stoke binary at $stoke (build with scripts/build out/release)" >&2; exit 1; }
tck=$(getconf CLK_TCK)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The job: a shell with a child, so the tree walk has something to walk; on the
# SIGTERM that --duration sends, the shell ends its child too.
"$stoke" monitor --interval 0.1 --duration "$secs" --jsonl /dev/null \
    -- sh -c 'sleep 100000 & p=$!; trap "kill $p; exit 0" TERM; wait' >"$log" 2>&1 &
mon=$!
sleep 1
# utime+stime of the monitor (fields 14, 15 after the command name), just before it ends.
read_ticks() { sed 's/^.*) //' "/proc/$mon/stat" | awk '{print $12 + $13}'; }
t0=$(read_ticks)
start=$(date +%s.%N)
sleep $((secs - 2))
t1=$(read_ticks)
end=$(date +%s.%N)
wait $mon || true
awk -v t0="$t0" -v t1="$t1" -v s="$start" -v e="$end" -v tck="$tck" 'BEGIN {
    cpu = (t1 - t0) / tck; wall = e - s;
    printf "stoke monitor --interval 0.1: %.2f s CPU over %.1f s = %.2f%% of one core\n",
           cpu, wall, 100 * cpu / wall }'
