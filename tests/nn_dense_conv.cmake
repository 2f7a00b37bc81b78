# The CPU backend's linear, convolution and pooling kernels (label nn), and the kernel
# benchmark's executable (bench/kernels_bench.c; not a test).
stoke_nn_test(test_nn_dense_conv test_nn_dense_conv.c)
stoke_nn_test(test_nn_fusion test_nn_fusion.c)

add_executable(stoke_bench_kernels ${PROJECT_SOURCE_DIR}/bench/kernels_bench.c)
target_include_directories(stoke_bench_kernels PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(stoke_bench_kernels PRIVATE _GNU_SOURCE)
target_link_libraries(stoke_bench_kernels PRIVATE stoke_lib)
