# The training benchmark's matrix-multiply peak driver (bench/train_bench.sh runs it; not
# a test): OpenBLAS and oneDNN at 1024^3, fp32 and bf16.
add_executable(stoke_bench_sgemm ${PROJECT_SOURCE_DIR}/bench/train_bench.c)
target_include_directories(stoke_bench_sgemm PRIVATE ${DNNL_INCLUDE})
target_link_libraries(stoke_bench_sgemm PRIVATE ${DNNL_LIB} PkgConfig::OPENBLAS OpenMP::OpenMP_C)
