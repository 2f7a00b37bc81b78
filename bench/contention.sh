#!/bin/sh
# bench/contention.sh [--quick] [--torch2] [--rounds R] [--levels "0 1 2 quota"]
#                     [--models "cnn mlp"] [BUILD_DIR] - training speed when the cores
# are shared: the reference CNN (batch 128) and the MLP 784-512-512-10 (batch 256) on
# Fashion-MNIST in memory, fp32 and bf16, with 0, 1 and 2 competing busy processes on
# the machine, and under a CPU quota of one core (a cgroup, where one can be made).
# For each: stoke's default (threads decided at the start and adapted during the run),
# stoke at every fixed thread count (--threads N), and PyTorch (Debian's python3-torch,
# 1.13; --torch2: PyTorch 2.5.1 from PyPI, pinned, in a venv under BUILD_DIR, about 3 GB
# with the CUDA libraries its wheel depends on; or STOKE_BENCH_PYTHON's) at its default
# thread count and at every fixed count. The
# runs of one load level are interleaved, and the rounds repeat the whole sweep; the
# table gives the median of the rounds with the load average each figure ran at.
#
# The ratios printed: stoke's default against its own best fixed count (the goal: within
# 10%), against PyTorch's default (at least 2x under contention) and PyTorch's best fixed
# count. --quick: fp32 only, one round (about 6 minutes on 2 cores); the default is two
# rounds of both precisions (about 25 minutes). Builds BUILD_DIR (default out/release).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
quick=0 torch2=0 rounds=2 want_levels="0 1 2 quota" models="cnn mlp"
while [ $# -gt 0 ]; do
    case $1 in
        --quick) quick=1 rounds=1; shift ;;
        --torch2) torch2=1; shift ;;
        --rounds) rounds=$2; shift 2 ;;
        --levels) want_levels=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        *) break ;;
    esac
done
build=${1:-out/release}
py=${STOKE_BENCH_PYTHON:-/usr/bin/python3}
if [ $torch2 = 1 ]; then
    venv=$build/torch2-venv
    if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
        echo "installing PyTorch 2.5.1 and NumPy 1.26.4 from PyPI into $venv (about 3 GB)" >&2
        /usr/bin/python3 -m venv "$venv" &&
            "$venv/bin/pip" install -q --disable-pip-version-check "torch==2.5.1" "numpy==1.26.4" ||
            { echo "contention.sh: installing PyTorch 2.5.1 failed" >&2; exit 1; }
    fi
    py=$venv/bin/python
fi
data=/usr/share/datasets/fashion-mnist
if ! [ -d "$data" ] || { [ $torch2 = 0 ] && ! "$py" -c 'import torch' 2>/dev/null; }; then
    echo "installing python3-torch and dataset-fashion-mnist (apt-get)" >&2
    apt-get install -y python3-torch dataset-fashion-mnist >/dev/null
fi
"$here/../scripts/build" "$build" >/dev/null 2>&1 || echo "warning: building $build failed; using what it has" >&2
stoke=$build/stoke
[ -x "$stoke" ] || { echo "contention.sh: no $stoke" >&2; exit 1; }
ncpu=$(nproc)
precs="fp32 bf16"
[ $quick = 1 ] && precs=fp32
tmp=$(mktemp -d)
out=$tmp/results
hogs=""
cg=""
cleanup() {
    for p in $hogs; do kill "$p" 2>/dev/null || true; done
    [ -n "$cg" ] && rmdir "$cg" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

note() { printf '%s\n' "$*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# A cgroup with a quota of one CPU (v2: cpu.max; v1: cpu.cfs_quota_us), or none.
make_quota() {
    for base in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpu; do
        d=$base/stoke-contention-$$
        if [ -f "$base/cgroup.controllers" ] && grep -qw cpu "$base/cgroup.controllers" 2>/dev/null; then
            mkdir "$d" 2>/dev/null || continue
            if echo "100000 100000" >"$d/cpu.max" 2>/dev/null; then cg=$d; return 0; fi
            rmdir "$d"
        elif [ -f "$base/cpu.cfs_quota_us" ]; then
            mkdir "$d" 2>/dev/null || continue
            if echo 100000 >"$d/cpu.cfs_period_us" 2>/dev/null && echo 100000 >"$d/cpu.cfs_quota_us" 2>/dev/null; then
                cg=$d; return 0
            fi
            rmdir "$d"
        fi
    done
    return 1
}
levels=$(echo "$want_levels" | tr ' ' '\n' | grep -v '^quota$' | tr '\n' ' ')
case " $want_levels " in
    *" quota "*)
        if make_quota; then levels="$levels quota"; else note "no cgroup with a CPU quota could be made here: the quota rows are left out"; fi ;;
esac

# in_level LEVEL CMD...: CMD inside the quota's cgroup for the quota level.
in_level() {
    lv=$1; shift
    if [ "$lv" = quota ]; then
        sh -c 'echo $$ > "$0/cgroup.procs" 2>/dev/null || echo $$ > "$0/tasks"; exec "$@"' "$cg" "$@"
    else
        "$@"
    fi
}

start_hogs() {
    n=$1
    i=0
    while [ "$i" -lt "$n" ]; do
        sh -c 'while :; do :; done' &
        hogs="$hogs $!"
        i=$((i + 1))
    done
}
stop_hogs() {
    for p in $hogs; do kill "$p" 2>/dev/null || true; done
    for p in $hogs; do wait "$p" 2>/dev/null || true; done
    hogs=""
}

# One stoke run: its epoch's samples/s (the whole run: start-up decision, warm-up and any
# thread switch included, as a user gets it).
stoke_rate() { # LEVEL MODEL PREC THREADS(0 = default)
    if [ "$2" = cnn ]; then spec="cnn" b=128 n=6400; else spec="mlp --hidden 512,512" b=256 n=25600; fi
    th=""
    [ "$4" != 0 ] && th="--threads $4"
    in_level "$1" "$stoke" train --model $spec --batch-size $b --optimizer sgd --lr 0.05 --momentum 0.9 \
        --schedule constant --seed 1 --precision "$3" $th --limit $n --val-limit 1 --epochs 1 \
        --log "$tmp/log.jsonl" >"$tmp/stoke.out" 2>&1 || { echo "nan"; return; }
    sed -n 's/.* done in .* | \([0-9.]*\) samples\/s.*/\1/p' "$tmp/stoke.out" | head -1
    grep -h '"type":"threads"' "$tmp/log.jsonl" 2>/dev/null | sed 's/^/# /' >&2 || true
}
torch_rate() { # LEVEL MODEL PREC THREADS(0 = default)
    if [ "$2" = cnn ]; then n=6400; else n=25600; fi
    bf=""
    [ "$3" = bf16 ] && bf=--bf16
    in_level "$1" "$py" "$here/train_torch.py" rate "$2" --threads "$4" --samples $n $bf \
        --stoke "$stoke" 2>/dev/null | awk '/^rate / {print $2; f = 1} END {if (!f) print "nan"}'
}

{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $ncpu CPUs"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# peer: $("$py" -c 'import torch; print("torch", torch.__version__, "default threads", torch.get_num_threads())')"
} >"$out"

who_list() {
    echo "stoke:0"
    t=1; while [ $t -le "$ncpu" ]; do echo "stoke:$t"; t=$((t + 1)); done
    echo "torch:0"
    t=1; while [ $t -le "$ncpu" ]; do echo "torch:$t"; t=$((t + 1)); done
}

r=1
while [ $r -le "$rounds" ]; do
    for lv in $levels; do
        case $lv in quota) k=0 ;; *) k=$lv ;; esac
        start_hogs "$k"
        sleep 1
        for m in $models; do
            for p in $precs; do
                # rotate the order by round, so no configuration always runs first
                for w in $(who_list | awk -v r=$r '{a[NR] = $0} END {for (i = 0; i < NR; i++) print a[(i + r) % NR + 1]}'); do
                    side=${w%%:*} t=${w#*:}
                    l=$(load1)
                    if [ "$side" = stoke ]; then v=$(stoke_rate "$lv" $m $p "$t"); else v=$(torch_rate "$lv" $m $p "$t"); fi
                    echo "rate $r $lv $m $p $side $t ${v:-nan} $l" >>"$out"
                    note "round $r, load $lv: $m $p $side threads ${t#0} -> ${v:-nan} samples/s (load average $l)"
                done
            done
        done
        stop_hogs
    done
    r=$((r + 1))
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"

# The table: medians over the rounds.
grep '^#' "$out"
awk -v ncpu="$ncpu" '
function median(key,   n, i, j, t, v) {
    n = split(vals[key], v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    if (n == 0) return "nan"
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
$1 == "rate" {
    key = $3 " " $4 " " $5 " " $6 " " $7
    vals[key] = vals[key] " " $8
    loads[$3 " " $4 " " $5] = loads[$3 " " $4 " " $5] " " $9
    if (!(($3 " " $4 " " $5) in seen)) { seen[$3 " " $4 " " $5] = 1; order[++no] = $3 " " $4 " " $5 }
}
END {
    hdr = "| competing | model | prec | stoke default |"
    sep = "|---|---|---|---|"
    for (t = 1; t <= ncpu; t++) { hdr = hdr " stoke " t " thr |"; sep = sep "---|" }
    hdr = hdr " torch default |"; sep = sep "---|"
    for (t = 1; t <= ncpu; t++) { hdr = hdr " torch " t " thr |"; sep = sep "---|" }
    hdr = hdr " default / best fixed | default / torch default | default / torch best | load avg |"
    sep = sep "---|---|---|---|"
    print ""; print hdr; print sep
    for (i = 1; i <= no; i++) {
        split(order[i], f, " ")
        lv = f[1] == "quota" ? "quota 1 CPU" : f[1] " busy"
        d = median(order[i] " stoke 0")
        row = "| " lv " | " f[2] " | " f[3] " | " d " |"
        bs = 0; bt = 0
        for (t = 1; t <= ncpu; t++) { v = median(order[i] " stoke " t); row = row " " v " |"; if (v + 0 > bs) bs = v + 0 }
        td = median(order[i] " torch 0"); row = row " " td " |"
        for (t = 1; t <= ncpu; t++) { v = median(order[i] " torch " t); row = row " " v " |"; if (v + 0 > bt) bt = v + 0 }
        row = row sprintf(" %.2f | %.2f | %.2f |", bs ? d / bs : 0, td + 0 ? d / td : 0, bt ? d / bt : 0)
        row = row " " loads[order[i]] " |"
        print row
    }
}' "$out"
cp "$out" "$build/contention.results" 2>/dev/null || true
