# Packed records that keep the JPEG bytes (version 2, `stoke data convert --store jpeg`):
# the round trip against the image folder, corrupt fields, the loader over both.
stoke_unit_test(test_records_jpeg test_records_jpeg.c)
set_tests_properties(test_records_jpeg PROPERTIES TIMEOUT 120)
add_test(NAME records_jpeg_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/records_jpeg.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/records-jpeg-e2e)
set_tests_properties(records_jpeg_e2e PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
# The benchmark (bench/jpeg_records_bench.c; not a test): sizes and read rates of
# --store jpeg, --store pixels and the folder.
add_executable(stoke_bench_jpeg_records ${PROJECT_SOURCE_DIR}/bench/jpeg_records_bench.c)
target_include_directories(stoke_bench_jpeg_records PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(stoke_bench_jpeg_records PRIVATE _GNU_SOURCE)
target_link_libraries(stoke_bench_jpeg_records PRIVATE stoke_lib)
