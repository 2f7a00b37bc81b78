#!/bin/sh
# train_threads.sh STOKE WORKDIR - the compute threads on shared cores, as a user sees
# them: whether the count adapts during the run (on when decided, off when given), how
# OpenMP's threads wait (stoke's bounded spin, or the user's OMP_WAIT_POLICY /
# GOMP_SPINCOUNT kept), the re-execution that sets it keeping every argument, a foreign
# job under `stoke monitor` never given stoke's setting, and a cgroup CPU quota of one
# CPU read by `stoke probe` and the thread decision where such a cgroup can be made.
# The switching itself is driven by recorded step times in test_train_adapt (no timing
# here).
set -u
stoke=$1
work=$2
py=/usr/bin/python3
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
unset OMP_WAIT_POLICY GOMP_SPINCOUNT STOKE_OMP_WAIT_SET OMP_NUM_THREADS
small="--model mlp --hidden 32 --limit 512 --val-limit 64 --epochs 1 --no-monitor"

available=$("$stoke" probe --json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["cpu"]["available_cpus"])')

# decided: adapting is on with more than one available CPU (the start's count may be 1
# on a busy machine; the most tried is what the CPUs allow)
"$stoke" train $small --log "$work/a b.jsonl" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "train runs"; else fail "train exit $rc"; show "$out"; fi
if [ "$available" -ge 2 ]; then
    if grep -q "^threads adapt: on: .*between 1 and [0-9]" "$out"; then ok "adapt on"; else fail "adapt on"; show "$out"; fi
else
    if grep -q "^threads adapt: off (one compute thread)" "$out"; then ok "adapt off on one CPU"; else fail "adapt off on one CPU"; show "$out"; fi
fi
if grep -q "OpenMP threads spin 1000 times at a barrier, then sleep (GOMP_SPINCOUNT=1000 set by stoke" "$out"; then
    ok "stoke bounds libgomp's spin"
else
    fail "stoke bounds libgomp's spin"; show "$out"
fi
# the re-executed process got every argument: the log path with a space in it
if [ -s "$work/a b.jsonl" ] && grep -q '"type":"start"' "$work/a b.jsonl"; then ok "arguments survive the re-exec"; else fail "log with a space in its path"; fi

# given: fixed, and said
"$stoke" train $small --threads 1 >"$out" 2>&1
if grep -q "^threads adapt: off (the count was given)" "$out"; then ok "adapt off when given"; else fail "adapt off when given"; show "$out"; fi

# the user's OpenMP setting stands
OMP_WAIT_POLICY=passive "$stoke" train $small >"$out" 2>&1
if grep -q "OpenMP waiting as given: OMP_WAIT_POLICY=passive" "$out" && ! grep -q "set by stoke" "$out"; then
    ok "OMP_WAIT_POLICY kept"
else
    fail "OMP_WAIT_POLICY kept"; show "$out"
fi
GOMP_SPINCOUNT=7 "$stoke" train $small >"$out" 2>&1
if grep -q "OpenMP waiting as given: GOMP_SPINCOUNT=7" "$out"; then ok "GOMP_SPINCOUNT kept"; else fail "GOMP_SPINCOUNT kept"; show "$out"; fi

# a foreign job watched by `stoke monitor` runs in the user's environment
"$stoke" monitor --interval 0.1 -- sh -c 'echo "spin=${GOMP_SPINCOUNT:-unset} mark=${STOKE_OMP_WAIT_SET:-unset}"' >"$out" 2>&1
if grep -q "spin=unset mark=unset" "$out"; then ok "monitor's child untouched"; else fail "monitor's child got stoke's OpenMP setting"; show "$out"; fi

# the settings' error paths still exit 2 after the re-exec, without running anything
"$stoke" train --threads -3 >"$out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "threads" "$out"; then ok "bad --threads: exit 2"; else fail "bad --threads: exit $rc"; show "$out"; fi

# An affinity mask of one CPU (taskset): one usable CPU, one thread, nothing to adapt.
if command -v taskset >/dev/null 2>&1 && [ "$(nproc --all)" -ge 2 ]; then
    taskset -c 0 "$stoke" config show >"$out" 2>&1
    if grep -q "^threads *1 *rule: 1 usable CPU" "$out"; then ok "one thread on one CPU of affinity"; else fail "affinity"; show "$out"; fi
    taskset -c 0 "$stoke" train $small >"$out" 2>&1
    if grep -q "^threads adapt: off (one compute thread)" "$out"; then ok "adapt off on one CPU of affinity"; else fail "adapt under taskset"; show "$out"; fi
else
    echo "note: no taskset or one CPU: the affinity case is not run here"
fi

# A cgroup with a quota of one CPU, where this machine lets one be made (root, a
# writable cpu controller): probe reads it, and the decision takes it.
cg=""
trap '[ -n "$cg" ] && rmdir "$cg" 2>/dev/null' EXIT
for base in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpu; do
    d=$base/stoke-test-$$
    if [ -f "$base/cgroup.controllers" ] && grep -qw cpu "$base/cgroup.controllers" 2>/dev/null; then
        mkdir "$d" 2>/dev/null || continue
        if echo "100000 100000" >"$d/cpu.max" 2>/dev/null; then cg=$d; break; fi
        rmdir "$d"
    elif [ -f "$base/cpu.cfs_quota_us" ]; then
        mkdir "$d" 2>/dev/null || continue
        if echo 100000 >"$d/cpu.cfs_period_us" 2>/dev/null && echo 100000 >"$d/cpu.cfs_quota_us" 2>/dev/null; then
            cg=$d; break
        fi
        rmdir "$d"
    fi
done
if [ -n "$cg" ]; then
    in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" 2>/dev/null || echo $$ > "$0/tasks"; exec "$@"' "$cg" "$@"; }
    in_cg "$stoke" probe >"$out" 2>&1
    if grep -q "CPU quota *1.00 CPUs (.*cpu" "$out" && grep -q "available *1 (" "$out"; then ok "probe reads the quota"; else fail "probe reads the quota ($cg)"; show "$out"; fi
    in_cg "$stoke" config show >"$out" 2>&1
    if grep -q "^threads *1 .*quota of 1.0 CPU" "$out"; then ok "one thread under a one-CPU quota"; else fail "threads under the quota"; show "$out"; fi
    in_cg "$stoke" monitor --interval 0.2 -- sleep 1 >"$out" 2>&1
    if grep -q "^  CPUs: 1 usable of " "$out"; then ok "the monitor counts the quota"; else fail "the monitor under the quota"; show "$out"; fi
    rmdir "$cg" 2>/dev/null || true
else
    echo "note: no cgroup with a CPU quota could be made here; the quota is covered by test_hw's recorded trees"
fi
e2e_end
