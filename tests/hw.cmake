# The CPU, memory, storage and whole-machine probes, and `stoke probe` end to end
# (with no GPU library, and with the GPU test doubles replaying tests/scenarios/).
stoke_unit_test(test_hw test_hw.c)

add_test(NAME e2e_probe
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/probe.sh $<TARGET_FILE:stoke>
                 $<TARGET_FILE:fake_nvml> $<TARGET_FILE:fake_cudart>
                 ${CMAKE_CURRENT_SOURCE_DIR}/scenarios)
