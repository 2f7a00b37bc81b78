# The CPU, memory, storage and whole-machine probes.
stoke_unit_test(test_hw test_hw.c)
