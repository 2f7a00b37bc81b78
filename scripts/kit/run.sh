#!/bin/sh
# run.sh [--dry-run] OUT: the GPU kit's one command (scripts/gpu-kit made this folder;
# docs/gpu.md, "The GPU kit"). On a machine with an NVIDIA GPU, its driver and PyTorch,
# in at most 8 minutes, each result a file in OUT (8 files at most):
#   summary.txt   the kit, the NVIDIA libraries found and the files each step loaded,
#                 `stoke probe`, every step's verdict and time, the headline figures, and
#                 the GPU time of the CNN's training kernels (Nsight Compute, where it runs)
#   probe.json    stoke probe --json
#   ops.log       every CUDA op against the CPU backend on this GPU (test_nn_cuda --real)
#                 and the real libraries' exports (test_gpu_libs real_libraries)
#   train.log     stoke train --device cuda on the README's default job, then stoke eval
#   monitor.log   stoke monitor -- python3 <a PyTorch training script>: NVML and diagnosis
#   loader.log    stoke.Loader(device="cuda") feeding a PyTorch training loop
#   bench.log     bench/gpu.sh --quick: stoke against PyTorch on this GPU
#   bench.json    its table as JSON
# A step that fails, times out or cannot run is said so and the next one runs. Exit: 0
# when every step ran and passed (a step skipped for a missing peer, e.g. no PyTorch, is
# not a failure), 1 otherwise.
#
# NVIDIA's libraries are found here, not carried: STOKE_CUDART_LIBRARY, _CUBLAS_,
# _CUBLASLT_, _CUDNN_ and STOKE_NVML_LIBRARY when set; else PyTorch's site-packages
# (nvidia/*/lib), then /usr/local/cuda, then the loader's cache; the driver's libcuda
# and NVML from the loader's cache or the usual driver folders. --dry-run (the suite's
# whole-kit check, scripts/kit-check, on stoke's CPU doubles of these libraries) runs
# every step at sizes the doubles finish in a few minutes on 2 cores.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
data=$kit/data/fashion-mnist
W=${STOKE_KIT_WORK:-/tmp/stoke-kit-work}

# ---- One step, run by the main script in its own process under `timeout` ----
if [ "${1:-}" = --step ]; then
    name=$2
    py=${STOKE_KIT_PYTHON:-python3}
    torch_ok() { [ "$dry" = 0 ] && "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; }
    case $name in
    ops)
        echo "== test_nn_cuda --real: every CUDA op against the CPU backend"
        rc=0
        LD_DEBUG=files LD_DEBUG_OUTPUT=$W/ld.ops "$kit/bin/test_nn_cuda" --real || rc=1
        echo "== test_gpu_libs real_libraries: every function of stoke's tables in these libraries"
        "$kit/bin/test_gpu_libs" real_libraries || rc=1
        exit $rc ;;
    train)
        set -e
        ck=$W/train.safetensors
        extra=""
        # the dry run: the MLP, whose doubles' loops are fast (the CNN's take minutes)
        [ "$dry" = 1 ] && extra="--model mlp --limit 1024 --val-limit 256 --epochs 1"
        echo "== stoke train --device cuda --dataset $data --checkpoint $ck $extra"
        s=$(date +%s.%N)
        # shellcheck disable=SC2086 # extra is a list of flags
        LD_DEBUG=files LD_DEBUG_OUTPUT=$W/ld.train "$kit/bin/stoke" train --device cuda \
            --dataset "$data" --checkpoint "$ck" $extra
        e=$(date +%s.%N)
        echo "train_seconds $(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.1f", e - s}')"
        echo "== stoke eval $ck (on the CPU, the 10,000 test images)"
        lim=""
        [ "$dry" = 1 ] && lim="--limit 256"
        # shellcheck disable=SC2086
        "$kit/bin/stoke" eval "$ck" $lim
        exit 0 ;;
    monitor)
        mon="$kit/bin/stoke monitor --interval 0.5 --jsonl $W/monitor.jsonl --"
        if torch_ok; then
            # about 4 s of training at the H200's 49,000 samples/s, after its 15 s of loading
            job="$py $kit/bench/gpu_torch.py speed cnn --device cuda:0 --precision fp32 --feed loader --workers 0 --warmup 20 --steps 500 --repeats 3"
            echo "== $mon $job"
            # shellcheck disable=SC2086 # plain words
            STOKE_BENCH_DATA=$data $mon $job
        else
            # the dry run, or no PyTorch with a GPU: the monitor watches a Python loop
            echo "== $mon $py -c <a 4 s loop> (PyTorch with a GPU is not here)"
            # shellcheck disable=SC2086
            $mon "$py" -c 'import time
t = time.time()
while time.time() - t < 4: pass'
        fi
        rc=$?
        echo "== the monitor's last sample, and its diagnosis (the JSON lines' last line)"
        grep -v '^{"type":' "$W/monitor.jsonl" 2>/dev/null | tail -n 1
        tail -n 1 "$W/monitor.jsonl" 2>/dev/null
        exit $rc ;;
    loader)
        PYTHONPATH=$kit/python${PYTHONPATH:+:$PYTHONPATH} "$py" "$kit/loader_torch.py" "$data" \
            $([ "$dry" = 1 ] && echo --dry-run)
        exit $? ;;
    bench)
        # One model at a time, the MLP first (the shorter): if the time runs out during
        # the CNN, the MLP's table and JSON are kept (the main script merges the JSON).
        models="mlp cnn"
        [ "$dry" = 1 ] && models=mlp
        rc=0
        for m in $models; do
            set -- --quick --no-build --models $m --json "$W/bench-$m.json"
            [ "$dry" = 1 ] && set -- "$@" --dry-run
            # the kit's commit: the tree around the kit on that machine may be another
            STOKE_BENCH_COMMIT=$(sed -n 's/^commit //p' "$kit/KIT.txt" | head -1) \
                STOKE_BENCH_PYTHON=$(command -v "$py" || echo "$py") STOKE_BENCH_DATA=$data \
                sh "$kit/bench/gpu.sh" "$@" "$kit/bin" || rc=1
        done
        exit $rc ;;
    profile)
        # Where the GPU's time goes, kernel by kernel: Nsight Compute times each launch
        # (its counters work on this workplace's Firecracker machines, not on gVisor)
        ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
        if [ "$dry" = 1 ] || [ -z "$ncu" ]; then
            echo "skip: no Nsight Compute (ncu) here$([ "$dry" = 1 ] && echo ': the dry run')"
            exit 77
        fi
        # the CNN's steps after the first 40 (plans made, graphs captured): launches 2000-3499
        echo "== $ncu --clock-control none --metrics gpu__time_duration.sum: stoke train --device cuda, the CNN"
        "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-units base --csv \
            --launch-skip 2000 --launch-count 1500 "$kit/bin/stoke" train --device cuda \
            --dataset "$data" --limit 25600 --val-limit 256 --epochs 1 --no-monitor \
            >"$W/ncu.csv" 2>"$W/ncu.err" || {
            # a machine whose counters ncu cannot read (gVisor) is not a failure of the kit
            tail -n 5 "$W/ncu.err"
            echo "skip: ncu could not time the kernels: $(grep -v '^$' "$W/ncu.err" | tail -n 1 | cut -c1-120)"
            exit 77
        }
        "$py" "$kit/bench/gpu_report.py" kernels "$W/ncu.csv"
        exit ;;
    esac
    echo "run.sh: no step $name" >&2
    exit 2
fi

# ---- The main script ----
dry=0
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
        *) OUT=$1 ;;
    esac
    shift
done
[ -n "${OUT:-}" ] || { echo "usage: run.sh [--dry-run] OUT" >&2; exit 2; }
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
export OUT W dry
budget=${STOKE_KIT_SECONDS:-470} # 8 minutes, less the time to write the summary
start=$(date +%s)
summary=$OUT/summary.txt
: >"$summary"
say() { printf '%s\n' "$*" | tee -a "$summary"; }
rm -rf "$W" && mkdir -p "$W"

say "# stoke GPU kit: run.sh$([ $dry = 1 ] && echo ' --dry-run (the CPU doubles: no figure here is a GPU measurement)')"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; $(uname -sr)"
sed -n '1,4p' "$kit/KIT.txt" | sed 's/^/kit: /' | tee -a "$summary"

# ---- Unpack the binaries and libraries ----
if ! [ -x "$kit/bin/stoke" ] || [ "$kit/payload.tar.xz" -nt "$kit/bin/stoke" ]; then
    if command -v xz >/dev/null; then
        xz -dc "$kit/payload.tar.xz" | tar -C "$kit" -xf -
    else
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$kit/payload.tar.xz" "$kit"
    fi || { say "run.sh: could not unpack $kit/payload.tar.xz"; exit 1; }
fi

# ---- NVIDIA's libraries on this machine ----
say ""
say "## NVIDIA libraries (found here, not carried)"
py=${STOKE_KIT_PYTHON:-python3}
export STOKE_KIT_PYTHON=$py
sites=""
if command -v "$py" >/dev/null; then
    sites=$("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
fi
sites="$sites
$(ls -d /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages 2>/dev/null)"
cands() { # NAME-GLOB: candidate files, in the order of preference
    for s in $sites; do
        ls "$s"/nvidia/*/lib/$1 "$s"/nvidia/*/*/lib/$1 2>/dev/null
    done
    ls /usr/local/cuda/lib64/$1 /usr/local/cuda/targets/x86_64-linux/lib/$1 2>/dev/null
    ldconfig -p 2>/dev/null | awk -v g="$1" 'BEGIN {gsub(/\./, "\\.", g); gsub(/\*/, ".*", g)} $1 ~ "^" g "$" {print $NF}'
    ls /usr/local/nvidia/lib64/$1 /usr/lib/x86_64-linux-gnu/$1 /usr/lib64/$1 2>/dev/null
}
pick() { # VAR GLOB...: sets VAR (unless set) to the first file found
    var=$1; shift
    eval "cur=\${$var:-}"
    if [ -n "$cur" ]; then say "$var=$cur (given)"; return; fi
    for g in "$@"; do
        f=$(cands "$g" | grep -v '\.so$' | head -1)
        if [ -n "$f" ]; then
            eval "$var=\$f"; export "${var?}"
            say "$var=$f"
            return
        fi
    done
    say "$var: none of $* found"
}
pick STOKE_CUDART_LIBRARY 'libcudart.so.13' 'libcudart.so.12'
pick STOKE_CUBLAS_LIBRARY 'libcublas.so.13' 'libcublas.so.12'
pick STOKE_CUBLASLT_LIBRARY 'libcublasLt.so.13' 'libcublasLt.so.12'
pick STOKE_CUDNN_LIBRARY 'libcudnn.so.9'
pick STOKE_NVML_LIBRARY 'libnvidia-ml.so.1'
nccl=$(cands 'libnccl.so.2' | head -1)
say "NCCL: ${nccl:-not found} (not used by stoke yet)"
# The CUDA runtime loads the driver's libcuda.so.1 by name (its folder goes on the path
# below, with the other NVIDIA folders).
cuda=$(cands 'libcuda.so.1' | head -1)
say "libcuda.so.1 (the driver): ${cuda:-not found}"
if [ -z "${STOKE_CUDA_KERNELS:-}" ]; then
    export STOKE_CUDA_KERNELS=$kit/bin/libstoke_cuda.so
fi
say "STOKE_CUDA_KERNELS=$STOKE_CUDA_KERNELS"
[ -n "${STOKE_FAKE_GPU_SCENARIO:-}" ] && say "STOKE_FAKE_GPU_SCENARIO=$STOKE_FAKE_GPU_SCENARIO (the CPU doubles)"
nvdirs=""
for v in "${STOKE_CUDART_LIBRARY:-}" "${STOKE_CUBLAS_LIBRARY:-}" "${STOKE_CUBLASLT_LIBRARY:-}" \
         "${STOKE_CUDNN_LIBRARY:-}" "${STOKE_NVML_LIBRARY:-}" "$cuda"; do
    [ -n "$v" ] && nvdirs="$nvdirs $(dirname "$v")"
done
# NVIDIA's pip libraries load their siblings by name (cuBLAS its cuBLASLt, cuDNN its
# engine libraries, NVRTC): PyTorch preloads them; stoke's processes find them on the
# path. The kit's own libraries still come first (the RPATH is searched before it).
for d in $nvdirs; do
    case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d ;; esac
done
export LD_LIBRARY_PATH
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /' | tee -a "$summary"

# ---- Where each library resolves from ----
# Allowed outside the kit: what the machine provides itself (provided.sh), from
# anywhere, and anything in the folders the NVIDIA libraries were found in.
. "$kit/provided.sh"
allowed() {
    case $1 in "$kit"/*) return 0 ;; esac
    for d in $nvdirs; do case $1 in "$d"/*) return 0 ;; esac; done
    provided_lib "${1##*/}"
}
ldso=$(ls /lib64/ld-linux-x86-64.so.2 2>/dev/null || ls /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
say ""
say "## The kit's files against this machine's loader"
outside=0
for elf in "$kit"/bin/* "$kit"/python/stoke/*.so; do
    list=$("$ldso" --list "$elf" 2>&1)
    bad=$(printf '%s\n' "$list" | awk '$2 == "=>" {print $1, $3}' | while read -r n p; do
        if [ "$p" = not ]; then echo "$n: NOT FOUND"
        elif ! allowed "$p"; then echo "$n: $p (outside the kit)"; fi
    done)
    if [ -n "$bad" ]; then
        outside=1
        say "${elf#"$kit"/}: $(echo "$bad" | tr '\n' ';')"
    else
        say "${elf#"$kit"/}: $(printf '%s\n' "$list" | grep -c '=>') libraries, each from the kit, glibc, the C++ runtime or NVIDIA"
    fi
done

# ---- The steps ----
verdicts=$W/verdicts
: >"$verdicts"
step() { # NAME CAP LOGFILE: runs run.sh --step NAME, at most CAP seconds (less if the budget is spent)
    name=$1 cap=$2 log=$3
    left=$((budget - ($(date +%s) - start)))
    t=$cap
    [ "$left" -lt "$t" ] && t=$left
    if [ "$t" -lt 10 ]; then
        echo "$name|not run: the ${budget}s budget was spent|0" >>"$verdicts"
        echo "not run: the ${budget}s budget was spent" >"$log"
        return
    fi
    echo "== run.sh: $name (at most ${t}s)"
    : >"$log"
    s=$(date +%s)
    timeout -k 5 "$t" sh "$kit/run.sh" --step "$name" >>"$log" 2>&1
    rc=$?
    d=$(($(date +%s) - s))
    case $rc in
        0) v=ok ;;
        77) v="skipped: $(grep -i 'skip' "$log" | tail -1 | sed 's/^skip[a-z]*: //' | cut -c1-160)" ;;
        124 | 137) v="TIMED OUT at ${t}s" ;;
        *) v="FAILED (exit $rc): $(grep -v '^$' "$log" | tail -1 | cut -c1-160)" ;;
    esac
    echo "$name|$v|$d" >>"$verdicts"
    echo "   $v (${d}s)"
}

# stoke probe first: what stoke sees (its JSON is a result file of its own)
echo "== run.sh: probe"
LD_DEBUG=files LD_DEBUG_OUTPUT=$W/ld.probe timeout -k 5 30 "$kit/bin/stoke" probe --json \
    >"$OUT/probe.json" 2>>"$summary"
prc=$?
say ""
say "## stoke probe"
timeout -k 5 30 "$kit/bin/stoke" probe >>"$summary" 2>&1
echo "probe|$([ $prc = 0 ] && echo ok || echo "FAILED (exit $prc)")|0" >>"$verdicts"

step ops 90 "$OUT/ops.log"
step train 100 "$OUT/train.log"
step profile 90 "$W/profile.log"
step monitor 50 "$OUT/monitor.log"
step loader 50 "$OUT/loader.log"
step bench 400 "$OUT/bench.log"
# bench.json: each model's JSON that bench/gpu.sh finished, in one list
set -- "$W"/bench-*.json
if [ -f "$1" ]; then
    { echo "["; for f in "$@"; do [ "$f" = "$1" ] || echo ","; cat "$f"; done; echo "]"; } >"$OUT/bench.json"
fi

# ---- What was loaded, from the loader's own log ----
say ""
say "## Files the stoke processes loaded (LD_DEBUG=files of probe, ops, train)"
loaded=$(cat "$W"/ld.* 2>/dev/null | sed -n 's/.*calling init: //p' | sort -u)
# Who asked for FILE's name in the processes that loaded it from FILE's path.
needers() {
    grep -l "calling init: $1\$" "$W"/ld.* 2>/dev/null | while read -r log; do
        sed -n "s/.*file=${1##*/} \[[0-9]*\];  \(needed\|dynamically loaded\) by \([^ ]*\).*/\2/p" "$log"
    done | sort -u
}
for f in $loaded; do
    if allowed "$f"; then say "  $f"; continue; fi
    # A library only NVIDIA's libraries asked for (cuDNN's engines and NVRTC want zlib
    # where no kit program links it, as in test_nn_cuda) is the machine's, as they are.
    by=$(needers "$f") nv=1
    for n in $by; do case $n in "$kit"/*) nv=0 ;; *) allowed "$n" || nv=0 ;; esac; done
    if [ -n "$by" ] && [ $nv = 1 ]; then
        say "  $f   (the machine's: asked for by $(echo $by | tr ' ' ','))"
    else
        say "  $f   <- OUTSIDE the kit"; outside=1
    fi
done
echo "libraries|$([ $outside = 0 ] && echo "ok: each from the kit, glibc, the C++ runtime or NVIDIA" || echo "FAILED: some resolved outside the kit (above)")|0" >>"$verdicts"

# ---- The verdicts and the headline figures ----
say ""
say "## Steps ($(($(date +%s) - start))s in all)"
status=0
while IFS='|' read -r n v d; do
    say "$(printf '%-10s %4ss  %s' "$n" "$d" "$v")"
    case $v in ok* | skipped*) ;; *) status=1 ;; esac
done <"$verdicts"
say ""
say "## Figures$([ $dry = 1 ] && echo ' (the dry run: from the CPU doubles, not a GPU)')"
if [ -f "$OUT/ops.log" ]; then
    say "ops: $(grep -c '^ok ' "$OUT/ops.log") cases within tolerance, $(grep -c '^FAIL' "$OUT/ops.log") failed, $(grep -c '^skip: ' "$OUT/ops.log") tests skipped (need the doubles)"
fi
grep -h '^done: \|^train_seconds \|(test, [0-9]* samples)' "$OUT/train.log" 2>/dev/null | sed 's/^/train: /' | tee -a "$summary"
grep -h 'samples/s' "$OUT/loader.log" 2>/dev/null | tail -n 1 | tee -a "$summary"
sed -n '/^kernels: /,$p' "$W/profile.log" 2>/dev/null | sed 's/^/profile: /' | tee -a "$summary"
grep -h -A2 '^diagnosis' "$OUT/monitor.log" 2>/dev/null | cut -c1-200 | sed 's/^/monitor: /' | tee -a "$summary"
awk '/^model  precision/ {on = 1} on {print} on && /^---/ && ++n == 2 {exit}' "$OUT/bench.log" 2>/dev/null \
    | sed 's/^/bench: /' | tee -a "$summary"
exit $status
