#!/bin/sh
# probe.sh STOKE FAKE_NVML FAKE_CUDART SCENARIOS - runs `stoke probe` as a user would:
# without a GPU library, with the GPU test doubles replaying scenarios, with --json and
# --data, and with bad arguments. Fails on the first wrong answer.
set -u
stoke=$1 fake_nvml=$2 fake_cudart=$3 scenarios=$4
out=$(mktemp -d "${TMPDIR:-/tmp}/stoke-probe-e2e.XXXXXX")
trap 'rm -rf "$out"' EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# run NAME EXPECTED_RC ARGS...: runs stoke probe, keeps stdout/stderr in $out/NAME.*
run() {
    name=$1 want=$2
    shift 2
    "$stoke" probe "$@" >"$out/$name.out" 2>"$out/$name.err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want; stderr: $(cat "$out/$name.err")"
}

has() { # has NAME.STREAM TEXT
    grep -qF -- "$2" "$out/$1" || fail "$1 lacks '$2': $(cat "$out/$1")"
}

# json NAME PYTHON-ASSERTIONS: the document parses and the assertions on `d` hold.
json() {
    python3 - "$out/$1.out" "$2" <<'EOF' || fail "$1: JSON check failed"
import json, sys
d = json.load(open(sys.argv[1]))
def rec(key, device, gpu=None):
    for r in d["recommendations"]:
        if r["key"] == key and r["device"] == device and r.get("gpu") == gpu:
            return r
    raise AssertionError("no recommendation %s on %s %s" % (key, device, gpu))
try:
    exec(sys.argv[2])
except AssertionError as e:
    print("assertion failed:", e, file=sys.stderr)
    print(json.dumps(d, indent=1), file=sys.stderr)
    sys.exit(1)
EOF
}

# --- No GPU library: a plain line, exit 0. ---
export STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1
export STOKE_CUDART_LIBRARY=/nonexistent/libcudart.so
unset STOKE_FAKE_GPU_SCENARIO
run nogpu 0
has nogpu.out "no NVIDIA GPU: "
has nogpu.out "/nonexistent/libnvidia-ml.so.1"
for section in CPU OpenBLAS Memory GPUs Recommendations \
    "Profiles (built-in data/profiles.yaml; starting points, not measurements)"; do
    grep -qx "$section" "$out/nogpu.out" || fail "nogpu: no '$section' section"
done
grep -qx Storage "$out/nogpu.out" && fail "nogpu: a Storage section without --data"
has nogpu.out "pin_memory"
has nogpu.out "  CPU quota       "
has nogpu.out "  available       "
has nogpu.out "  load            "
has nogpu.out "because no GPU"
[ -s "$out/nogpu.err" ] && fail "nogpu: wrote to stderr: $(cat "$out/nogpu.err")"

ncpu=$(getconf _NPROCESSORS_ONLN)
run nogpu_json 0 --json
json nogpu_json "
assert d['gpus'] == [], d['gpus']
assert d['gpu_note'].startswith('no NVIDIA GPU: ')
assert d['cpu']['logical_cpus'] == $ncpu
assert d['cpu']['physical_cores'] >= 1
assert isinstance(d['cpu']['simd'], list)
assert d['memory']['total_bytes'] > 0
assert 'storage' not in d
assert 'driver_version' not in d and 'cuda_runtime_version' not in d
assert rec('precision', 'cpu')['value'] == ('bf16' if 'amx_bf16' in d['cpu']['simd'] else 'fp32'), (rec('precision', 'cpu'), d['cpu']['simd'])
assert rec('pin_memory', 'cpu')['value'] is False
w = rec('loader_workers', 'cpu')['value']
t = rec('compute_threads', 'cpu')['value']
assert w + t == d['cpu']['available_cpus'] or d['cpu']['available_cpus'] == 1, (w, t)
# the cgroup quota (null: none) and the CPUs it leaves; the load sample's figures
q = d['cpu']['quota_cpus']
assert q is None or (q > 0 and d['cpu']['quota_file']), d['cpu']
assert 1 <= d['cpu']['available_cpus'] <= d['cpu']['usable_cpus'], d['cpu']
l = d['cpu'].get('load')
assert l is None or (0 <= l['others_cpus'] <= l['busy_cpus'] + 1e-9 and 0 <= l['steal_pct'] <= 100), l
p = rec('peak_fp32_flops', 'cpu')
assert p['unit'] == 'FLOP/s' and p['value'] > 0, p
for r in d['recommendations']:
    assert r['reason'], r
# the CPU-only class, which decides as the rules
assert d['profiles']['origin'] == 'built-in data/profiles.yaml', d['profiles']
(c,) = d['profiles']['devices']
assert c['device'] == 'cpu' and c['match'] == 'cpu' and c['profile']['name'] == 'cpu', c
assert c['profile']['source'] == \"stoke's own\" and c['profile']['precision'] == 'auto', c
assert c['workers'] == w and c['prefetch'] == rec('prefetch_depth', 'cpu')['value'], c
"
has nogpu.out "  cpu    cpu: the CPU-only class: training on the CPU"

# --- OpenBLAS: the core it loaded and its fit; a fallback forced with OPENBLAS_CORETYPE
# (read by OpenBLAS when it loads) is named as one on any CPU with AVX2 or better. ---
has nogpu.out "stoke's training does not use OpenBLAS"
json nogpu_json "
o = d['openblas']
assert o['core'] and o['config'].startswith('OpenBLAS'), o
assert o['fit'] in ('match', 'below', 'fallback', 'above', 'unknown'), o
assert o['used_by_stoke_training'] is False and 'oneDNN' in o['note'], o
"
OPENBLAS_CORETYPE=Prescott "$stoke" probe >"$out/prescott.out" 2>"$out/prescott.err" ||
    fail "prescott: exit $?"
has prescott.out "Prescott (SSE3 kernels)"
OPENBLAS_CORETYPE=Prescott "$stoke" probe --json >"$out/prescott_json.out" 2>&1 ||
    fail "prescott_json: exit $?"
json prescott_json "
o, simd = d['openblas'], set(d['cpu']['simd'])
assert o['core'] == 'Prescott' and o['core_isa'] == 'SSE3', o
if {'avx2', 'fma'} <= simd:
    want = 'SkylakeX' if {'avx512f', 'avx512bw', 'avx512vl'} <= simd else 'Haswell'
    assert o['fit'] == 'fallback' and o['coretype'] == want, o
    r = rec('openblas_coretype', 'cpu')
    assert r['value'] == want and 'fallback far below' in r['reason'], r
"

# --- --data: tmpfs is memory; a bad path names itself and exits 1. ---
run shm 0 --data /dev/shm
grep -qx Storage "$out/shm.out" || fail "shm: no Storage section"
has shm.out "tmpfs"
has shm.out "memory"
run shm_json 0 --json --data=/dev/shm
json shm_json "
s = d['storage']
assert s['path'] == '/dev/shm' and s['mount_point'] == '/dev/shm', s
assert s['fs_type'] == 'tmpfs' and s['kind'] == 'memory', s
assert 'tmpfs' in s['reason']
"
run badpath 1 --data /nonexistent/stoke-data
has badpath.err "/nonexistent/stoke-data"
[ -s "$out/badpath.out" ] && fail "badpath: printed a report"

# --- Usage errors exit 2; --help exits 0. ---
run badflag 2 --frobnicate
has badflag.err "--frobnicate"
run nodata 2 --data
run extra 2 extra-arg
run help 0 --help
has help.out "usage: stoke probe"

# --- The CPU ISA cap: the probe shows the capped CPU and says so; the precision rule
# follows; a bad value is a usage error naming the variable and the accepted values. ---
export STOKE_MAX_CPU_ISA=avx2
run capped 0
has capped.out "ISA cap         avx2 (STOKE_MAX_CPU_ISA)"
run capped_json 0 --json
json capped_json "
c = d['cpu']
allowed = {'sse4_2', 'avx', 'avx2', 'fma', 'f16c'}
assert c['isa_cap'] == 'avx2', c
assert set(c['simd']) <= allowed, c['simd']
assert 'avx2' in c['simd'] or 'avx2' not in open('/proc/cpuinfo').read(), c
assert not set(c['simd_hidden']) & allowed, c['simd_hidden']
assert not set(c['simd']) & set(c['simd_hidden']), c
assert rec('precision', 'cpu')['value'] == 'fp32', rec('precision', 'cpu')
"
export STOKE_MAX_CPU_ISA=AVX512_Core_AMX # case-insensitive; above this CPU hides less
run capped_high 0 --json
json capped_high "assert d['cpu']['isa_cap'] == 'avx512_core_amx', d['cpu']"
export STOKE_MAX_CPU_ISA=avx3
run badcap 2
has badcap.err "STOKE_MAX_CPU_ISA='avx3' is not a CPU ISA level"
has badcap.err "sse41, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, avx512_core_amx, all"
[ -s "$out/badcap.out" ] && fail "badcap: printed a report"
unset STOKE_MAX_CPU_ISA
run uncapped_json 0 --json
json uncapped_json "assert 'isa_cap' not in d['cpu'] and 'simd_hidden' not in d['cpu'], d['cpu']"

# --- The GPU test doubles. ---
export STOKE_NVML_LIBRARY="$fake_nvml"
export STOKE_CUDART_LIBRARY="$fake_cudart"

run zero 0 # no scenario: a driver with zero devices
has zero.out "no NVIDIA GPU: the driver reports 0 devices"

export STOKE_FAKE_GPU_SCENARIO="$scenarios/probe_nodriver.gpu"
run nodriver 0
has nodriver.out "no NVIDIA GPU: "
has nodriver.out "Driver Not Loaded"

export STOKE_FAKE_GPU_SCENARIO="$scenarios/probe_h100.gpu"
run h100 0
has h100.out "GPU 0: NVIDIA H100 PCIe"
has h100.out "85.5 GB"
has h100.out "9.0"
has h100.out "114"
has h100.out "350 W"
has h100.out "gen 5 x16"
has h100.out "550.54.15"
has h100.out "bf16"
has h100.out "819.5 TFLOP/s"
has h100.out "stoke train   "
run h100_json 0 --json
json h100_json "
assert d['driver_version'] == '550.54.15'
assert d['cuda_driver_version'] == '12.4' and d['cuda_runtime_version'] == '12.4'
assert 'gpu_note' not in d
(g,) = d['gpus']
assert g['name'] == 'NVIDIA H100 PCIe' and g['uuid'] == 'GPU-9a1b2c3d-h100', g
assert g['memory_total_bytes'] == 85520809984
assert g['compute_capability'] == '9.0' and g['sm_count'] == 114, g
assert g['power_limit_mw'] == 350000 and g['max_sm_clock_mhz'] == 1755
assert g['pcie_gen'] == 5 and g['pcie_width'] == 16
# whether stoke train's CUDA backend runs there, and why (tests/e2e/train_cuda.sh
# checks the answers themselves)
assert isinstance(g['cuda_backend']['ready'], bool) and g['cuda_backend']['detail'], g
assert rec('precision', 'gpu', 0)['value'] == 'bf16'
assert rec('tf32', 'gpu', 0)['value'] is True
# 114 SMs x 1755 MHz x 4096 dense bf16 FLOPs/clock/SM (Hopper)
assert rec('peak_bf16_flops', 'gpu', 0)['value'] == 114 * 1755e6 * 4096
assert rec('peak_fp32_flops', 'gpu', 0)['value'] == 114 * 1755e6 * 256
assert rec('pin_memory', 'cpu')['value'] is True
w = rec('loader_workers', 'cpu')['value']
assert w == max(1, min(16, d['cpu']['usable_cpus'] - 2)), w
# seed 000's profile, by name; its 16 workers for 18 cores scaled to this machine
g, c = d['profiles']['devices']
assert g['device'] == 'gpu' and g['gpu'] == 0 and g['match'] == 'name', g
assert g['why'] == \"'NVIDIA H100 PCIe' names 'H100'\", g
p = g['profile']
assert p['name'] == 'h100' and p['source'] == 'seed 000' and p['batch'] == 32, p
assert p['workers'] == 16 and p['workers_for_cores'] == 18 and p['tf32'] is True, p
u = d['cpu']['usable_cpus']
assert g['workers'] == max(1, min(16 * u // 18, u - 2)), (g, u)
assert c['device'] == 'cpu' and c['profile']['name'] == 'cpu', c
"
has h100.out "  gpu 0  h100, by name: 'NVIDIA H100 PCIe' names 'H100'"
has h100.out "batch 32, for seed 000's RAP training pipeline"

export STOKE_FAKE_GPU_SCENARIO="$scenarios/probe_mixed.gpu"
run mixed 0
has mixed.out "GPU 0: NVIDIA GeForce RTX 3090"
has mixed.out "GPU 1: Tesla V100-PCIE-16GB"
has mixed.out "fp16+loss-scaling"
run mixed_json 0 --json
json mixed_json "
a, b = d['gpus']
assert a['compute_capability'] == '8.6' and a['sm_count'] == 82, a
assert a['power_limit_mw'] == 350000
assert b['compute_capability'] == '7.0' and b['sm_count'] == 80, b
assert b['memory_total_bytes'] == 17179869184
# Unsupported readings are absent, never 0.
assert 'power_limit_mw' not in b and 'pcie_gen' not in b and 'pcie_width' not in b, b
assert rec('precision', 'gpu', 0)['value'] == 'bf16'
assert rec('precision', 'gpu', 1)['value'] == 'fp16+loss-scaling'
assert 'loss scaling' in rec('precision', 'gpu', 1)['reason']
assert rec('tf32', 'gpu', 1)['value'] is False
# GeForce GA10x: half of 1024 with fp32 accumulation; V100: 1024 fp16.
assert rec('peak_bf16_flops', 'gpu', 0)['value'] == 82 * 2100e6 * 512
assert rec('peak_fp16_flops', 'gpu', 1)['value'] == 80 * 1380e6 * 1024
assert rec('peak_fp32_flops', 'gpu', 1)['value'] == 80 * 1380e6 * 128
assert a['cuda_device'] == 0 and b['cuda_device'] == 1, (a, b)
# the 3090 has seed 002's profile; no profile has a V100's compute capability 7.0
p0, p1, c = d['profiles']['devices']
assert p0['match'] == 'name' and p0['profile']['name'] == 'rtx-3090', p0
assert p0['profile']['precision'] == 'fp16' and p0['profile']['prefetch_factor'] == 4, p0
assert p1['gpu'] == 1 and p1['match'] == 'none' and 'profile' not in p1, p1
assert 'compute capability 7.x: the rules decide' in p1['why'], p1
"
has mixed.out "  gpu 1  none: no profile names 'Tesla V100-PCIE-16GB' or has compute capability 7.x"

# STOKE_PROFILES replaces the table: a V100 profile by name, a class for the 3090; a bad
# file is an error naming file:line:col and the field.
cat >"$out/v100.yaml" <<'EOF'
version: 1
profiles:
  - name: v100
    match: {gpu_names: [V100], compute_capability: "7.0", memory_gb: 16}
    workers: 4
    prefetch_factor: 3
    precision: fp16
    tf32: false
    source: test
    note: a test profile
  - name: ampere
    match: {compute_capability: "8.0"}
    workers: 2
    prefetch_factor: 2
    precision: bf16
    tf32: true
    source: test
    note: a class
EOF
STOKE_PROFILES="$out/v100.yaml" run custom_json 0 --json
json custom_json "
p0, p1, c = d['profiles']['devices']
assert d['profiles']['origin'].endswith('/v100.yaml'), d['profiles']
assert c['device'] == 'cpu' and c['match'] == 'none' and 'no CPU-only profile' in c['why'], c
assert p0['match'] == 'class' and p0['profile']['name'] == 'ampere', p0
assert \"no profile names 'NVIDIA GeForce RTX 3090'; the nearest class\" in p0['why'], p0
assert p1['match'] == 'name' and p1['profile']['name'] == 'v100', p1
"
STOKE_PROFILES="$out/v100.yaml" run custom 0
has custom.out "  cpu    none: no CPU-only profile in $out/v100.yaml: the rules decide"
printf 'version: 1\nprofiles:\n  - name: x\n    workers: lots\n' >"$out/bad.yaml"
STOKE_PROFILES="$out/bad.yaml" run badprofiles 1
has badprofiles.err "$out/bad.yaml:4:14: workers: expected a whole number in [0, 256], got 'lots'"
[ -s "$out/badprofiles.out" ] && fail "badprofiles: printed a report"
STOKE_PROFILES=/nonexistent/profiles.yaml run noprofiles 1
has noprofiles.err "/nonexistent/profiles.yaml"

# CUDA_VISIBLE_DEVICES renumbers the runtime's devices, NVML's stay: the V100 is cuda:0
# (matched by PCI bus id), the 3090 no CUDA device at all.
CUDA_VISIBLE_DEVICES=1 run visible 0
has visible.out "as device     cuda:0"
has visible.out "not reported (no CUDA runtime match)"
has visible.out "the CUDA runtime does not list this GPU (PCI bus id 00000000:01:00.0"
CUDA_VISIBLE_DEVICES=1 run visible_json 0 --json
json visible_json "
a, b = d['gpus']
assert 'cuda_device' not in a and 'sm_count' not in a, a
assert b['cuda_device'] == 0 and b['sm_count'] == 80, b
"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo "probe e2e: all checks passed"
