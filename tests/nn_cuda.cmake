# The CUDA backend without a GPU: the CUDA runtime, cuBLAS and cuDNN test doubles
# (tests/fake) and the kernels' host build, against the CPU backend (test_nn_cuda.c).
# Labelled nn (OpenMP: not under ThreadSanitizer).
stoke_unit_test(test_nn_cuda test_nn_cuda.c)
set_tests_properties(test_nn_cuda PROPERTIES LABELS nn)
add_dependencies(test_nn_cuda fake_cudart fake_cublas fake_cudnn)
target_compile_definitions(test_nn_cuda PRIVATE FAKE_CUDART="$<TARGET_FILE:fake_cudart>"
  FAKE_CUBLAS="$<TARGET_FILE:fake_cublas>" FAKE_CUDNN="$<TARGET_FILE:fake_cudnn>")
