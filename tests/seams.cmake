# stoke_seams: the `stoke` command with the test seams its environment asks for
# (tests/stoke_seams.c: the CPU allocator refusing large blocks, a training step's
# fault, the file writer held mid-write), for the e2e cases of train_batch.sh, data.sh
# and train.sh. The CLI's own sources, their main renamed, so the command is the built
# binary's.
add_executable(stoke_seams stoke_seams.c ${STOKE_CLI_SOURCES})
target_include_directories(stoke_seams PRIVATE ${PROJECT_SOURCE_DIR}/src
                           ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(stoke_seams PRIVATE _GNU_SOURCE main=stoke_cli_main)
# main.c's main, renamed, has no prototype there: main never needs one.
target_compile_options(stoke_seams PRIVATE -Wno-missing-prototypes)
target_link_libraries(stoke_seams PRIVATE stoke_lib)
