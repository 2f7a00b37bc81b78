#!/bin/sh
# tune_cache.sh STOKE WORKDIR FAKEDIR - the tuning cache and the files stoke opens as a
# hostile user leaves them (issue 26): an entry or a library that is a FIFO (a hang
# fails by ctest's TIMEOUT, which ends the whole tree of processes),
# a directory, a device or random bytes where an entry should be, two datasets whose
# real paths are longer than 2048 bytes, cached values outside what this machine and
# dataset allow, and outputs that cannot be written found before the work, not after.
set -u
stoke=$1
work=$2
fake=$3
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
small="--limit 256 --val-limit 100"
fast="--trial-seconds 0.05"
auto="--batch-size auto --workers auto --threads auto --prefetch auto --precision auto"

# run WHAT CMD...: CMD, its output in $out and its status in $rc (WHAT names it here)
run() {
    shift
    "$@" >"$out" 2>&1
    rc=$?
    return 0
}
expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}
expect_no_line() {
    if grep -Eq -- "$2" "$out"; then fail "$1 (a line '$2')"; show "$out"; else ok "$1"; fi
}

# --- an entry measured, then replaced by what a cache must not trust
"$stoke" tune $small $fast --output "$work/tuned.yaml" >"$out" 2>&1 ||
    { fail "tune exit $?"; show "$out"; }
entry=$(ls "$work"/cache/tune/*.yaml 2>/dev/null | head -n 1)
[ -f "$entry" ] && ok "an entry written" || { fail "no cache entry"; e2e_end; exit 1; }
cp "$entry" "$work/good.yaml"

show_auto() { run "$1" "$stoke" config show $small $auto; }

# a FIFO: never opened (it would block until a writer came)
rm -f "$entry"
mkfifo "$entry"
show_auto "config show on a FIFO entry"
[ $rc -eq 0 ] && ok "config show on a FIFO entry: exit 0" || { fail "exit $rc"; show "$out"; }
expect_line "a FIFO entry: unreadable, and why" "^workers +[0-9]+ +rule: auto, not measured yet \(the entry is unreadable: $entry: is a FIFO \(named pipe\), not a regular file"
run "train --tune cache on a FIFO entry" "$stoke" train $small --workers auto --tune cache \
    --max-steps 2 --no-monitor
[ $rc -eq 0 ] && ok "train --tune cache on a FIFO entry: exit 0" || { fail "exit $rc"; show "$out"; }
expect_line "and says the entry is a FIFO" "is a FIFO \(named pipe\), not a regular file"
rm -f "$entry"

# a directory, a device, random bytes, text without a key: unreadable, each saying why;
# never "for another machine, model or dataset"
mkdir "$entry"
show_auto "a directory"
expect_line "a directory entry: unreadable" "\(the entry is unreadable: $entry: is a directory, not a regular file"
rmdir "$entry"
ln -s /dev/zero "$entry"
show_auto "/dev/zero"
expect_line "/dev/zero: unreadable" "\(the entry is unreadable: $entry: is a character device, not a regular file"
rm -f "$entry"
{ printf 'batch_size: 4\n\000'; head -c 2000 /dev/urandom; } >"$entry"
show_auto "random bytes"
expect_line "random bytes: unreadable" "\(the entry is unreadable: $entry: holds a NUL byte, not text"
printf 'batch_size: 4\nworkers: 1\n' >"$entry"
show_auto "no key line"
expect_line "text without a key: unreadable" "\(the entry is unreadable: $entry: has no '# key:' line"
expect_no_line "none of them 'for another machine'" "for another machine"

# --- values outside what this machine and dataset allow: measured again, saying which
sed 's/^batch_size: .*/batch_size: 16777216/' "$work/good.yaml" >"$entry"
show_auto "a batch of 16777216"
expect_line "a batch above the samples: not taken, and why" "^batch_size +[0-9]+ +rule: auto, not measured yet \($entry holds batch_size 16777216, outside 1\.\.[0-9]+ \(at most [0-9]+ keeps an epoch of 256 samples"
run "train on a batch of 16777216" "$stoke" train $small --batch-size auto --max-steps 2 \
    --no-monitor
[ $rc -eq 0 ] && ok "train with that entry: measured again, exit 0" || { fail "exit $rc"; show "$out"; }
expect_line "the run says why it measures" "^tune: measuring batch_size by short trials \($entry holds batch_size 16777216"
# the run rewrote it: put the bad value back for the next cases
sed 's/^workers: .*/workers: 256/' "$work/good.yaml" >"$entry"
show_auto "256 workers"
# (a machine with 256 usable CPUs or more would take them: none runs this suite)
expect_line "more workers than CPUs: not taken" "^workers +[0-9]+ +rule: auto, not measured yet \($entry holds 256 workers, more than this machine's [0-9]+ usable CPUs?"
sed 's/^threads: .*/threads: 4096/' "$work/good.yaml" >"$entry"
show_auto "4096 threads"
expect_line "more threads than CPUs: not taken" "^threads +[0-9]+ +rule: auto, not measured yet \($entry holds 4096 threads, more than this machine's [0-9]+ usable CPUs?"
sed 's/^prefetch: .*/prefetch: 1024/' "$work/good.yaml" >"$entry"
show_auto "prefetch 1024"
expect_line "a prefetch beyond the ring: not taken" "^prefetch +[0-9]+ +rule: auto, not measured yet \($entry holds prefetch 1024, outside the loader's 2\.\.32 batches in flight"
cp "$work/good.yaml" "$entry"
show_auto "the entry as measured"
expect_line "the entry as tune wrote it is taken" "^workers +[0-9]+ +cached: "

# --- two datasets whose real paths share their first 2048 bytes: two entries
long=$work/long
i=0
while [ $i -lt 11 ]; do
    long=$long/dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd
    i=$((i + 1))
done
# (a --dataset is at most 511 bytes: the real path is long through a link)
for d in a b; do
    mkdir -p "$long/$d"
    for f in "$data"/*; do ln -s "$f" "$long/$d/"; done
    ln -s "$long/$d" "$work/$d"
done
run "tune on the first long path" "$stoke" tune --dataset "$work/a" $small $fast --output "$work/a.yaml"
[ $rc -eq 0 ] && ok "tune on a long path" || { fail "tune exit $rc"; show "$out"; }
run "config show on the second" "$stoke" config show --dataset "$work/b" $small --workers auto
expect_line "the second dataset: not the first's entry" "^workers +[0-9]+ +rule: auto, not measured yet \(not measured before"
if grep -q "^# key: .*$long/a:[0-9]*:[0-9]*|limit=256|" "$work/a.yaml"; then
    ok "the key is whole: the path, its size and time, the settings after it"
else
    fail "the key cut"; grep '^# key' "$work/a.yaml" | cut -c 1-300
fi

# a line break in the dataset's path: the settings file stays YAML (the path is in a
# comment line, which the break would end)
nl="$work/nl
x"
ln -s "$data" "$nl"
run "tune on a path with a line break" "$stoke" tune --dataset "$nl" $small $fast --no-cache \
    --output "$work/nl.yaml"
run "the file it wrote" "$stoke" config show --config "$work/nl.yaml" --limit 10
[ $rc -eq 0 ] && ok "a line break in the path: the settings file reads back" ||
    { fail "the file does not read back: exit $rc"; show "$out"; }

# --- outputs checked before the work
run "tune --output in a missing directory" "$stoke" tune $small $fast --no-cache \
    --output "$work/no/dir/t.yaml"
[ $rc -eq 1 ] && ok "tune --output missing-dir: exit 1" || { fail "exit $rc"; show "$out"; }
expect_line "and names it" "--output: $work/no/dir/t.yaml: cannot create"
expect_no_line "before any trial" "^trial "
run "train --checkpoint in a missing directory" "$stoke" train $small --epochs 1 --no-monitor \
    --checkpoint "$work/no/dir/c.safetensors"
[ $rc -eq 1 ] && ok "train --checkpoint missing-dir: exit 1" || { fail "exit $rc"; show "$out"; }
expect_line "and names it" "--checkpoint: $work/no/dir/c.safetensors: cannot create"
expect_no_line "before any epoch" "^epoch "

# --- a library that is a FIFO: refused, naming the variable, never loaded
fifo=$work/lib.fifo
mkfifo "$fifo"
run "STOKE_NVML_LIBRARY=fifo probe" env STOKE_NVML_LIBRARY="$fifo" "$stoke" probe
expect_line "NVML: the variable and the file named" "STOKE_NVML_LIBRARY=$fifo: is a FIFO \(named pipe\), not a regular file"
run "STOKE_CUDART_LIBRARY=fifo train" env STOKE_CUDART_LIBRARY="$fifo" "$stoke" train $small \
    --device cuda --max-steps 1 --no-monitor
[ $rc -eq 1 ] && ok "the CUDA runtime a FIFO: exit 1" || { fail "exit $rc"; show "$out"; }
expect_line "the runtime: the variable and the file named" "STOKE_CUDART_LIBRARY=$fifo: is a FIFO \(named pipe\), not a regular file"
if [ -f "$fake/fake_cudart/libcudart.so.13" ]; then
    use_gpu_doubles "$fake" "$(dirname "$0")/../scenarios"
    # the cnn: cuDNN is loaded for its convolutions
    for v in STOKE_CUBLAS_LIBRARY STOKE_CUBLASLT_LIBRARY STOKE_CUDNN_LIBRARY STOKE_CUDA_KERNELS; do
        run "$v=fifo train" env "$v=$fifo" "$stoke" train $small --model cnn --device cuda \
            --max-steps 1 --no-monitor
        [ $rc -eq 1 ] && ok "$v a FIFO: exit 1" || { fail "$v: exit $rc"; show "$out"; }
        expect_line "$v: the variable and the file named" "$v=$fifo: is a FIFO \(named pipe\), not a regular file"
    done
else
    echo "note: $fake has no CUDA doubles: the backend's libraries not checked"
fi

[ "$fails" -eq 0 ] && rm -rf "$work" # kept to look at when something failed
e2e_end
