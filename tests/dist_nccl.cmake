# Data parallel on GPUs without one: the NCCL transport (src/dist/nccl.c) over NCCL's
# test double in a world of threads, on the CUDA doubles (tests/fake). Labelled nn: its
# models are the CUDA backend's (OpenMP, not under ThreadSanitizer).
stoke_unit_test(test_dist_nccl test_dist_nccl.c)
set_tests_properties(test_dist_nccl PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
add_dependencies(test_dist_nccl fake_cudart fake_cublas fake_cublaslt fake_cudnn fake_nccl)
target_compile_definitions(test_dist_nccl PRIVATE FAKE_CUDART="$<TARGET_FILE:fake_cudart>"
  FAKE_CUBLAS="$<TARGET_FILE:fake_cublas>" FAKE_CUBLASLT="$<TARGET_FILE:fake_cublaslt>"
  FAKE_CUDNN="$<TARGET_FILE:fake_cudnn>" FAKE_NCCL="$<TARGET_FILE:fake_nccl>")
