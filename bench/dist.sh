#!/bin/sh
# bench/dist.sh [--quick] [--rounds R] [--models "cnn mlp"] [BUILD_DIR] - data parallel on
# this machine: training samples/s of `stoke train` in one process against two ranks
# (`mpirun -np 2 stoke train` and `stoke train --nproc 2`) at the same per-rank batch,
# the reference CNN (batch 128 a rank) and the MLP 784-512-512-10 (256) on Fashion-MNIST
# held in memory, fp32, SGD momentum 0.9; and the peer: PyTorch (Debian's python3-torch)
# in one process and under DistributedDataParallel over gloo with two processes
# (bench/dist_torch.py), the same model, batch and threads (OPENBLAS_CORETYPE as
# bench/train_bench.sh sets it for PyTorch). The configurations of a
# round are interleaved, their order rotated from round to round; the table gives each
# figure's median over the rounds with the load average it ran at (1 minute, every
# round's), the 2-vs-1 ratios, stoke/PyTorch at 2 ranks, and the all-reduce's share of
# stoke's step and the share of it hidden behind backward (the run's epoch record:
# allreduce_pct, allreduce_hidden_pct). One process gets every core (its default
# threads), each of two ranks half of them. --quick: one round of the CNN (about 3
# minutes on 2 cores); the default is 3 rounds of both (about 20). Builds BUILD_DIR
# (default out/release).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
rounds=3 models="cnn mlp"
while [ $# -gt 0 ]; do
    case $1 in
        --quick) rounds=1 models=cnn; shift ;;
        --rounds) rounds=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        *) break ;;
    esac
done
build=${1:-out/release}
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
if ! [ -d "$data" ] || ! "$py" -c 'import torch' 2>/dev/null; then
    echo "installing python3-torch and dataset-fashion-mnist (apt-get)" >&2
    apt-get install -y python3-torch dataset-fashion-mnist >/dev/null
fi
command -v mpirun >/dev/null 2>&1 || { echo "dist.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
"$here/../scripts/build" "$build" >/dev/null 2>&1 || echo "warning: building $build failed; using what it has" >&2
stoke=$build/stoke
[ -x "$stoke" ] || { echo "dist.sh: no $stoke" >&2; exit 1; }
# root may run mpirun here (a container); --oversubscribe: two ranks fit any machine
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ncpu=$(nproc)
# PyTorch's OpenBLAS on the kernels of this CPU (Debian's falls back to SSE3 ones on a
# model it does not know; bench/train_bench.sh, "OPENBLAS_CORETYPE"); stoke runs in the
# caller's environment
ct=${OPENBLAS_CORETYPE:-Haswell}
half=$((ncpu / 2)); [ $half -ge 1 ] || half=1
tmp=$(mktemp -d)
out=$tmp/results
trap 'rm -rf "$tmp"' EXIT INT TERM

note() { printf '%s\n' "$*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# samples: the whole run's (global) samples; the first steps are in the epoch's figure,
# as a user gets it, for every configuration alike.
spec() {
    if [ "$1" = cnn ]; then echo "cnn 128 6400"; else echo "mlp 256 25600"; fi
}

# One stoke run: "samples/s allreduce_pct hidden_pct threads" from its epoch record.
stoke_rate() { # HOW MODEL
    set -- "$1" $(spec "$2")
    how=$1 m=$2 b=$3 n=$4
    hid=""
    [ $m = mlp ] && hid="--hidden 512,512"
    args="train --model $m $hid --batch-size $b --optimizer sgd --lr 0.05 --momentum 0.9 \
--schedule constant --seed 1 --precision fp32 --limit $n --val-limit 256 --epochs 1 \
--log $tmp/log.jsonl --log-every 1000000"
    rm -f "$tmp/log.jsonl"
    case $how in
        one) timeout -k 10 300 "$stoke" $args --threads $ncpu ;;
        mpi2) timeout -k 10 300 mpirun -np 2 --oversubscribe "$stoke" $args --threads $half ;;
        nproc2) timeout -k 10 300 "$stoke" $args --threads $half --nproc 2 ;;
    esac >"$tmp/stoke.out" 2>&1 || { note "stoke ($how) failed: $(tail -3 "$tmp/stoke.out")"; echo "nan nan nan nan"; return; }
    "$py" - "$tmp/log.jsonl" <<'EOF'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
start = next(r for r in rs if r["type"] == "start")
ep = [r for r in rs if r["type"] == "epoch"][-1]
f = lambda k: "nan" if ep.get(k) is None else f"{ep[k]:.1f}"
print(f"{ep['samples_per_s']:.0f} {f('allreduce_pct')} {f('allreduce_hidden_pct')} {start.get('threads', 'nan')}")
EOF
}
torch_rate() { # RANKS THREADS MODEL
    set -- "$1" "$2" $(spec "$3")
    v=$(OPENBLAS_CORETYPE=$ct timeout -k 10 300 "$py" "$here/dist_torch.py" rate "$3" --ranks "$1" \
        --threads "$2" --batch "$4" --samples "$5" 2>"$tmp/torch.err" |
        awk '/^rate / {print $2; f = 1} END {if (!f) print "nan"}')
    [ "$v" = nan ] && note "PyTorch ($1 ranks) failed: $(tail -3 "$tmp/torch.err")"
    echo "$v"
}

{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $ncpu CPUs"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $(mpirun --version 2>/dev/null | head -1); peer: $("$py" -c 'import torch; print("torch", torch.__version__)') DDP over gloo, OPENBLAS_CORETYPE=$ct"
    echo "# stoke: $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?')"
} >"$out"

who="one mpi2 nproc2 torch1 ddp2"
r=1
while [ $r -le "$rounds" ]; do
    for m in $models; do
        for w in $(echo $who | tr ' ' '\n' | awk -v r=$r '{a[NR] = $0} END {for (i = 0; i < NR; i++) print a[(i + r) % NR + 1]}'); do
            l=$(load1)
            case $w in
                torch1) v="$(torch_rate 1 "$ncpu" $m) nan nan $ncpu" ;;
                ddp2) v="$(torch_rate 2 $half $m) nan nan $half" ;;
                *) v=$(stoke_rate $w $m) ;;
            esac
            echo "rate $r $m $w $v $l" >>"$out"
            note "round $r: $m $w -> $v (samples/s all-reduce% hidden% threads; load average $l)"
        done
    done
    r=$((r + 1))
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"

grep '^#' "$out"
awk '
function median(s,   n, m, i, j, t, v, w) {
    # a failed run (nan) is left out, not counted as the smallest
    m = split(s, w, " ")
    n = 0
    for (i = 1; i <= m; i++) if (w[i] != "nan") v[++n] = w[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    if (n == 0) return "nan"
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "nan" }
$1 == "rate" {
    k = $3 " " $4
    rate[k] = rate[k] " " $5; ar[k] = ar[k] " " $6; hid[k] = hid[k] " " $7
    thr[k] = $8; load[k] = load[k] " " $9
    if (!($3 in seen)) { seen[$3] = 1; order[++no] = $3 }
}
END {
    split("one mpi2 nproc2 torch1 ddp2", ws, " ")
    name["one"] = "stoke, 1 process"; name["mpi2"] = "stoke, mpirun -np 2"
    name["nproc2"] = "stoke --nproc 2"; name["torch1"] = "PyTorch, 1 process"
    name["ddp2"] = "PyTorch DDP (gloo), 2 processes"
    print ""
    print "| model | run | threads a rank | samples/s (median) | all-reduce % of step | hidden % of all-reduce | load avg (1 min, per round) |"
    print "|---|---|---:|---:|---:|---:|---|"
    for (i = 1; i <= no; i++) {
        m = order[i]
        for (j = 1; j <= 5; j++) {
            k = m " " ws[j]
            if (!(k in rate)) continue
            med[k] = median(rate[k])
            print "| " m " | " name[ws[j]] " | " thr[k] " | " med[k] " | " median(ar[k]) " | " median(hid[k]) " |" load[k] " |"
        }
    }
    print ""
    print "| model | stoke 2 ranks / 1 (mpirun) | (--nproc) | PyTorch DDP 2 / 1 | stoke / PyTorch, 2 ranks (mpirun) | stoke / PyTorch, 1 process |"
    print "|---|---:|---:|---:|---:|---:|"
    for (i = 1; i <= no; i++) {
        m = order[i]
        print "| " m " | " ratio(med[m " mpi2"], med[m " one"]) " | " ratio(med[m " nproc2"], med[m " one"]) " | " \
            ratio(med[m " ddp2"], med[m " torch1"]) " | " ratio(med[m " mpi2"], med[m " ddp2"]) " | " ratio(med[m " one"], med[m " torch1"]) " |"
    }
}' "$out"
cp "$out" "$build/dist_bench.results" 2>/dev/null || true
