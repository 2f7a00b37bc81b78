# The data pipeline's sampler, transforms and loader (with the CUDA runtime double),
# and the loader benchmark's driver (bench/loader_bench.sh runs it; not a test).
stoke_unit_test(test_transform test_transform.c)
stoke_torch_test(test_transform)
# RandomResizedCrop and resize-shorter + centre crop; the part "pillow" needs Pillow.
stoke_unit_test(test_rrc test_rrc.c)
stoke_part_test(test_rrc pillow)
stoke_unit_test(test_loader test_loader.c)
stoke_part_test(test_loader fashion_mnist)
add_dependencies(test_loader fake_cudart)
target_compile_definitions(test_loader PRIVATE FAKE_CUDART="$<TARGET_FILE:fake_cudart>")

add_executable(stoke_bench_loader ${PROJECT_SOURCE_DIR}/bench/loader_bench.c)
target_include_directories(stoke_bench_loader PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(stoke_bench_loader PRIVATE _GNU_SOURCE)
target_link_libraries(stoke_bench_loader PRIVATE stoke_lib)

# The resize (AVX2 and AVX-512 against scalar), scaled JPEG decode, damaged JPEGs among
# good ones; and the resize benchmark (bench/resize_bench.c; not a test).
stoke_unit_test(test_resize test_resize.c)
set_tests_properties(test_resize PROPERTIES TIMEOUT 120)
# the AVX2 resize against the scalar one, bit for bit; a skip where AVX2 is not usable
stoke_part_test(test_resize simd)
set_tests_properties(test_resize_simd PROPERTIES TIMEOUT 120)
# the AVX-512 resize against the scalar one; a skip where AVX-512 F and BW are not usable
stoke_part_test(test_resize simd512)
set_tests_properties(test_resize_simd512 PROPERTIES TIMEOUT 120)
# Again with the instruction-set cap below AVX2, then at AVX2: the resize must honour it
# (scalar; AVX2 at most, whatever level is asked for).
add_test(NAME test_resize_sse41 COMMAND test_resize)
set_tests_properties(test_resize_sse41 PROPERTIES ENVIRONMENT STOKE_MAX_CPU_ISA=sse41 TIMEOUT 120)
add_test(NAME test_resize_avx2cap COMMAND test_resize)
set_tests_properties(test_resize_avx2cap PROPERTIES ENVIRONMENT STOKE_MAX_CPU_ISA=avx2 TIMEOUT 120)
add_executable(stoke_bench_resize ${PROJECT_SOURCE_DIR}/bench/resize_bench.c)
target_include_directories(stoke_bench_resize PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(stoke_bench_resize PRIVATE _GNU_SOURCE)
target_link_libraries(stoke_bench_resize PRIVATE stoke_lib)
# RandomResizedCrop and the validation transform on the originals (partial, scaled JPEG
# decode); the part "pillow" compares with Pillow.
stoke_unit_test(test_originals test_originals.c)
stoke_part_test(test_originals pillow)
# the decode-only limit of bench/image_pipeline.sh (not a test)
add_executable(stoke_bench_decode ${PROJECT_SOURCE_DIR}/bench/jpeg_decode_bench.c)
target_link_libraries(stoke_bench_decode PRIVATE PkgConfig::TURBOJPEG)
