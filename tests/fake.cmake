# GPU test doubles (see tests/fake/README.md) and the tests of the GPU driver tables.
function(stoke_fake_library target output suffix)
  add_library(${target} SHARED fake/${ARGV3} fake/scenario.c)
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${output} PREFIX "lib" SUFFIX ${suffix}
                        NO_SONAME ON LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake/${target})
  target_compile_options(${target} PRIVATE -Wno-missing-prototypes)
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
  target_link_libraries(${target} PRIVATE Threads::Threads)
endfunction()
stoke_fake_library(fake_nvml nvidia-ml .so.1 fake_nvml.c)
stoke_fake_library(fake_nvml_535 nvidia-ml .so.1 fake_nvml.c)
target_compile_definitions(fake_nvml_535 PRIVATE FAKE_STRIDE32)
stoke_fake_library(fake_cudart cudart .so.13 fake_cudart.c)
stoke_fake_library(fake_cublas cublas .so.13 fake_cublas.c)
target_sources(fake_cublas PRIVATE fake/fake_lib.c)
target_include_directories(fake_cublas PRIVATE ${PROJECT_SOURCE_DIR}/src)
stoke_fake_library(fake_cublaslt cublasLt .so.13 fake_cublaslt.c)
target_sources(fake_cublaslt PRIVATE fake/fake_lib.c)
target_include_directories(fake_cublaslt PRIVATE ${PROJECT_SOURCE_DIR}/src)
stoke_fake_library(fake_cudnn cudnn .so.9 fake_cudnn.c)
target_sources(fake_cudnn PRIVATE fake/fake_lib.c)
target_include_directories(fake_cudnn PRIVATE ${PROJECT_SOURCE_DIR}/src)
# NCCL for a world of threads (tests/dist_nccl.cmake), on the CUDA runtime double's streams
stoke_fake_library(fake_nccl nccl .so.2 fake_nccl.c)
target_include_directories(fake_nccl PRIVATE ${PROJECT_SOURCE_DIR}/src)
foreach(fake fake_cublas fake_cublaslt fake_cudnn fake_nccl)
  target_link_libraries(${fake} PRIVATE ${CMAKE_DL_LIBS})
endforeach()

stoke_unit_test(test_gpu test_gpu.c)
add_dependencies(test_gpu fake_nvml fake_nvml_535 fake_cudart)
target_compile_definitions(test_gpu PRIVATE
  FAKE_NVML="$<TARGET_FILE:fake_nvml>" FAKE_NVML_535="$<TARGET_FILE:fake_nvml_535>"
  FAKE_CUDART="$<TARGET_FILE:fake_cudart>")

stoke_unit_test(test_gpu_libs test_gpu_libs.c)
# NVIDIA's own cuBLAS, cuBLASLt and cuDNN: the toolkit's, or those STOKE_CUBLAS_LIBRARY etc.
# name (the GPU kit's), skipped where they do not load
stoke_part_test(test_gpu_libs real_libraries)
add_dependencies(test_gpu_libs fake_cudart fake_cublas fake_cublaslt fake_cudnn)
target_compile_definitions(test_gpu_libs PRIVATE FAKE_CUDART="$<TARGET_FILE:fake_cudart>"
  FAKE_CUBLAS="$<TARGET_FILE:fake_cublas>" FAKE_CUBLASLT="$<TARGET_FILE:fake_cublaslt>"
  FAKE_CUDNN="$<TARGET_FILE:fake_cudnn>")

# The ABI constants of src/hw/gpu_impl.h and src/nn/cuda/libs.h (cuBLASLt's included) checked against the toolkit's own headers,
# compiled by nvcc wherever it is installed.
if(STOKE_HAVE_CUDA)
  add_executable(cuda_abi_check abi/cuda_abi_check.cu)
  target_include_directories(cuda_abi_check PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(cuda_abi_check PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
  # cuDNN is not part of the toolkit: checked where its headers and library are found.
  find_path(STOKE_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(STOKE_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR}
               PATHS /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64)
  if(STOKE_CUDNN_INCLUDE AND STOKE_CUDNN_LIB)
    target_include_directories(cuda_abi_check PRIVATE ${STOKE_CUDNN_INCLUDE})
    target_link_libraries(cuda_abi_check PRIVATE ${STOKE_CUDNN_LIB})
    target_compile_definitions(cuda_abi_check PRIVATE STOKE_ABI_CUDNN=1)
  else()
    target_compile_definitions(cuda_abi_check PRIVATE STOKE_ABI_CUDNN=0)
  endif()
  add_test(NAME cuda_abi_check COMMAND cuda_abi_check)
endif()
