# The CUDA backend without a GPU: the CUDA runtime, cuBLAS, cuBLASLt and cuDNN test doubles
# (tests/fake) and the kernels' host build, against the CPU backend (test_nn_cuda.c).
# Labelled nn (OpenMP: not under ThreadSanitizer).
stoke_unit_test(test_nn_cuda test_nn_cuda.c)
set_tests_properties(test_nn_cuda PROPERTIES LABELS nn)
add_dependencies(test_nn_cuda fake_cudart fake_cublas fake_cublaslt fake_cudnn)
target_compile_definitions(test_nn_cuda PRIVATE FAKE_CUDART="$<TARGET_FILE:fake_cudart>"
  FAKE_CUBLAS="$<TARGET_FILE:fake_cublas>" FAKE_CUBLASLT="$<TARGET_FILE:fake_cublaslt>"
  FAKE_CUDNN="$<TARGET_FILE:fake_cudnn>")
# test_nn_cuda --real as the GPU kit runs it (docs/gpu.md), here on the doubles: the
# environment names them and the kernels' host build where the kit names NVIDIA's
# libraries and libstoke_cuda.so. The wrapper also checks the skip lines.
add_test(NAME test_nn_cuda_real_mode
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/nn_cuda_real.sh $<TARGET_FILE:test_nn_cuda>)
set(STOKE_REAL_MODE_ENV STOKE_CUDART_LIBRARY=$<TARGET_FILE:fake_cudart>
    STOKE_CUBLAS_LIBRARY=$<TARGET_FILE:fake_cublas> STOKE_CUBLASLT_LIBRARY=$<TARGET_FILE:fake_cublaslt>
    STOKE_CUDNN_LIBRARY=$<TARGET_FILE:fake_cudnn> STOKE_CUDA_KERNELS=host
    STOKE_FAKE_GPU_SCENARIO=${CMAKE_CURRENT_SOURCE_DIR}/scenarios/cuda_train.gpu)
set_tests_properties(test_nn_cuda_real_mode PROPERTIES LABELS nn ENVIRONMENT "${STOKE_REAL_MODE_ENV}")

# `stoke train --device cuda` end to end on the doubles, against the CPU backend.
add_test(NAME train_cuda_e2e
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_cuda.sh $<TARGET_FILE:stoke>
                 ${CMAKE_CURRENT_BINARY_DIR}/train-cuda-e2e ${CMAKE_CURRENT_BINARY_DIR}/fake
                 ${CMAKE_CURRENT_SOURCE_DIR}/scenarios)
# The timeout only catches a hang: about 50 s in a release build on 2 cores (the
# doubles read their operands into doubles once per call: tests/fake/fake_lib.h), a few
# times that under ASan beside the sanitized suite's other tests.
set_tests_properties(train_cuda_e2e PROPERTIES LABELS nn TIMEOUT 1200 SKIP_RETURN_CODE 77)
# COST: about its seconds in a release build, so `ctest -j` starts the long tests
# first and the short ones fill in beside them (ordering only; nothing is timed).
set_tests_properties(train_cuda_e2e PROPERTIES COST 50)
# Its parts that need a reference the machine may lack, each skipped (77) with the reason:
# numpy for the actor-critic's rollouts, nvcc's libstoke_cuda.so for the module's check;
# and nodriver, the CUDA runtime on a machine without the NVIDIA driver or with an old one.
foreach(part actor_critic module nodriver)
  add_test(NAME train_cuda_e2e_${part}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/train_cuda.sh $<TARGET_FILE:stoke>
                   ${CMAKE_CURRENT_BINARY_DIR}/train-cuda-e2e-${part} ${CMAKE_CURRENT_BINARY_DIR}/fake
                   ${CMAKE_CURRENT_SOURCE_DIR}/scenarios ${part})
  set_tests_properties(train_cuda_e2e_${part} PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
