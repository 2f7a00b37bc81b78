# `stoke` itself, run as a user would.
add_test(NAME e2e_cli COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cli.sh $<TARGET_FILE:stoke>)
