# libFuzzer targets, one per parser stoke owns (tests/fuzz/<name>.c, seeds in
# tests/fuzz/corpus/<name>/, tokens in tests/fuzz/<name>.dict where there is one). Each
# is also a ctest that fuzzes for STOKE_FUZZ_SECONDS, writing new inputs into the build
# tree, never the sources.
if(STOKE_FUZZ)
  set(STOKE_FUZZ_SECONDS 20 CACHE STRING "seconds each fuzz target runs under ctest")
  file(GLOB STOKE_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/*.c)
  foreach(src ${STOKE_FUZZ_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${name} PRIVATE stoke_lib)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/${name})
    file(MAKE_DIRECTORY ${work})
    # A target's tokens (tests/fuzz/<name>.dict), which mutations alone rarely spell.
    set(dict ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}.dict)
    set(dict_arg)
    if(EXISTS ${dict})
      set(dict_arg -dict=${dict})
    endif()
    add_test(NAME ${name}
             COMMAND ${name} -max_total_time=${STOKE_FUZZ_SECONDS} -rss_limit_mb=2048
                     -print_final_stats=1 ${dict_arg} ${work}
                     ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  endforeach()
endif()
