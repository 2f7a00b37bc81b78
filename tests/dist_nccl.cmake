# Data parallel on GPUs without one: the NCCL transport (src/dist/nccl.c) over NCCL's
# test double in a world of threads, on the CUDA doubles (tests/fake). Labelled nn: its
# models are the CUDA backend's (OpenMP, not under ThreadSanitizer).
stoke_unit_test(test_dist_nccl test_dist_nccl.c)
set_tests_properties(test_dist_nccl PROPERTIES LABELS nn TIMEOUT 300 SKIP_RETURN_CODE 77)
add_dependencies(test_dist_nccl fake_cudart fake_cublas fake_cublaslt fake_cudnn fake_nccl)
target_compile_definitions(test_dist_nccl PRIVATE FAKE_CUDART="$<TARGET_FILE:fake_cudart>"
  FAKE_CUBLAS="$<TARGET_FILE:fake_cublas>" FAKE_CUBLASLT="$<TARGET_FILE:fake_cublaslt>"
  FAKE_CUDNN="$<TARGET_FILE:fake_cudnn>" FAKE_NCCL="$<TARGET_FILE:fake_nccl>")

# The NCCL values of src/dist/nccl_abi.h checked against NCCL's nccl.h where the toolkit
# (or libnccl-dev) has it.
if(STOKE_HAVE_CUDA)
  find_path(STOKE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(STOKE_NCCL_INCLUDE)
    add_executable(nccl_abi_check abi/nccl_abi_check.c)
    target_include_directories(nccl_abi_check PRIVATE ${PROJECT_SOURCE_DIR}/src)
    # a vendor header: its old-style declarations are not ours to warn about
    target_include_directories(nccl_abi_check SYSTEM PRIVATE ${STOKE_NCCL_INCLUDE}
                               ${CUDAToolkit_INCLUDE_DIRS})
    add_test(NAME nccl_abi_check COMMAND nccl_abi_check)
  endif()
endif()
# NVIDIA's libnccl.so.2 loaded into the table (its functions by name, 2.10 or newer),
# skipped where it is not installed
stoke_part_test(test_dist_nccl real_library)
