# The CPU backend's norm, element-wise and attention kernels against float64
# references, finite differences and (where installed) torch via nn_norm_attn_ref.py.
stoke_nn_test(test_nn_norm_eltwise test_nn_norm_eltwise.c)
stoke_torch_test(test_nn_norm_eltwise)
stoke_nn_test(test_nn_attn test_nn_attn.c)
stoke_torch_test(test_nn_attn)

# The kernels' benchmark driver (not a test): bench/nn_norm_attn_bench.c, with
# bench/nn_norm_attn_torch.py timing PyTorch on the same shapes.
add_executable(stoke_bench_nn_norm_attn ${PROJECT_SOURCE_DIR}/bench/nn_norm_attn_bench.c)
target_include_directories(stoke_bench_nn_norm_attn PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(stoke_bench_nn_norm_attn PRIVATE _GNU_SOURCE)
target_link_libraries(stoke_bench_nn_norm_attn PRIVATE stoke_lib)
