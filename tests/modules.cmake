# The wall between modules: core, hw, data and nn include only what they may depend on.
add_test(NAME module_deps
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/module_deps.py ${PROJECT_SOURCE_DIR})
