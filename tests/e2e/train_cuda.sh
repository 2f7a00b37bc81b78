#!/bin/sh
# train_cuda.sh STOKE WORKDIR FAKEDIR SCENARIODIR - `stoke train --device cuda` as a user
# runs it, without a GPU: NVML, the CUDA runtime, cuBLAS and cuDNN are stoke's test
# doubles (tests/fake: device memory is host memory, GEMMs and convolutions are loops
# that check their arguments) and the kernels run in their host build
# (STOKE_CUDA_KERNELS=host), the same bodies nvcc compiles into libstoke_cuda.so. Each
# GPU run is compared with the same run on the CPU backend: step losses, validation,
# checkpoints that move between devices, the fallback and the errors. A fifth argument
# runs one part alone, as its own ctest that is skipped (77) when its reference is
# missing: actor_critic (needs numpy), module (needs the nvcc-built libstoke_cuda.so);
# nodriver (the runtime without a driver) is only short.
set -u
stoke=$1
work=$2
fake=$3
scenarios=$4
part=${5:-main}
. "$(dirname "$0")/lib.sh"
need_fashion_mnist

use_gpu_doubles "$fake" "$scenarios"

small="--limit 640 --val-limit 300 --epochs 1 --batch-size 64 --log-every 1"

# $1: name, then the flags; the log is $work/$1.jsonl
run() {
    name=$1
    shift
    "$stoke" train $small --log "$work/$name.jsonl" "$@" >"$work/$name.txt" 2>&1
}

# Step losses and the validation of two logs agree within a relative tolerance.
same_run() {
    /usr/bin/python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" <<'PY'
import json, sys
def load(p):
    recs = [json.loads(l) for l in open(p)]
    return ([r["batch_loss"] for r in recs if r["type"] == "step"],
            [r for r in recs if r["type"] == "epoch"])
(a, ea), (b, eb), tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= tol * max(1.0, abs(y)), ("step", i + 1, x, y)
for x, y in zip(ea, eb):
    if y["val_loss"] is None:  # no validation set
        assert x["val_loss"] is None, x
        continue
    assert abs(x["val_loss"] - y["val_loss"]) <= tol * max(1.0, abs(y["val_loss"])), (x, y)
print(f"{len(a)} steps agree within {tol}")
PY
}

# The actor-critic (PPO rows [action, advantage, old log-prob, return]) on rollouts
# written by numpy: policy gradient, slices, the value head's MSE.
part_actor_critic() {
    if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
        echo "skip: /usr/bin/python3 with numpy is missing (the rollouts are written by numpy)"
        exit 77
    fi
    /usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(3)
x = rng.standard_normal((300, 6)).astype(np.float32)
a = rng.integers(0, 4, 300)
r = (a == (x[:, :4].argmax(1))).astype(np.float32)
y = np.stack([a, r - r.mean(), np.full(300, np.log(0.25)), r], 1).astype(np.float32)
np.save(sys.argv[1] + "/ac_x.npy", x)
np.save(sys.argv[1] + "/ac_y.npy", y)
PY
    ac="--model actor-critic --dataset $work/ac_x.npy --limit 300 --batch-size 32 --optimizer adamw --lr 0.003"
    run gpu_ac $ac --device cuda --precision fp32 || { fail "actor-critic on cuda"; show "$work/gpu_ac.txt"; }
    run cpu_ac $ac --device cpu --precision fp32
    same_run gpu_ac cpu_ac 1e-4 && ok "actor-critic: the GPU run's losses are the CPU run's" || fail "actor-critic GPU and CPU differ"
}

# The kernel module nvcc built (beside the binary) refuses a GPU below its
# architectures, and auto then trains on the CPU. Without nvcc there is no module.
part_module() {
    module=$(dirname "$stoke")/libstoke_cuda.so
    if [ ! -f "$module" ]; then
        echo "skip: $module is not built (no nvcc at build time): nothing to check"
        exit 77
    fi
    STOKE_CUDA_KERNELS= STOKE_FAKE_GPU_SCENARIO="$scenarios/cuda_turing.gpu" run turing --model mlp --device cuda
    rc=$?
    if [ $rc -eq 1 ] && grep -q 'compute capability 7.5; this stoke.s kernels are built for 8.0 and up' "$work/turing.txt"; then
        ok "a compute capability 7.5 GPU: the module's architectures named"
    else
        fail "turing: exit $rc"; show "$work/turing.txt"
    fi
    STOKE_CUDA_KERNELS= STOKE_FAKE_GPU_SCENARIO="$scenarios/cuda_turing.gpu" run turing_auto --model mlp
    grep -q '^device: cpu (auto: the CUDA backend cannot run on cuda:0: CUDA device 0 has compute capability 7.5' "$work/turing_auto.txt" &&
        ok "auto on that GPU: the CPU, saying why" || { fail "turing auto"; show "$work/turing_auto.txt"; }
}

# The CUDA runtime without the NVIDIA driver (cudaGetDeviceCount's error 35, driver
# version 0), and with a driver older than the runtime: --device cuda says so, and what
# to do, before any line about the GPU; auto trains on the CPU, saying why.
part_nodriver() {
    STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 STOKE_FAKE_GPU_SCENARIO="$scenarios/cuda_nodriver.gpu" \
        run nodriver --model mlp --device cuda
    rc=$?
    if [ $rc -eq 1 ] && grep -q '^stoke train: device cuda:0 (flag): no NVIDIA driver: the CUDA runtime 13.0 is installed but the driver.s library libcuda.so.1 is not found (cudaGetDeviceCount: error 35); install the NVIDIA driver; or train on the CPU (--device cpu)' "$work/nodriver.txt"; then
        ok "--device cuda without a driver: what is missing and what to do"
    else
        fail "no driver: exit $rc"; show "$work/nodriver.txt"
    fi
    if grep -q '^device: \|^pinned memory\|pinned memory: \|^MFU\|^precision: ' "$work/nodriver.txt"; then
        fail "no driver: decisions about the GPU printed before the error"; show "$work/nodriver.txt"
    else
        ok "no driver: nothing said about the GPU before the error"
    fi
    STOKE_FAKE_GPU_SCENARIO="$scenarios/cuda_old_driver.gpu" run old_driver --model mlp --device cuda
    rc=$?
    if [ $rc -eq 1 ] && grep -q 'device cuda:0 (flag): the NVIDIA driver is older than the CUDA runtime: it supports CUDA up to 12.2, the runtime is 13.0 (cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version, error 35); install a newer NVIDIA driver; or train on the CPU (--device cpu)' "$work/old_driver.txt" &&
        ! grep -q '^device: ' "$work/old_driver.txt"; then
        ok "--device cuda with an old driver: its CUDA version and the runtime's"
    else
        fail "old driver: exit $rc"; show "$work/old_driver.txt"
    fi
    STOKE_FAKE_GPU_SCENARIO="$scenarios/cuda_old_driver.gpu" run old_driver_auto --model mlp
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^device: ' "$work/old_driver_auto.txt")" -eq 1 ] &&
        grep -q '^device: cpu (auto: the CUDA backend cannot run on cuda:0: the NVIDIA driver is older than the CUDA runtime' "$work/old_driver_auto.txt"; then
        ok "auto with an old driver: the CPU, saying why, once"
    else
        fail "old driver, auto: exit $rc"; show "$work/old_driver_auto.txt"
    fi
}

case $part in
actor_critic) part_actor_critic; e2e_end; exit ;;
module) part_module; e2e_end; exit ;;
nodriver) part_nodriver; e2e_end; exit ;;
main) ;;
*) echo "unknown part '$part' (main, actor_critic, module, nodriver)"; exit 2 ;;
esac

# Every preset the CUDA backend runs, on few samples (the doubles compute in double
# precision loops); the MLP's run is the one the rest of this script reads.
for model in mlp transformer cnn resnet; do
    case $model in
    mlp) size="" ;;
    transformer) size="--limit 192 --batch-size 32 --val-limit 64" ;;
    *) size="--limit 96 --batch-size 32 --val-limit 32" ;; # convolutions: cuDNN's double is slow
    esac
    run "gpu_$model" --model "$model" --device cuda --precision fp32 $size \
        --checkpoint "$work/gpu_$model.safetensors"
    rc=$?
    if [ $rc -eq 0 ]; then ok "$model trains with --device cuda"; else fail "$model on cuda: exit $rc"; show "$work/gpu_$model.txt"; fi
    run "cpu_$model" --model "$model" --device cpu --precision fp32 $size
    if same_run "gpu_$model" "cpu_$model" 1e-4; then
        ok "$model: the GPU run's losses are the CPU run's"
    else
        fail "$model: GPU and CPU losses differ"
    fi
done

for want in '^device: cuda:0 (flag)' '^precision: fp32 (flag)' \
            '^threads: .*1 queues the GPU' '^pinned memory: yes\|pinned memory: yes' \
            '^device copy: batches go to the GPU from pinned slots' \
            '^CUDA graphs: [0-9]* captured (a forward and a backward per batch size, the optimizer'; do
    if grep -q -- "$want" "$work/gpu_mlp.txt"; then ok "output has '$want'"; else fail "output lacks '$want'"; show "$work/gpu_mlp.txt"; fi
done
if grep -q '"device":"cuda:0","device_name":"CUDA device 0 (compute capability 9.0), kernels: host' "$work/gpu_mlp.jsonl"; then
    ok "the log's start record names the device"
else
    fail "the log's start record lacks the device"; head -1 "$work/gpu_mlp.jsonl"
fi

# A checkpoint trained on the GPU evaluates on the CPU to the loss the run validated.
"$stoke" eval "$work/gpu_mlp.safetensors" --limit 300 >"$out" 2>&1
if /usr/bin/python3 - "$out" "$work/gpu_mlp.jsonl" <<'PY'
import json, re, sys
loss = float(re.search(r"loss ([0-9.]+)", open(sys.argv[1]).read()).group(1))
val = [json.loads(l) for l in open(sys.argv[2]) if '"type":"epoch"' in l][-1]["val_loss"]
assert abs(loss - val) <= 2e-4 * max(1, val), (loss, val)
PY
then ok "stoke eval on the CPU of a GPU checkpoint"; else fail "eval of the GPU checkpoint"; show "$out"; fi

# Resumed across devices: GPU epoch 1 then CPU epoch 2, and CPU then GPU, each as the
# straight two-epoch run on the CPU.
run cpu_part --model mlp --device cpu --precision fp32 --epochs 2 --checkpoint "$work/cpu1.safetensors" --max-steps 13
run gpu_part --model mlp --device cuda --precision fp32 --epochs 2 --checkpoint "$work/gpu1.safetensors" --max-steps 7
run cpu_full --model mlp --device cpu --precision fp32 --epochs 2
"$stoke" train --resume "$work/gpu1.safetensors" --max-steps 0 --device cpu \
    --log "$work/gpu_then_cpu.jsonl" >"$out" 2>&1 || { fail "resume a GPU checkpoint on the CPU"; show "$out"; }
"$stoke" train --resume "$work/cpu1.safetensors" --max-steps 0 --device cuda \
    --log "$work/cpu_then_gpu.jsonl" >"$out" 2>&1 || { fail "resume a CPU checkpoint on the GPU"; show "$out"; }
if /usr/bin/python3 - "$work/cpu_full.jsonl" "$work/gpu_then_cpu.jsonl" "$work/cpu_then_gpu.jsonl" <<'PY'
import json, sys
def last(p):
    return [json.loads(l) for l in open(p) if '"type":"epoch"' in l][-1]["val_loss"]
full = last(sys.argv[1])
for p in sys.argv[2:]:
    v = last(p)
    assert abs(v - full) <= 1e-3 * max(1, full), (p, v, full)
PY
then ok "checkpoints move between the GPU and the CPU mid-run"; else fail "cross-device resume"; fi

# SIGINT while training on the GPU: the step ends, the weights come back to the host
# and the checkpoint is written; the CPU resumes from it.
ck=$work/sig.safetensors
"$stoke" train $small --model mlp --device cuda --epochs 1000 --checkpoint "$ck" \
    --log "$work/sig.jsonl" --no-monitor >"$out" 2>&1 &
pid=$!
while [ ! -s "$work/sig.jsonl" ] && kill -0 $pid 2>/dev/null; do sleep 0.1; done
sleep 0.3
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && grep -q "stopped after step .*SIGINT.*checkpoint written" "$out" &&
    "$stoke" train --resume "$ck" --device cpu --max-steps 0 --epochs 2 --no-monitor >"$work/sig_resume.txt" 2>&1; then
    ok "SIGINT on the GPU writes a checkpoint the CPU resumes"
else
    fail "SIGINT on the GPU: exit $rc"; show "$out" "$work/sig_resume.txt"
fi

# bf16 on the GPU (auto on compute capability 9.0) as bf16 on the CPU: operands rounded
# alike, sums in another order.
run gpu_bf16 --model mlp --device cuda
grep -q '^precision: bf16 (auto: compute capability 9.0' "$work/gpu_bf16.txt" && ok "bf16 by compute capability" || { fail "precision line"; show "$work/gpu_bf16.txt"; }
run cpu_bf16 --model mlp --device cpu --precision bf16
same_run gpu_bf16 cpu_bf16 2e-2 && ok "bf16 GPU run as the CPU's" || fail "bf16 GPU and CPU differ"

# The seeds' transformer settings as a model file: width, blocks, heads, bf16 (auto on
# compute capability 9.0), accumulation to an effective batch of 64.
printf 'model: transformer\nwidth: 32\nblocks: 2\nheads: 4\npatch: 7\n' >"$work/vt.yaml"
vt="--model $work/vt.yaml --limit 256 --val-limit 64 --batch-size 16 --accumulate 4"
run gpu_vt $vt --device cuda || { fail "transformer file on cuda"; show "$work/gpu_vt.txt"; }
run cpu_vt $vt --device cpu --precision bf16
grep -q 'batch 16 x 4 accumulated = 64' "$work/gpu_vt.txt" && same_run gpu_vt cpu_vt 2e-2 &&
    ok "a transformer file in bf16 with accumulation: the GPU run as the CPU's" ||
    { fail "transformer file, bf16, accumulation"; show "$work/gpu_vt.txt"; }

# Out of GPU memory: the micro-batch halves, accumulation doubles, the effective batch
# and so the run stay the same.
STOKE_FAKE_CUDA_MALLOC_LIMIT=16500000 run gpu_small --model mlp --device cuda --precision fp32 --batch-size 128
if grep -q '^GPU memory: the plan needs .* batch 64 x 2 accumulated instead' "$work/gpu_small.txt"; then
    ok "a GPU too small for the batch halves it"
else
    fail "no halving"; show "$work/gpu_small.txt"
fi
run cpu_128 --model mlp --device cpu --precision fp32 --batch-size 128
if /usr/bin/python3 - "$work/gpu_small.jsonl" "$work/cpu_128.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"type":"epoch"' in l][-1]["val_loss"] for p in sys.argv[1:])
assert abs(a - b) <= 1e-3 * max(1, b), (a, b)
PY
then ok "64 x 2 accumulated on the GPU validates as 128 on the CPU"; else fail "halved run differs"; fi
STOKE_FAKE_CUDA_MALLOC_LIMIT=1000000 run gpu_tiny --model mlp --device cuda
rc=$?
if [ $rc -eq 1 ] && grep -q 'needs .* MB of GPU memory at batch 1' "$work/gpu_tiny.txt"; then
    ok "a GPU too small for batch 1: a clear error"
else
    fail "tiny GPU: exit $rc"; show "$work/gpu_tiny.txt"
fi

# --dry-run on the GPU: the CUDA backend's plan against 90% of the GPU's free memory.
STOKE_FAKE_CUDA_MALLOC_LIMIT=400000000 "$stoke" train --model mlp --device cuda --dry-run >"$out" 2>&1
if grep -q '^largest batch within 360.0 MB less ' "$out" && grep -q '^memory plan for batch 128' "$out"; then
    ok "--dry-run plans on the GPU's memory"
else
    fail "--dry-run on the GPU"; show "$out"
fi

# auto: the GPU when the backend can run there, else the CPU and why; asked for, an error.
STOKE_CUDA_KERNELS=/nonexistent/libstoke_cuda.so run auto_fallback --model mlp
if [ $? -eq 0 ] && grep -q '^device: cpu (auto: the CUDA backend cannot run on cuda:0: the CUDA kernels STOKE_CUDA_KERNELS=/nonexistent/libstoke_cuda.so: .*No such file' "$work/auto_fallback.txt"; then
    ok "auto falls back to the CPU, saying why"
else
    fail "auto fallback"; show "$work/auto_fallback.txt"
fi
STOKE_CUDA_KERNELS=/nonexistent/libstoke_cuda.so run cuda_missing --model mlp --device cuda
rc=$?
if [ $rc -eq 1 ] && grep -q 'STOKE_CUDA_KERNELS=/nonexistent/libstoke_cuda.so: .*No such file' "$work/cuda_missing.txt"; then
    ok "--device cuda without the kernels: a clear error"
else
    fail "--device cuda without kernels: exit $rc"; show "$work/cuda_missing.txt"
fi
# a library that is not stoke's kernel module
STOKE_CUDA_KERNELS="$STOKE_CUBLAS_LIBRARY" run not_module --model mlp --device cuda
rc=$?
if [ $rc -eq 1 ] && grep -q "libcublas.so.13 is not stoke's CUDA kernel module (no stoke_cuda_kernels_v1)" "$work/not_module.txt"; then
    ok "STOKE_CUDA_KERNELS naming another library: refused, named"
else
    fail "not a module: exit $rc"; show "$work/not_module.txt"
fi
STOKE_FAKE_GPU_SCENARIO=/dev/null run no_gpu --model mlp
grep -q '^device: cpu (auto: no GPU found)' "$work/no_gpu.txt" && ok "no GPU: the CPU" || { fail "no GPU"; show "$work/no_gpu.txt"; }
STOKE_DEVICE=cpu run env_cpu --model mlp
grep -q '^device: cpu (env)' "$work/env_cpu.txt" && ok "STOKE_DEVICE=cpu" || { fail "STOKE_DEVICE"; show "$work/env_cpu.txt"; }
for bad in gpu cuda:x cuda:-1; do
    run bad --model mlp --device "$bad"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "device.*'$bad' is not auto, cpu, cuda or cuda:N" "$work/bad.txt"; then
        ok "--device $bad refused"
    else
        fail "--device $bad: exit $rc"; show "$work/bad.txt"
    fi
done
run past --model mlp --device cuda:99999
rc=$?
if [ $rc -ne 0 ] && grep -q "^stoke train: --device: 'cuda:99999': stoke addresses at most 16 GPUs, cuda:0 to cuda:15" "$work/past.txt"; then
    ok "--device cuda:99999: the limit said"
else
    fail "--device cuda:99999: exit $rc"; show "$work/past.txt"
fi
run absent --model mlp --device cuda:3
rc=$?
if [ $rc -eq 1 ] && grep -q 'CUDA device 3 does not exist (1 found)' "$work/absent.txt"; then
    ok "--device cuda:3 on a one-GPU machine"
else
    fail "cuda:3: exit $rc"; show "$work/absent.txt"
fi

# `stoke probe` says whether the backend runs on each GPU, and why not.
"$stoke" probe >"$out" 2>&1
grep -q 'stoke train   runs here: CUDA device 0 (compute capability 9.0), kernels: host' "$out" &&
    ok "probe: the backend runs on the GPU" || { fail "probe's backend line"; show "$out"; }
STOKE_CUDA_KERNELS=/nonexistent/libstoke_cuda.so "$stoke" probe --json >"$out" 2>&1
if /usr/bin/python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))["gpus"][0]["cuda_backend"]
assert g["ready"] is False and "/nonexistent/libstoke_cuda.so" in g["detail"], g
' "$out"; then ok "probe --json: why the backend cannot run"; else fail "probe --json cuda_backend"; show "$out"; fi

e2e_end
