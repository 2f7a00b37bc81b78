# stoke_write_pause: the `stoke` command with core's chunk hook installed
# (tests/write_pause.c), for the signals-mid-write cases of e2e/data.sh and train.sh.
# The CLI's own sources, their main renamed, so the command is the built binary's.
add_executable(stoke_write_pause write_pause.c ${STOKE_CLI_SOURCES})
target_include_directories(stoke_write_pause PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(stoke_write_pause PRIVATE _GNU_SOURCE main=stoke_cli_main)
target_link_libraries(stoke_write_pause PRIVATE stoke_lib)
# main.c's main, renamed, has no prototype there: main never needs one.
target_compile_options(stoke_write_pause PRIVATE -Wno-missing-prototypes)
