# `stoke` itself, run as a user would.
add_test(NAME e2e_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cli.sh $<TARGET_FILE:stoke>)
# `stoke config show` on Debian's Fashion-MNIST (skipped without it).
add_test(NAME config_show_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/config_show.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/config-show-e2e)
# label nn: it trains a model for a checkpoint, whose OpenMP regions the TSan build
# cannot see (scripts/check)
set_tests_properties(config_show_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
# `stoke tune` and auto in `stoke train` on Debian's Fashion-MNIST (skipped without it);
# label nn: it trains (the TSan build cannot see OpenMP).
add_test(NAME tune_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tune.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/tune-e2e)
set_tests_properties(tune_e2e PROPERTIES LABELS nn TIMEOUT 600 SKIP_RETURN_CODE 77)
# COST: about its seconds in a release build, so `ctest -j` starts the long tests
# first and the short ones fill in beside them (ordering only; nothing is timed).
set_tests_properties(tune_e2e PROPERTIES COST 60)
# What a newcomer met with auto (issue 24): resume, batch auto's steps and figures,
# reasons cut mid-word, rule against measured, train's help; label nn: it trains.
add_test(NAME tune_reasons_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tune_reasons.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/tune-reasons-e2e)
set_tests_properties(tune_reasons_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
# Precision left unset where the CPU's rule is unsure (AVX512-BF16 without AMX) is
# measured, fp32 against bf16; skipped (77, saying why) on a CPU without AVX512-BF16
# once the sure case is checked; label nn: it trains.
add_test(NAME tune_precision_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tune_precision.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/tune-precision-e2e)
set_tests_properties(tune_precision_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
# The tuning cache and the files stoke opens as a hostile user leaves them (issue 26):
# FIFOs (a hang fails by ctest's TIMEOUT), unreadable entries,
# long dataset paths, cached values out of bounds, outputs checked before the work.
add_test(NAME tune_cache_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tune_cache.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/tune-cache-e2e ${CMAKE_CURRENT_BINARY_DIR}/fake)
set_tests_properties(tune_cache_e2e PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
# `stoke bench` on Debian's Fashion-MNIST (skipped without it); label nn: it trains
add_test(NAME bench_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bench.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/bench-e2e)
set_tests_properties(bench_e2e PROPERTIES LABELS nn TIMEOUT 600 SKIP_RETURN_CODE 77)
