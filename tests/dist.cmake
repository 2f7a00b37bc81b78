# Data parallel (src/dist, docs/distributed.md). The reducer's communication thread,
# without MPI or a model, so the TSan build checks it too.
stoke_unit_test(test_dist_comm test_dist_comm.c)
set_tests_properties(test_dist_comm PROPERTIES TIMEOUT 60)

# `mpirun -np 2 stoke train` against one process, --nproc, resume with 2 and 1 ranks, a
# killed rank, the misuses (tests/e2e/train_dist.sh; skipped without mpirun).
add_test(NAME train_dist_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_dist.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-dist-e2e)
set_tests_properties(train_dist_e2e PROPERTIES LABELS nn TIMEOUT 600 SKIP_RETURN_CODE 77)
# COST: about its seconds in a release build, so `ctest -j` starts the long tests
# first and the short ones fill in beside them (ordering only; nothing is timed).
set_tests_properties(train_dist_e2e PROPERTIES COST 80)
