#!/bin/sh
# nn_cuda_real.sh TEST_NN_CUDA - `test_nn_cuda --real` as the GPU kit runs it, here on
# the test doubles: the environment (tests/nn_cuda.cmake) names them and the kernels'
# host build where the kit names NVIDIA's libraries and libstoke_cuda.so. Passes when
# the run passes and every test that reads the doubles said it was skipped, each with
# its reason, and nothing else was: a test reading them must not pass by checking
# nothing, and a portable one must not be left out.
set -u
out=$("$1" --real)
status=$?
printf '%s\n' "$out"
[ "$status" -eq 0 ] || exit "$status"
fail() {
    echo "nn_cuda_real.sh: $*" >&2
    exit 1
}
for line in "device: " "TF32 pass on: "; do
    printf '%s\n' "$out" | grep -q "^$line" || fail "no line '$line...'"
done
skipped="device of the doubles
phase clock
step waits
graphs refused
fused chains
conv plans kept
tf32 calls
cudnn clean
lt epilogues
lt clean"
printf '%s\n' "$skipped" | while IFS= read -r t; do
    printf '%s\n' "$out" | grep -q "^skip: $t (needs the CUDA test doubles: .*)\$" ||
        fail "'$t' did not say it was skipped"
done || exit 1
want=$(printf '%s\n' "$skipped" | wc -l)
got=$(printf '%s\n' "$out" | grep -c '^skip: ')
[ "$got" -eq "$want" ] || fail "$got tests skipped, $want expected"
