#!/bin/sh
# tune_precision.sh STOKE WORKDIR - precision left unset where the CPU's rule is unsure
# (AVX512-BF16 without AMX) is measured, not taken: fp32 against bf16 by two trials,
# the choice said with both rates and the rule's doubt, cached for the next run, kept
# by a resume; where the rule is sure nothing is measured. The unsure case needs a CPU
# with AVX512-BF16 (one with AMX is capped below it with STOKE_MAX_CPU_ISA); on any
# other the test checks the sure case and then skips (77), saying so. No timing is
# judged: only that the choice follows from the numbers the trials printed.
set -u
stoke=$1
work=$2
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
unset STOKE_MAX_CPU_ISA
# a CPU-only machine whatever this one has: with a GPU the GPU's rules speak (and are
# sure); an NVML and a CUDA runtime that cannot be loaded are "no GPU found"
export STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1
export STOKE_CUDART_LIBRARY=/nonexistent/libcudart.so.13
py=/usr/bin/python3
small="--limit 1024 --val-limit 100"
# every other setting given: precision is the only one that may be left to measurement
given="--batch-size 32 --workers 0 --threads 1 --prefetch 2 --no-monitor"

expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}
expect_no_line() {
    if grep -Eq -- "$2" "$out"; then fail "$1 (a line '$2')"; show "$out"; else ok "$1"; fi
}

# --- the rule sure (no bf16 instructions under an AVX2 cap, whatever the CPU): the
# rule's fp32, no trial, nothing pending
STOKE_MAX_CPU_ISA=avx2 "$stoke" config show $small >"$out" 2>&1 || { fail "config show"; show "$out"; }
# (the reason says which: none, or hidden by the cap)
expect_line "sure: config show takes the rule" "^precision +fp32 +rule: CPU-only: .*(no bf16 instructions|hidden by the CPU ISA cap avx2)"
expect_no_line "sure: nothing pending" "^precision .*not measured yet"
STOKE_MAX_CPU_ISA=avx2 "$stoke" train $small $given --max-steps 2 >"$out" 2>&1 ||
    { fail "sure: train"; show "$out"; }
expect_no_line "sure: no trial" "^tune: "
expect_line "sure: the rule's precision" "^precision: fp32 \(auto: CPU-only: "

# --- the rule unsure: this CPU's AVX512-BF16 without AMX, or AMX capped away
flags=$(grep -m1 '^flags' /proc/cpuinfo)
case " $flags " in
*" avx512_bf16 "*)
    case " $flags " in
    *" amx_bf16 "*) export STOKE_MAX_CPU_ISA=avx512_core_bf16 ;;
    esac
    ;;
*)
    echo "$fails failed before the skip"
    [ "$fails" -eq 0 ] || exit 1
    echo "skip: the unsure case needs a CPU with AVX512-BF16 (this one has no avx512_bf16 flag)"
    exit 77
    ;;
esac

# a dry run says the rule's value and that a run measures it
"$stoke" config show $small $given >"$out" 2>&1 || { fail "config show"; show "$out"; }
expect_line "unsure: config show: the rule's value, measured next" \
    "^precision +fp32 +rule: auto, not measured yet \(not measured before; a run measures it first\): the rule: CPU-only: .*(AVX512-BF16 but no AMX|AMX-BF16 is hidden by the CPU ISA cap)"
"$stoke" train $small $given --dry-run >"$out" 2>&1 || { fail "dry run"; show "$out"; }
expect_no_line "unsure: a dry run runs no trial" "^tune: trial"
expect_line "unsure: the dry run's precision" "^precision: fp32 \(auto: auto, not measured yet"

# a run measures it: two trials, fp32 and bf16, and the choice with its reason
"$stoke" train $small $given --max-steps 2 --checkpoint "$work/run.safetensors" >"$out" 2>&1 ||
    { fail "unsure: train"; show "$out"; }
cp "$out" "$work/first.txt"
expect_line "unsure: precision measured" "^tune: measuring precision by short trials"
expect_line "unsure: fp32's trial" "^tune: trial 1 \(precision\): batch 32, .*, fp32 -> [0-9]+ samples/s"
expect_line "unsure: bf16's trial" "^tune: trial 2 \(precision\): batch 32, .*, bf16 -> [0-9]+ samples/s"
expect_line "unsure: the choice and why" \
    "^precision: (fp32|bf16) \(auto: measured: .*the rule was unsure: AVX512-BF16 without AMX"
if $py - "$work/first.txt" >"$out" 2>&1 <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rate = {m.group(1): int(m.group(2)) for m in re.finditer(
    r"^tune: trial \d \(precision\): .*, (fp32|bf16) -> (\d+) samples/s", text, re.M)}
line = re.search(r"^precision: (\w+) \(auto: measured: (.*)\)", text, re.M)
chosen, why = line.group(1), line.group(2)
assert "(fp32 %d, bf16 %d)" % (rate["fp32"], rate["bf16"]) in why, (rate, why)
if chosen == "bf16":
    assert rate["bf16"] > rate["fp32"] * 1.05, (rate, why)
    assert re.search(r"mean loss over the same first steps [0-9.]+ against fp32's [0-9.]+", why), why
else:
    assert why.startswith("fp32: "), why
PY
then ok "unsure: the choice follows from the trials"; else fail "unsure: the choice"; show "$out"; fi
chosen=$(sed -n 's/^precision: \([a-z0-9]*\) (auto: measured: .*/\1/p' "$work/first.txt")

# the next run takes it from the cache, and says so
"$stoke" config show $small $given >"$out" 2>&1 || { fail "config show"; show "$out"; }
expect_line "unsure: config show: cached, with the reason" "^precision +$chosen +cached: .*the rule was unsure: AVX512-BF16 without AMX"
"$stoke" train $small $given --max-steps 2 >"$out" 2>&1 || { fail "cached run"; show "$out"; }
expect_no_line "unsure: the cached run runs no trial" "^tune: trial"
expect_line "unsure: the cached run's precision" "^precision: $chosen \(cached: measured by an earlier run's trials .*the rule was unsure: AVX512-BF16 without AMX"

# stoke tune compares them too (it measures every setting not given), and its file
# keeps the reason
"$stoke" tune $small --batch-size 32 --workers 0 --threads 1 --prefetch 2 --trial-seconds 0.1 \
    --output "$work/tuned.yaml" >"$out" 2>&1 || { fail "stoke tune"; show "$out"; }
expect_line "tune: fp32's trial" "^trial 1 \(precision\): batch 32, .*, fp32 -> [0-9]+ samples/s"
expect_line "tune: bf16's trial" "^trial 2 \(precision\): batch 32, .*, bf16 -> [0-9]+ samples/s"
expect_line "tune: why" "^  precision: .*the rule was unsure: AVX512-BF16 without AMX"
cp "$work/tuned.yaml" "$out"
expect_line "tune: the file's reason" "^# why precision: .*the rule was unsure: AVX512-BF16 without AMX"

# a resume keeps the checkpoint's precision: nothing measured again
rm -rf "$STOKE_CACHE_DIR"
"$stoke" train --resume "$work/run.safetensors" --max-steps 4 >"$out" 2>&1 ||
    { fail "resume"; show "$out"; }
expect_no_line "unsure: a resume measures nothing" "^tune: "
expect_line "unsure: a resume keeps the precision" "^precision: $chosen \(checkpoint"
e2e_end
