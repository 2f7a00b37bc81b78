# The recommendation rules and the peak FLOP/s arithmetic, on machines built in C.
stoke_unit_test(test_tune test_tune.c)
