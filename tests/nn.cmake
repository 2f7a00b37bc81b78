# The nn module's tests. stoke_nn_test is stoke_unit_test plus the ctest label nn,
# which the TSan build skips (OpenMP's libgomp is invisible to ThreadSanitizer).
function(stoke_nn_test name)
  stoke_unit_test(${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS nn)
endfunction()

stoke_nn_test(test_nn_graph test_nn_graph.c)
