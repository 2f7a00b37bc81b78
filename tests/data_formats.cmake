# The dataset formats stoke owns (IDX, NPY, packed records) and `stoke data`. The
# fixtures are written at test time by numpy / gzip (tests/data/make_fixtures.py) into
# the build tree; nothing generated is committed.
set(STOKE_DATA_FIXTURES ${CMAKE_CURRENT_BINARY_DIR}/data-fixtures)
add_test(NAME data_fixtures
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/data/make_fixtures.py
                 ${STOKE_DATA_FIXTURES})
set_tests_properties(data_fixtures PROPERTIES FIXTURES_SETUP data_fixtures TIMEOUT 120)

stoke_unit_test(test_data_formats test_data_formats.c)
target_compile_definitions(test_data_formats PRIVATE
                           STOKE_DATA_FIXTURES="${STOKE_DATA_FIXTURES}")
set_tests_properties(test_data_formats PROPERTIES FIXTURES_REQUIRED data_fixtures
                     TIMEOUT 120)

add_test(NAME data_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/data.sh $<TARGET_FILE:stoke>
                 ${STOKE_DATA_FIXTURES} ${CMAKE_CURRENT_BINARY_DIR}/data-e2e
                 $<TARGET_FILE:stoke_seams>)
set_tests_properties(data_e2e PROPERTIES FIXTURES_REQUIRED data_fixtures TIMEOUT 120)

add_test(NAME data_options_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/data_options.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/data-options-e2e)

add_test(NAME data_bench_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/data_bench.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/data-bench-e2e)
set_tests_properties(data_bench_e2e PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
