# The nn module's tests. stoke_nn_test is stoke_unit_test plus the ctest label nn,
# which the TSan build skips (OpenMP's libgomp is invisible to ThreadSanitizer).
function(stoke_nn_test name)
  stoke_unit_test(${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS nn)
endfunction()

stoke_nn_test(test_nn_graph test_nn_graph.c)
# Its models take the machine's compute threads (OpenMP's count at load): 2 everywhere.
set_tests_properties(test_nn_graph PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2")
# The backend context each model owns: thread counts and fusion per model.
stoke_nn_test(test_nn_backend test_nn_backend.c)
# Gradient checkpointing: recomputed segments train bit for bit as kept ones.
stoke_nn_test(test_nn_recompute test_nn_recompute.c)

# The CPU instruction-set cap (STOKE_MAX_CPU_ISA): kernel dispatch, conversions and
# oneDNN within the cap, each variant against serial references. Once with the
# caller's environment, once per cap (a cap above this CPU must change nothing), and
# once with a bad value.
stoke_nn_test(test_nn_isa test_nn_isa.c)
foreach(cap sse41 avx2 avx512_core avx512_core_vnni avx512_core_bf16 avx512_core_amx all avx3)
  add_test(NAME test_nn_isa_${cap} COMMAND test_nn_isa)
  set_tests_properties(test_nn_isa_${cap} PROPERTIES LABELS nn
                       ENVIRONMENT "STOKE_MAX_CPU_ISA=${cap}")
endforeach()

# Signals while oneDNN's JIT GEMMs run: the OpenMP team's alternate signal stacks keep
# the heap intact (core/sigstack.h); under every cap the label nn is run with.
stoke_nn_test(test_nn_sigstack test_nn_sigstack.c)

# The data-parallel seam (stoke_grad_reducer) and dist's one-process world: buckets in
# backward order, handed over during backward, and training bit for bit as without.
stoke_nn_test(test_dist test_dist.c)
