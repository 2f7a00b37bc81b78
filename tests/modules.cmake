# The wall between modules: core, hw, data and nn include only what they may depend on.
add_test(NAME module_deps
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/module_deps.py ${PROJECT_SOURCE_DIR})
# The environment is read in one place (src/core/env.c) and every variable read is in
# docs/environment.md, and nothing else is.
add_test(NAME env_readers
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/env_readers.py ${PROJECT_SOURCE_DIR})
