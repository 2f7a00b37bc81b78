#!/bin/sh
# bench/monitor_overhead.sh [STOKE] [SECONDS] - the monitor's own CPU cost, beside a
# peer: `stoke monitor --interval 0.1 --pid JOB` and `top -b -d 0.1 -p JOB` (procps)
# watch the same job for SECONDS (default 60) at the same time; each one's user+system
# CPU time from /proc/PID/stat is reported as a % of one core, and the ratio printed.
# The job is a process tree that sleeps, so neither tool's time hides in a busy machine.
# (nvidia-smi / nvtop are the GPU peers; this machine has no GPU to run them on.)
set -eu
stoke=${1:-out/release/stoke}
secs=${2:-60}
[ -x "$stoke" ] || { echo "no stoke binary at $stoke (build with scripts/build out/release)" >&2; exit 1; }
[ "$secs" -ge 5 ] || { echo "SECONDS must be at least 5" >&2; exit 2; }
tck=$(getconf CLK_TCK)

sh -c 'sleep 100000 & p=$!; trap "kill $p; exit 0" TERM; wait' &
job=$!
"$stoke" monitor --interval 0.1 --duration "$secs" --jsonl /dev/null --pid "$job" >/dev/null 2>&1 &
mon=$!
top -b -d 0.1 -n $((secs * 10)) -p "$job" >/dev/null 2>&1 &
peer=$!
trap 'kill $job $mon $peer 2>/dev/null || true' EXIT
sleep 1

# utime+stime (fields 14 and 15; the command name may hold spaces, so cut at ") ").
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
m0=$(ticks $mon); p0=$(ticks $peer); start=$(date +%s.%N)
sleep $((secs - 3))
m1=$(ticks $mon); p1=$(ticks $peer); end=$(date +%s.%N)
kill $job 2>/dev/null || true
wait $mon 2>/dev/null || true

awk -v m0="$m0" -v m1="$m1" -v p0="$p0" -v p1="$p1" -v s="$start" -v e="$end" -v tck="$tck" 'BEGIN {
    wall = e - s; m = (m1 - m0) / tck; p = (p1 - p0) / tck;
    printf "interval 0.1 s, %.1f s measured\n", wall
    printf "  stoke monitor --pid  %.2f s CPU = %.2f%% of one core\n", m, 100 * m / wall
    printf "  top -b -d 0.1 -p     %.2f s CPU = %.2f%% of one core\n", p, 100 * p / wall
    if (m > 0) printf "  top / stoke = %.1fx (stoke samples GPUs, the whole tree, I/O and writes JSON lines)\n", p / m
    else printf "  stoke used less than one clock tick\n" }'
